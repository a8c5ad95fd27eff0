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

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, Literal, overload

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import (
    AggregatedOutput,
    CoalitionGame,
    MultipleOutputs,
    prepare_game,
)
from ..engine.features import FeatureMasks
from ..engine.plan import Plan
from ._options import check_flag, unknown_options_error
from .budget import BudgetAccounting, coalition_budget
from .docs import HidesCaptumInternals, publish_signature
from .dummies import explain_present_features
from .guards import check_finite_result, check_model_instance, integer_inputs_hint, model_state_kept
from .renames import NO_RENAMES, Renames, apply_renames
from .result import (
    Attributions,
    Explanation,
    InputsT,
    Outcome,
    pack_result,
    stack_outcomes,
)

__all__ = [
    "Attributions",
    "Explanation",
    "GameAttribution",
    "KernelAttribution",
    "Options",
    "Outcome",
    "SampledAttribution",
    "default_graph_mask",
    "evaluate_plan",
]

#: a feature mask: one tensor, one per input tensor, or None (one feature per element)
FeatureMask = Tensor | tuple[Tensor, ...] | None


@dataclasses.dataclass(frozen=True)
class Options:
    """Keyword-only options shared by every class: the game's value and the extras."""

    #: a background set ``(B, ...)`` replacing ``baselines`` (one tensor per input)
    references: Tensor | tuple[Tensor, ...] | None = None
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


