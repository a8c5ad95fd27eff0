"""The one base adapter: validate -> prepare the game -> plan -> evaluate -> estimate -> pack.

Every public attribution class configures :class:`GameAttribution`: it names
its options (a frozen dataclass, ``Options``), checks them before any model
call (``Options.__post_init__``) and turns a prepared
:class:`~captum_graphshap.engine.CoalitionGame` into an :class:`Outcome`
(``explain``), usually by building a :class:`~captum_graphshap.engine.plan.Plan`
and calling :func:`evaluate_plan`. The base class owns Captum's signature, the
game, the result convention and the evaluation count.

Three signature families follow Captum's argument order exactly:

* :class:`GameAttribution` - :class:`captum.attr.ShapleyValues`' order;
* :class:`SampledAttribution` - :class:`captum.attr.ShapleyValueSampling`'s,
  with ``n_samples`` before ``perturbations_per_eval``;
* :class:`KernelAttribution` - :class:`captum.attr.KernelShap`'s, with
  ``return_input_shape`` before ``show_progress``.

Every other option is keyword-only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import types
import warnings
from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from ..engine.coalition_game import (
    AggregatedOutput,
    CoalitionGame,
    MultipleOutputs,
    prepare_game,
)
from ..engine.plan import Plan
from ._options import check_flag
from .docs import attribute_doc

Attributions = Tensor | tuple[Tensor, ...]


@dataclasses.dataclass(frozen=True)
class Options:
    """Keyword-only options shared by every class: the game's value and the extras."""

    #: a background set ``(B, ...)`` replacing ``baselines``
    references: Any = None
    #: ``"output"`` or ``"log_prob"``
    value: str = "output"
    #: also return the model evaluations made per example
    return_evaluations: bool = False
    #: ``"raise"`` or ``"propagate"`` non-finite model outputs
    on_nan: str = "raise"
    #: reuse one input buffer per input across forward calls
    reuse_buffers: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name.startswith("return_") or field.name == "reuse_buffers":
                check_flag(getattr(self, field.name), field.name)


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
def explanation_type(fields: tuple[str, ...]) -> type:
    """The NamedTuple returned when a ``return_*`` option asks for extras.

    Its first field is ``attributions``, so ``phi, half_width = ...`` unpacks
    as before; the others are named (``half_width``, ``n_evaluations``, ...).
    """
    kind = namedtuple("Explanation", ("attributions", *fields))  # type: ignore[misc]
    kind.__doc__ = "Attributions and the extras asked for: " + ", ".join(fields) + "."
    return kind


def _publish_signature(cls: type[GameAttribution]) -> None:
    """Give ``cls.attribute`` the full signature: Captum's arguments and the options.

    ``help()``, IDEs and :func:`inspect.signature` then show every keyword
    option with its default, although the base class takes them as
    ``**options``.
    """
    attribute = cls.__dict__.get("attribute")
    base = next(
        klass.__dict__["attribute"]
        for klass in cls.__mro__
        if "attribute" in klass.__dict__
        and not getattr(klass.__dict__["attribute"], "_published", False)
    )
    signature = inspect.signature(base)
    head = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    present = {p.name for p in head}
    options = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
        for f in dataclasses.fields(cls.Options)
        if f.name not in present
    ]

    @functools.wraps(base)
    def bound(self: GameAttribution, *args: Any, **kwargs: Any) -> Any:
        return base(self, *args, **kwargs)

    if attribute is None:
        bound.__signature__ = signature.replace(parameters=[*head, *options])  # type: ignore[attr-defined]
        bound.__doc__ = attribute_doc(cls, [p.name for p in head[1:]])
        bound.__qualname__ = f"{cls.__qualname__}.attribute"
        bound._published = True  # type: ignore[attr-defined]
        cls.attribute = bound  # type: ignore[method-assign]


