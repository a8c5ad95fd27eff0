"""The result convention: attributions in the inputs' form, and the extras asked for.

A method computes an :class:`Outcome` (per-feature values and named extras);
:func:`pack_result` packs it back to the inputs' shapes, dtypes and type, and
returns a NamedTuple (an :class:`Explanation`) when a ``return_*`` option
asked for extras. ``attribute``'s overloads key its static type on those
flags, so a type checker knows a tensor from an :class:`Explanation`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import namedtuple
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame

#: attributions in the inputs' form: one tensor, or one per input tensor
Attributions = Tensor | tuple[Tensor, ...]

#: the inputs' form, which the attributions keep (as Captum's ``TensorOrTupleOfTensorsGeneric``)
InputsT = TypeVar("InputsT", Tensor, tuple[Tensor, ...])


class Explanation(tuple[Any, ...], Generic[InputsT]):
    """Attributions and the extras a ``return_*`` option asked for: a NamedTuple.

    Its first field is ``attributions`` (the inputs' form: a tensor for a
    tensor, a tuple for a tuple), followed, in order, by the extras asked for
    and no others, so ``phi, half_width = explainer.attribute(x,
    return_uncertainty=True)`` unpacks as a pair; ``_fields`` names them. Each
    combination of extras is its own NamedTuple class, a subclass of this one,
    so ``isinstance(result, Explanation)`` tells a result with extras from
    plain attributions.

    The attributes below are those an extra may have; only the fields asked
    for exist on a result (another raises ``AttributeError``).

    Example:
        >>> import torch
        >>> from captum_graphshap import ExactShapley, Explanation
        >>> model = lambda x: x.sum(dim=1)
        >>> result = ExactShapley(model).attribute(torch.ones(2, 3), return_evaluations=True)
        >>> isinstance(result, Explanation), result._fields
        (True, ('attributions', 'n_evaluations'))
        >>> phi, count = result
        >>> phi
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
        >>> count  # every coalition of the 3 features, once
        tensor([8, 8])
    """

    __slots__ = ()

    _fields: ClassVar[tuple[str, ...]]
    #: the attributions, as ``attribute`` returns them without extras
    attributions: InputsT
    #: ``return_uncertainty``: interval half-widths, in the attributions' form
    half_width: InputsT
    #: ``return_evaluations``: the model evaluations per example, ``(N,)`` int64
    n_evaluations: Tensor
    #: ``return_derivative_evaluations`` (Shear): forward equivalents spent on derivatives
    derivative_evaluations: Tensor
    #: ``return_shapley`` (BivariateShapley): the ``(N, d)`` univariate values
    shapley: Tensor
    #: ``return_report`` (BayesShap): a ``BayesShapReport`` (a list of them, with the
    #: examples' indices, where examples were explained in groups or per output)
    report: Any
    #: ``return_residuals`` (ShapleyResiduals): a tensor (global), one per feature (local)
    edge_residuals: Tensor | list[Tensor]
    #: ``return_residuals``: the inessential games, as ``edge_residuals``
    inessential_games: Tensor | list[Tensor]
    #: ``return_residuals`` with ``k`` (local): each feature's neighbourhood
    neighbourhoods: list[Any]

    if TYPE_CHECKING:  # the NamedTuple methods, defined by each concrete class

        def _asdict(self) -> dict[str, Any]: ...


@dataclasses.dataclass
class Outcome:
    """What a method computed: per-feature values and named extras.

    ``attributions`` is ``(N, d)`` per feature (packed to the inputs' shapes
    by the base class) unless ``packed`` is False (Bivariate Shapley's
    ``(N, d, d)`` matrix). ``extras`` are returned, in order, after the
    attributions when their ``return_*`` option asked for them; those named
    in ``per_feature`` are ``(N, d)`` and packed like the attributions.
    """

    attributions: Tensor
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    per_feature: tuple[str, ...] = ()
    packed: bool = True


@functools.lru_cache(maxsize=64)
def explanation_type(fields: tuple[str, ...]) -> type[Explanation[Any]]:
    """The NamedTuple returned when a ``return_*`` option asks for extras.

    Its first field is ``attributions``, so ``phi, half_width = ...`` unpacks
    as before; the others are named (``half_width``, ``n_evaluations``, ...).
    It derives from :class:`Explanation`.
    """
    fields_type = namedtuple("Explanation", ("attributions", *fields))  # type: ignore[misc]
    namespace = {
        "__slots__": (),
        "__module__": __name__,
        "__doc__": "Attributions and the extras asked for: " + ", ".join(fields) + ".",
    }
    return type("Explanation", (fields_type, Explanation), namespace)


#: which ``return_*`` option asks for an extra (default: ``return_<name>``)
EXTRA_FLAGS = {
    "half_width": "return_uncertainty",
    "n_evaluations": "return_evaluations",
    "edge_residuals": "return_residuals",
    "inessential_games": "return_residuals",
    "neighbourhoods": "return_residuals",
}


def flag_of(extra: str) -> str:
    """The ``return_*`` option that asks for ``extra``."""
    return EXTRA_FLAGS.get(extra, f"return_{extra}")


def pack_result(
    game: CoalitionGame,
    outcome: Outcome,
    options: Any,
    is_tuple: bool,
    aggregated: bool = False,
    per_feature: bool = False,
) -> Attributions | Explanation[Any]:
    """Pack the outcome to the inputs' shapes; a NamedTuple when extras were asked for.

    ``per_feature``: the ``(N, d)`` values themselves (Captum's
    ``return_input_shape=False``). ``aggregated``: ``game`` explained a whole
    batch as one example (inputs
    ``(1, N, ...)``); Captum returns ``(outputs, *input.shape[1:])`` then, one
    row per model output, and every example's slice holds the same values.
    """
    extras = dict(outcome.extras)
    extras["n_evaluations"] = game.evaluations.clone()
    asked = [name for name in extras if getattr(options, flag_of(name), False) is True]

    def pack(values: Tensor) -> Attributions:
        if per_feature:  # (N, d), whatever the inputs' form
            return values.to(game.attribution_dtype())
        packed = pack_attributions(game, values, True)
        if aggregated:
            packed = tuple(
                t.reshape(-1, *game.inputs[i].shape[1:])[:, 0] for i, t in enumerate(packed)
            )
        return packed if is_tuple else packed[0]

    attributions = pack(outcome.attributions) if outcome.packed else outcome.attributions
    if not asked:
        return attributions
    values = [pack(extras[name]) if name in outcome.per_feature else extras[name] for name in asked]
    return explanation_type(tuple(asked))(attributions, *values)


def pack_attributions(game: CoalitionGame, per_feature: Tensor, is_tuple: bool) -> Attributions:
    """Per-feature ``(N, [*outputs,] d)`` values back to the inputs' shapes, dtypes and type.

    With several outputs per example (a multi-output model without target)
    each input's attributions are ``(N, *outputs, *input.shape[1:])``, as in
    Captum.
    """
    dtype = game.attribution_dtype()
    if per_feature.dim() == 2:
        attributions = game.features.scatter(per_feature, game.inputs, dtype)
    else:
        batch, *outputs, d = per_feature.shape
        columns = per_feature.reshape(batch, -1, d).unbind(dim=1)
        parts = [game.features.scatter(column, game.inputs, dtype) for column in columns]
        attributions = tuple(
            torch.stack([part[i] for part in parts], dim=1).reshape(
                batch, *outputs, *game.inputs[i].shape[1:]
            )
            for i in range(len(game.inputs))
        )
    return attributions if is_tuple else attributions[0]


def stack_outcomes(outcomes: list[Outcome], shape: tuple[int, ...]) -> Outcome:
    """One outcome per model output -> attributions ``(N, *output_shape, d...)``."""
    first = outcomes[0]

    def stack(values: list[Any]) -> Any:
        if not isinstance(values[0], Tensor):
            return values
        stacked = torch.stack(values, dim=1)
        return stacked.reshape(stacked.shape[0], *shape, *stacked.shape[2:])

    extras = {name: stack([o.extras[name] for o in outcomes]) for name in first.extras}
    return Outcome(
        stack([o.attributions for o in outcomes]), extras, first.per_feature, first.packed
    )