class GameAttribution(PerturbationAttribution):
    """Base adapter of every method (Captum's ``ShapleyValues`` argument order)."""

    #: the progress bar's text; by default, as Captum's, the class name in words
    #: ("C Shapley attribution"); a class standing in for a Captum class sets that
    #: class's ("Shapley Values attribution" for ExactShapley)
    progress_desc: ClassVar[str] = ""
    #: the keyword-only options and their checks
    Options: ClassVar[type[Options]] = Options
    #: old option spellings still accepted, with a warning (``attr/renames.py``)
    renames: ClassVar[Renames] = NO_RENAMES
    #: whether, without ``feature_mask``, sequences have one feature per
    #: position and images one per pixel (graph methods)
    graph_mask: ClassVar[bool] = False
    #: whether the estimator gives feature ids that occur nowhere exactly 0
    #: without changing the others (exact Shapley, permutations, SHEAR);
    #: otherwise they are dropped before planning
    exact_for_dummies: ClassVar[bool] = False
    #: whether each example's features at their baseline are dropped before planning
    #: (``attr/dummies.py``): classes whose values are the game's own Shapley values
    drops_null_players: ClassVar[bool] = False
    #: whether the estimator reads the feature mask's layout (the local windows of
    #: ``plans/local_windows.py``): examples with different features at their
    #: baseline are then explained together only where the windows agree
    reads_feature_layout: ClassVar[bool] = False
    #: how ``budget=`` pays for references and the predicted class's forward
    #: (``attr/budget.py``, :data:`~.budget.BudgetAccounting`)
    budget_accounting: ClassVar[BudgetAccounting] = "coalition"

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        # Not super().__init__: a class may also derive from the Captum class of
        # its role (for LLMAttribution's isinstance check), whose constructor
        # would build what we do not use (KernelShap's scikit-learn model).
        check_model_instance(forward_func, type(self).__name__)
        PerturbationAttribution.__init__(self, forward_func)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "progress_desc" not in cls.__dict__:
            cls.progress_desc = f"{cls.get_name()} attribution"
        publish_signature(cls)

    # The static types of ``attribute``, keyed on the ``return_*`` flags (the
    # same three overloads in each argument order): none asked -> attributions
    # in the inputs' form; one asked as a literal True -> an Explanation; a
    # flag only known at run time -> either. Every class's flags are listed
    # in every overload, as type checkers see one signature per argument order;
    # a flag the class lacks is refused at run time, as any unknown option.

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[False] = ...,
        return_uncertainty: Literal[False] = ...,
        return_report: Literal[False] = ...,
        return_shapley: Literal[False] = ...,
        return_residuals: Literal[False] = ...,
        return_derivative_evaluations: Literal[False] = ...,
        **options: Any,
    ) -> InputsT: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[True] = ...,
        return_uncertainty: Literal[True] = ...,
        return_report: Literal[True] = ...,
        return_shapley: Literal[True] = ...,
        return_residuals: Literal[True] = ...,
        return_derivative_evaluations: Literal[True] = ...,
        **options: Any,
    ) -> Explanation[InputsT]: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: bool = ...,
        return_uncertainty: bool = ...,
        return_report: bool = ...,
        return_shapley: bool = ...,
        return_residuals: bool = ...,
        return_derivative_evaluations: bool = ...,
        **options: Any,
    ) -> InputsT | Explanation[InputsT]: ...

    def attribute(
        self,
        inputs: Attributions,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Attributions | Explanation[Any]:
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
    ) -> Attributions | Explanation[Any]:
        checked = self._options(options)
        if show_progress is not None:  # None: a bar for long work (engine/batching.py)
            check_flag(show_progress, "show_progress")
        game, is_tuple = self._game(
            checked,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
        )
        checked, budget_note = coalition_budget(checked, game, self.budget_accounting)
        with model_state_kept(self.forward_func), integer_inputs_hint(inputs):
            try:
                outcome = self._explain_outputs(game, checked, show_progress)
            except ValueError as error:
                if budget_note is None or f"budget={checked.budget}" not in str(error):
                    raise
                # the class's refusal quotes the coalitions' budget: say what the user's was
                raise ValueError(f"{error} {budget_note}") from None
            except AggregatedOutput:
                # Captum's aggregated mode: explain the batch as one example
                whole = game.aggregated()
                outcome = self._explain_outputs(whole, checked, show_progress)
                check_finite_result(self, whole, outcome)
                return pack_result(whole, outcome, checked, is_tuple, aggregated=True)
        check_finite_result(self, game, outcome)
        if not input_shape:
            # Captum's KernelShap with return_input_shape=False: one value per feature
            return pack_result(game, outcome, checked, is_tuple, per_feature=True)
        return pack_result(game, outcome, checked, is_tuple)

    def _game(
        self,
        checked: Any,
        inputs: Any,
        baselines: Any,
        target: Any,
        additional_forward_args: Any,
        feature_mask: Any,
        perturbations_per_eval: Any = None,
    ) -> tuple[CoalitionGame, bool]:
        """The game of Captum's arguments under the checked options (no model call yet)."""
        if self.uses_graph_mask(checked):
            feature_mask = default_graph_mask(inputs, feature_mask)
        return prepare_game(
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

    def _explain_outputs(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        """Explain the target, or, without one, every output of a multi-output model.

        Each output is one run of the method; the first run's model values
        (all outputs kept) are replayed by the others, whose random draws are
        the same (the generator's state is restored), so a multi-output model
        costs the evaluations of one output.
        """
        state = _random_state(getattr(options, "generator", None), game.device)
        try:
            return self._explain_features(game, options, show_progress, state)
        except MultipleOutputs as multiple:
            shape = multiple.shape
        game.outputs = math.prod(shape)
        outcomes = []
        for index in range(game.outputs):
            _restore_random_state(state)
            game.output_index = index
            game.tape.position = 0
            outcomes.append(self._explain_features(game, options, show_progress, state))
        return stack_outcomes(outcomes, shape)

    def _explain_features(
        self, game: CoalitionGame, options: Any, show_progress: bool, state: tuple[Any, ...]
    ) -> Outcome:
        """Explain the game, over the feature ids its masks use unless a graph method's;
        ``state``: the random state the run starts from (each group restarts there)."""
        if self.uses_graph_mask(options):
            return self.explain(game, options, show_progress)
        return explain_present_features(
            game,
            lambda sub: self.explain(sub, options, show_progress),
            self.exact_for_dummies,
            null_players=self.drops_null_players,
            restart=lambda: _restore_random_state(state),
            reads_layout=self.reads_feature_layout,
        )

    def _options(self, options: dict[str, Any]) -> Any:
        options = apply_renames(type(self).__name__, options, self.renames)
        try:
            return self.Options(**options)
        except TypeError as error:
            known = [f.name for f in dataclasses.fields(self.Options)]
            unknown = sorted(set(options) - set(known))
            if unknown:
                raise unknown_options_error(type(self).__name__, unknown, known) from None
            raise error

    def uses_graph_mask(self, options: Any) -> bool:
        """Whether, without ``feature_mask``, features are positions or pixels (graph methods)."""
        return self.graph_mask

    def explain(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        """The method: a prepared game (no model called yet) -> an :class:`Outcome`."""
        raise NotImplementedError


class SampledAttribution(GameAttribution):
    """Base of sampled methods (Captum's ``ShapleyValueSampling`` argument order)."""

    @overload  # type: ignore[override]
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[False] = ...,
        return_uncertainty: Literal[False] = ...,
        return_report: Literal[False] = ...,
        return_shapley: Literal[False] = ...,
        return_residuals: Literal[False] = ...,
        return_derivative_evaluations: Literal[False] = ...,
        **options: Any,
    ) -> InputsT: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[True] = ...,
        return_uncertainty: Literal[True] = ...,
        return_report: Literal[True] = ...,
        return_shapley: Literal[True] = ...,
        return_residuals: Literal[True] = ...,
        return_derivative_evaluations: Literal[True] = ...,
        **options: Any,
    ) -> Explanation[InputsT]: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        *,
        return_evaluations: bool = ...,
        return_uncertainty: bool = ...,
        return_report: bool = ...,
        return_shapley: bool = ...,
        return_residuals: bool = ...,
        return_derivative_evaluations: bool = ...,
        **options: Any,
    ) -> InputsT | Explanation[InputsT]: ...

    def attribute(
        self,
        inputs: Attributions,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Attributions | Explanation[Any]:
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


class KernelAttribution(GameAttribution, metaclass=HidesCaptumInternals):
    """Base of regression methods (Captum's ``KernelShap`` argument order)."""

    #: Captum's ``KernelShap`` sampler and weight, unused here: left out of ``help()``
    _unused_captum_methods = frozenset(
        {"kernel_shap_perturb_generator", "kernel_shap_similarity_kernel"}
    )

    def attribute_future(self, *args: Any, **kwargs: Any) -> torch.futures.Future[Any]:
        """Not supported, as for Captum's ``KernelShap``: call ``attribute``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not support attribute_future (nor does Captum's "
            "KernelShap); call attribute, which also accepts models returning futures."
        )

    @overload  # type: ignore[override]
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        return_input_shape: bool = True,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[False] = ...,
        return_uncertainty: Literal[False] = ...,
        return_report: Literal[False] = ...,
        return_shapley: Literal[False] = ...,
        return_residuals: Literal[False] = ...,
        return_derivative_evaluations: Literal[False] = ...,
        **options: Any,
    ) -> InputsT: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        return_input_shape: bool = True,
        show_progress: bool | None = None,
        *,
        return_evaluations: Literal[True] = ...,
        return_uncertainty: Literal[True] = ...,
        return_report: Literal[True] = ...,
        return_shapley: Literal[True] = ...,
        return_residuals: Literal[True] = ...,
        return_derivative_evaluations: Literal[True] = ...,
        **options: Any,
    ) -> Explanation[InputsT]: ...

    @overload
    def attribute(
        self,
        inputs: InputsT,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        return_input_shape: bool = True,
        show_progress: bool | None = None,
        *,
        return_evaluations: bool = ...,
        return_uncertainty: bool = ...,
        return_report: bool = ...,
        return_shapley: bool = ...,
        return_residuals: bool = ...,
        return_derivative_evaluations: bool = ...,
        **options: Any,
    ) -> InputsT | Explanation[InputsT]: ...

    def attribute(
        self,
        inputs: Attributions,
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: FeatureMask = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        return_input_shape: bool = True,
        show_progress: bool | None = None,
        **options: Any,
    ) -> Attributions | Explanation[Any]:
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
        # built on the inputs' device, numbered in order by construction: no check
        # reads it back and nothing is copied from the host
        shape = default_feature_mask(tuple(inputs.shape)).shape
        count = math.prod(shape)
        mask = torch.arange(count, device=inputs.device).reshape(shape)
        return FeatureMasks((mask,), count, False, ((0, count),))
    return feature_mask