class GameAttribution(PerturbationAttribution):
    """Base adapter of every method (Captum's ``ShapleyValues`` argument order)."""

    #: the progress bar's text, Captum's for the classes of the same role
    progress_desc: ClassVar[str] = ""
    #: the keyword-only options and their checks
    Options: ClassVar[type[Options]] = Options
    #: whether, without ``feature_mask``, sequences have one feature per
    #: position and images one per pixel (graph methods)
    graph_mask: ClassVar[bool] = False
    #: whether the estimator gives feature ids that occur nowhere exactly 0
    #: without changing the others (exact Shapley, permutations, SHEAR);
    #: otherwise they are dropped before planning
    exact_for_dummies: ClassVar[bool] = False

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        # Not super().__init__: a class may also derive from the Captum class of
        # its role (for LLMAttribution's isinstance check), whose constructor
        # would build what we do not use (KernelShap's scikit-learn model).
        PerturbationAttribution.__init__(self, forward_func)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _publish_signature(cls)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: Any = None,
        target: Any = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Any:
        return self._attribute(
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            show_progress,
            options,
        )

    def attribute_future(self, *args: Any, **kwargs: Any) -> torch.futures.Future[Any]:
        """Captum's ``attribute_future``: the same call, its result in a completed Future.

        A model that returns ``torch.futures.Future`` works with ``attribute``
        as well: each forward call's future is waited on as it comes.
        """
        future: torch.futures.Future[Any] = torch.futures.Future()
        future.set_result(self.attribute(*args, **kwargs))
        return future

    # ------------------------------------------------------------------ the flow

    def _attribute(
        self,
        inputs: Any,
        baselines: Any,
        target: Any,
        additional_forward_args: Any,
        feature_mask: Any,
        perturbations_per_eval: Any,
        show_progress: Any,
        options: dict[str, Any],
        input_shape: bool = True,
    ) -> Any:
        checked = self._options(options)
        if show_progress is not None:  # None: a bar for long work (engine/batching.py)
            check_flag(show_progress, "show_progress")
        if self.uses_graph_mask(checked):
            feature_mask = default_graph_mask(inputs, feature_mask)
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            references=checked.references,
            value=checked.value,
            reuse_buffers=checked.reuse_buffers,
            on_nan=checked.on_nan,
        )
        with model_state_kept(self.forward_func):
            try:
                outcome = self._explain_outputs(game, checked, show_progress)
            except AggregatedOutput:
                # Captum's aggregated mode: explain the batch as one example
                whole = game.aggregated()
                outcome = self._explain_outputs(whole, checked, show_progress)
                game.evaluations += whole.evaluations
                check_finite_result(self, whole, outcome)
                return _result(whole, outcome, checked, is_tuple, aggregated=True)
        check_finite_result(self, game, outcome)
        if not input_shape:
            # Captum's KernelShap with return_input_shape=False: one value per feature
            return _result(game, outcome, checked, is_tuple, per_feature=True)
        return _result(game, outcome, checked, is_tuple)

    def _explain_outputs(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        """Explain the target, or, without one, every output of a multi-output model.

        Each output is one run of the method; the first run's model values
        (all outputs kept) are replayed by the others, whose random draws are
        the same (the generator's state is restored), so a multi-output model
        costs the evaluations of one output.
        """
        state = _random_state(getattr(options, "generator", None), game.device)
        try:
            return self._explain_features(game, options, show_progress)
        except MultipleOutputs as multiple:
            shape = multiple.shape
        game.outputs = math.prod(shape)
        outcomes = []
        for index in range(game.outputs):
            _restore_random_state(state)
            game.output_index = index
            game.tape_position = 0
            outcomes.append(self._explain_features(game, options, show_progress))
        return _stack_outcomes(outcomes, shape)

    def _explain_features(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        if self.uses_graph_mask(options):
            return self.explain(game, options, show_progress)
        return self._explain_present_features(game, options, show_progress)

    def _explain_present_features(
        self, game: CoalitionGame, options: Any, show_progress: bool
    ) -> Outcome:
        """Explain each group of examples over the feature ids its masks use.

        An id that occurs nowhere in an example is a dummy feature: its
        attribution is 0 and it changes nothing else. Estimators that are not
        exact for dummies (regressions, residual norms, the bivariate matrix)
        would give it noise or let it change the others, so such ids are
        dropped before planning and restored as zeros afterwards. Examples
        whose masks use different ids (per-image superpixels) are explained
        in groups, one game per distinct set of ids, unless the estimator is
        exact for dummies. Ids unused by every example are dropped for every
        class: no evaluation is spent on them.
        """
        if game.features.numbers_every_id():
            return self.explain(game, options, show_progress)
        present = game.features.present()
        groups, which = torch.unique(present, dim=0, return_inverse=True)
        if groups.shape[0] == 1 and bool(groups.all()):
            return self.explain(game, options, show_progress)
        if groups.shape[0] > 1 and self.exact_for_dummies:
            return self.explain(game, options, show_progress)
        d = game.num_features
        parts: list[tuple[Tensor | None, Tensor, Outcome]] = []
        for group, used in enumerate(groups):
            examples = None if groups.shape[0] == 1 else (which == group).nonzero()[:, 0]
            ids = used.nonzero()[:, 0]
            sub = game.restricted(examples, ids)
            outcome = self.explain(sub, options, show_progress)
            rows = slice(None) if examples is None else examples
            game.evaluations[rows] += sub.evaluations
            parts.append((examples, ids, outcome))
        return _merge_outcomes(parts, game.batch_size, d)

    def _options(self, options: dict[str, Any]) -> Any:
        try:
            return self.Options(**options)
        except TypeError as error:
            known = [f.name for f in dataclasses.fields(self.Options)]
            unknown = sorted(set(options) - set(known))
            if unknown:
                raise TypeError(
                    f"{type(self).__name__}.attribute got unknown option(s) {unknown}; its "
                    f"keyword-only options are {known}."
                ) from None
            raise error

    def uses_graph_mask(self, options: Any) -> bool:
        """Whether, without ``feature_mask``, features are positions or pixels (graph methods)."""
        return self.graph_mask

    def explain(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        """The method: a prepared game (no model called yet) -> an :class:`Outcome`."""
        raise NotImplementedError


class SampledAttribution(GameAttribution):
    """Base of sampled methods (Captum's ``ShapleyValueSampling`` argument order)."""

    def attribute(  # type: ignore[override]
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: Any = None,
        target: Any = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Any:
        return self._attribute(
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            show_progress,
            {"n_samples": n_samples, **options},
        )


class KernelAttribution(GameAttribution):
    """Base of regression methods (Captum's ``KernelShap`` argument order)."""

    def attribute_future(self, *args: Any, **kwargs: Any) -> torch.futures.Future[Any]:
        """Not supported, as for Captum's ``KernelShap``: call ``attribute``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not support attribute_future (nor does Captum's "
            "KernelShap); call attribute, which also accepts models returning futures."
        )

    def attribute(  # type: ignore[override]
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: Any = None,
        target: Any = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        return_input_shape: bool = True,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Any:
        check_flag(return_input_shape, "return_input_shape")
        return self._attribute(
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            show_progress,
            {"n_samples": n_samples, **options},
            input_shape=return_input_shape,
        )


def check_finite_result(explainer: GameAttribution, game: CoalitionGame, outcome: Outcome) -> None:
    """Raise when the attributions are not finite although every model output was.

    The one guard for every class: an estimator that divides by a zero
    variance or solves a singular system must never hand NaN back silently.
    With ``on_nan="propagate"`` and a non-finite model output the NaN is the
    model's and is returned, as asked. Attributions too large for the inputs'
    half-precision dtype are refused here as well, with the fix.
    """
    values = outcome.attributions
    if not bool(torch.isfinite(values).all()):
        if game.nonfinite_outputs[0]:
            return
        bad = (~torch.isfinite(values)).reshape(values.shape[0], -1).any(dim=1)
        raise RuntimeError(
            f"internal error: {type(explainer).__name__} computed NaN or infinite attributions "
            f"for examples {bad.nonzero()[:, 0].tolist()[:20]} ({game.num_features} features) "
            "although every model output was finite. Please report it with the class, its "
            "options, the number of features and the budget; ExactShapley (small d) or "
            "ShapleySampling give finite values meanwhile."
        )
    dtype = game.attribution_dtype()
    if dtype in (torch.float16, torch.bfloat16):
        largest = float(values.abs().max()) if values.numel() else 0.0
        limit = float(torch.finfo(dtype).max)
        if largest > limit:
            raise ValueError(
                f"the attributions reach {largest:.4g}, beyond the largest {dtype} value "
                f"({limit:.4g}) of the inputs' dtype, so they would come back infinite. Pass "
                "inputs in float32 (inputs.float()), or scale the model's output down."
            )


#: layers whose output depends on train mode (batch statistics, random drops)
TRAIN_MODE_LAYERS = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.modules.dropout._DropoutNd,
)


def reachable_modules(forward_func: Any, depth: int = 2) -> list[torch.nn.Module]:
    """The ``nn.Module`` instances a forward function calls, found where it is cheap to look.

    ``forward_func`` itself; a bound method's ``__self__``; a function's closure
    cells, default arguments and the globals its code names (``lambda ids, mask:
    bert(ids, attention_mask=mask).logits`` written at a script's top level reads
    ``bert`` as a global); ``functools.partial``'s function and arguments; the
    attributes of a callable object or of a bound method's object. ``depth``
    references deep (two: a partial of a lambda, a method of a wrapper holding the
    model). Python modules and classes are not searched, nor anything the code
    reaches at run time: a model found nowhere here is not checked.
    """
    found: dict[int, torch.nn.Module] = {}
    seen: set[int] = set()

    def visit(obj: Any, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            found[id(obj)] = obj
        elif level < depth:
            for child in _references(obj):
                visit(child, level + 1)

    visit(forward_func, 0)
    modules = list(found.values())
    # a submodule of a module found too (the closure holds bert and bert.classifier)
    # is covered by its parent's check
    inside = {id(sub) for m in modules for sub in m.modules() if sub is not m}
    return [m for m in modules if id(m) not in inside]


def _references(obj: Any) -> list[Any]:
    """What :func:`reachable_modules` looks into, one step from ``obj``."""
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if inspect.ismethod(obj):
        return [obj.__self__, obj.__func__]
    if inspect.isfunction(obj):
        cells = []
        for cell in obj.__closure__ or ():
            with contextlib.suppress(ValueError):  # a cell not filled yet
                cells.append(cell.cell_contents)
        named = [obj.__globals__[n] for n in obj.__code__.co_names if n in obj.__globals__]
        return [*cells, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values(), *named]
    if isinstance(obj, (type, types.ModuleType)) or not hasattr(obj, "__dict__"):
        return []
    return list(vars(obj).values())  # a callable object or a bound method's object


@contextlib.contextmanager
def model_state_kept(forward_func: Any) -> Iterator[None]:
    """Warn about a model in train mode, and leave its state as it was found.

    In train mode BatchNorm normalises by the batch (so attributions depend on
    what else is in the batch) and updates its running statistics, and
    Dropout is random: nearly always a mistake when explaining. The buffers
    (running statistics, counters) are restored afterwards, so explaining
    never changes the model. The models checked are those
    :func:`reachable_modules` finds: the module, or one a closure, bound method
    or ``functools.partial`` holds.
    """
    in_train = []
    for module in reachable_modules(forward_func):
        modes = list(module.modules()) if module.training else []
        affected = sorted(
            {type(m).__name__ for m in modes if m.training and isinstance(m, TRAIN_MODE_LAYERS)}
        )
        if not affected:
            continue
        in_train.append(module)
        warnings.warn(
            f"the model ({type(module).__name__}) is in train mode, where its "
            f"{', '.join(affected)} layers make outputs depend on the batch and on chance, so "
            "attributions are noisy. Call model.eval() before explaining. Its buffers are "
            "restored after the call.",
            UserWarning,
            stacklevel=4,
        )
    saved = [
        (module, {name: buffer.clone() for name, buffer in module.named_buffers()})
        for module in in_train
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for module, buffers in saved:
                for name, buffer in module.named_buffers():
                    if name in buffers:
                        buffer.copy_(buffers[name])


def _merge_outcomes(
    parts: list[tuple[Tensor | None, Tensor, Outcome]], batch: int, d: int
) -> Outcome:
    """Outcomes over renumbered features (and groups of examples) back to ``d`` features."""
    first = parts[0][2]
    matrix_axes = 1 if first.packed else 2
    if len(parts) == 1:
        _, ids, outcome = parts[0]
        extras = {
            name: _widen_extra(name, value, outcome, ids, d)
            for name, value in outcome.extras.items()
        }
        attributions = _widen(outcome.attributions, ids, d, matrix_axes)
        return Outcome(attributions, extras, outcome.per_feature, outcome.packed)
    merged: Tensor | None = None
    merged_extras: dict[str, Any] = {}
    for examples, ids, outcome in parts:
        part = _widen(outcome.attributions, ids, d, matrix_axes)
        if merged is None:
            merged = part.new_zeros((batch, *part.shape[1:]))
        merged[examples] = part
        for name, value in outcome.extras.items():
            if not isinstance(value, Tensor):
                # e.g. a report: one per group of examples, with the examples' indices
                merged_extras.setdefault(name, []).append((examples, value))
                continue
            wide = _widen_extra(name, value, outcome, ids, d)
            if name not in merged_extras:
                merged_extras[name] = wide.new_zeros((batch, *wide.shape[1:]))
            merged_extras[name][examples] = wide
    assert merged is not None
    return Outcome(merged, merged_extras, first.per_feature, first.packed)


def _widen(values: Tensor, ids: Tensor, d: int, axes: int) -> Tensor:
    """Values over features ``ids`` (axis 1, and 2 for a matrix) to all ``d``, zeros elsewhere."""
    shape = list(values.shape)
    for axis in range(1, 1 + axes):
        shape[axis] = d
    out = values.new_zeros(shape)
    if axes == 1:
        out[:, ids] = values
    else:
        out[:, ids[:, None], ids[None, :]] = values
    return out


#: extras indexed by feature along their second axis, besides ``Outcome.per_feature``
FEATURE_EXTRAS = ("shapley",)


def _widen_extra(name: str, value: Any, outcome: Outcome, ids: Tensor, d: int) -> Any:
    if name in outcome.per_feature or name in FEATURE_EXTRAS:
        return _widen(value, ids, d, 1)
    if isinstance(value, Tensor) and value.dim() > 1:
        raise ValueError(
            f"{name} cannot be returned when feature_mask leaves ids unused; renumber the "
            "mask's ids 0, 1, 2, ... without gaps."
        )
    return value


def _random_state(generator: Any, device: torch.device) -> tuple[Any, ...]:
    """The state a run's random draws start from: the generator's, or torch's global ones."""
    if generator is not None:
        return (generator, generator.get_state())
    cuda = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    return (None, torch.get_rng_state(), cuda)


def _restore_random_state(state: tuple[Any, ...]) -> None:
    if state[0] is not None:
        state[0].set_state(state[1])
        return
    torch.set_rng_state(state[1])
    if state[2] is not None:
        torch.cuda.set_rng_state_all(state[2])


def _stack_outcomes(outcomes: list[Outcome], shape: tuple[int, ...]) -> Outcome:
    """One outcome per output -> attributions ``(N, *output_shape, d...)``."""
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


def _result(
    game: CoalitionGame,
    outcome: Outcome,
    options: Any,
    is_tuple: bool,
    aggregated: bool = False,
    per_feature: bool = False,
) -> Any:
    """Pack the outcome to the inputs' shapes; a NamedTuple when extras were asked for.

    ``per_feature``: the ``(N, d)`` values themselves (Captum's
    ``return_input_shape=False``). ``aggregated``: ``game`` explained a whole
    batch as one example (inputs
    ``(1, N, ...)``); Captum returns ``(outputs, *input.shape[1:])`` then, one
    row per model output, and every example's slice holds the same values.
    """
    extras = dict(outcome.extras)
    extras["n_evaluations"] = game.evaluations.clone()
    asked = [name for name in extras if getattr(options, _flag_of(name), False) is True]

    def pack(values: Tensor) -> Any:
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


#: which ``return_*`` option asks for an extra (default: ``return_<name>``)
EXTRA_FLAGS = {
    "half_width": "return_uncertainty",
    "n_evaluations": "return_evaluations",
    "edge_residuals": "return_residuals",
    "inessential_games": "return_residuals",
    "neighbourhoods": "return_residuals",
}


def _flag_of(name: str) -> str:
    return EXTRA_FLAGS.get(name, f"return_{name}")


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


def evaluate_plan(
    game: CoalitionGame,
    plan: Plan,
    show_progress: bool,
    desc: str,
    *,
    per_reference: bool = False,
) -> Tensor:
    """The plan's values: ``(N, M)`` for a shared plan, ``(M,)`` for per-example rows.

    With ``per_reference`` (shared plans) the values of each reference are
    kept apart, ``(N, M, B)``.
    """
    if plan.example_index is None:
        return game.evaluate(
            plan.coalitions,
            distinct=plan.distinct,
            per_reference=per_reference,
            show_progress=show_progress,
            desc=desc,
        )
    return game.evaluate_rows(
        plan.example_index,
        plan.coalitions,
        distinct=plan.distinct,
        show_progress=show_progress,
        desc=desc,
    )


def default_graph_mask(inputs: Any, feature_mask: Any) -> Any:
    """The feature mask graph methods use when the user gives none.

    A single ``(N, L)`` input has one feature per position and an image
    ``(N, H, W)``/``(N, C, H, W)`` one per pixel with its channels grouped;
    anything else keeps Captum's default (one feature per element).
    """
    from ..graphs import default_feature_mask

    if feature_mask is None and isinstance(inputs, Tensor) and inputs.dim() in (2, 3, 4):
        return default_feature_mask(tuple(inputs.shape)).to(inputs.device)
    return feature_mask
