"""``AmortizedShapley``: train an explainer network once, then explain in one forward pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor, nn

from .._compat import BaselineType, TargetType, format_inputs, is_int
from ..attr._options import check_count, check_flag, check_generator
from ..attr.guards import check_model_instance, model_state_kept
from ..attr.result import explanation_type, pack_attributions
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..plans.limits import check_choice
from ..uncertainty.intervals import check_confidence
from . import fitting
from .conformal import example_scores, half_widths, spot_threshold
from .labels import (
    LABEL_ESTIMATORS,
    check_label_budget,
    gaps,
    minimum_evaluations,
    sampled_labels,
)
from .networks import build_network, network_config
from .potential import ShapleyPotential
from .report import FitReport
from .settings import FitSettings, check_game_matches, check_inputs_match
from .training import active_features, network_values, normalised


class NotFittedError(ValueError):
    """``attribute`` (or ``state_dict``) was called before ``fit``."""


class AmortizedShapley(PerturbationAttribution):
    r"""Amortized Shapley values: an explainer network trained once, then one forward per example.

    ``fit`` spends ``budget`` model evaluations on each training example,
    each example's coalitions drawn afresh, and trains a network on them. By
    default the network is a :class:`~.potential.ShapleyPotential`: a scalar
    ``P`` of the masked input whose differences are the Shapley values,
    ``phi_i(x) = P(x) - P(x with feature i at its baseline)`` (Hart and
    Mas-Colell's potential), trained on every sampled coalition's value
    through the potential's recursion, with no per-example labels and so no
    label noise. Other networks are trained by FastSHAP's objective on those
    coalitions (Jethani et al. 2022) or on noisy (nearly) unbiased Shapley
    estimates made from them (stochastic amortization, Covert et al. 2024).
    ``attribute`` then costs one network forward (``d + 1`` network rows per
    example for a potential) and two model evaluations per example (``f(x)``
    and ``f(baseline)``): the values are normalised additively,
    ``phi_i += (f(x) - f(b) - sum_j phi_j) / d``, so they sum to
    ``f(x) - f(b)`` exactly.

    The network is only as good as its training distribution: an input unlike
    the training data can get confident, wrong values. ``fit`` returns a
    :class:`FitReport` (held-out errors, against exact values where
    ``d <= 16``, the cost, the break-even count), ``return_uncertainty=True``
    gives split-conformal intervals calibrated on held-out examples, and
    ``spot_check=`` re-estimates each example cheaply and flags those that
    disagree with the explainer.

    Args:
        forward_func: the model, or any function of the inputs returning a
            tensor with one row per example.
        feature_mask: shared by every example (one tensor, or one per input),
            as in the other classes; None: one feature per input element.
        explainer: any ``nn.Module`` mapping the inputs (``*inputs``) to
            ``(N, d)`` or ``(N, d, outputs)`` values, or a
            :class:`~.potential.ShapleyPotential` around a body of your own;
            None: a potential whose body is chosen from the training inputs'
            kind (an MLP for tabular data and small images, for tabular data
            two trained apart and averaged from 10,000 training examples, a
            CNN pooled onto the features for images above 4,096 elements, a
            small transformer for token ids).

    Example:
        >>> import torch
        >>> from captum_graphshap import AmortizedShapley
        >>> model = torch.nn.Linear(4, 1)
        >>> x = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
        >>> explainer = AmortizedShapley(model)
        >>> report = explainer.fit(x, target=0, budget=16, epochs=5,
        ...                        generator=torch.Generator().manual_seed(0))
        >>> phi = explainer.attribute(x[:3], target=0)
        >>> gap = (model(x[:3]) - model(torch.zeros(1, 4)))[:, 0].detach()
        >>> torch.allclose(phi.sum(dim=1), gap, atol=1e-5)
        True
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        explainer: nn.Module | None = None,
    ) -> None:
        check_model_instance(forward_func, type(self).__name__)
        if explainer is not None and not isinstance(explainer, nn.Module):
            raise TypeError(
                f"explainer must be a torch.nn.Module mapping the inputs to (N, d) or "
                f"(N, d, outputs) values, or None for the default, got {type(explainer).__name__}."
            )
        PerturbationAttribution.__init__(self, forward_func)
        self.feature_mask = feature_mask
        self.explainer = explainer
        self.settings: FitSettings | None = None
        self.report: FitReport | None = None

    @property
    def multiplies_by_inputs(self) -> bool:
        return False

    # ------------------------------------------------------------------ fit

    def fit(
        self,
        train: Any,
        baselines: BaselineType = None,
        target: TargetType = None,
        *,
        budget: int = 64,
        epochs: int | None = None,
        validation: Any = None,
        generator: torch.Generator | None = None,
        show_progress: bool | None = None,
        label_estimator: str | None = None,
        confidence: float = 0.9,
        exact_examples: int = 64,
        labels: Tensor | None = None,
    ) -> FitReport:
        """Evaluate the model on sampled coalitions of the training set and train the explainer.

        Args:
            train: the training inputs: a tensor, a tuple of tensors, or a
                DataLoader yielding them (the model's inputs only).
            baselines: as in Captum, shared by every example (a number, or a
                tensor or tuple broadcasting to one example).
            target: an output index for every example, a tensor or list of
                one per training example (columns of a ``(N, C)`` output), or
                None: every output of the model at once (one value per example,
                or several, each learnt).
            budget: model evaluations per training (and held-out) example,
                in total over the fit (at least ``2 d``).
            epochs: passes over the training examples (for a potential:
                over their coalition rows, 256 a step); None: about 12,000
                optimiser steps (a potential: 24,000 times the square root of
                its rows over a 3,000-example fit's at 64, 2,000 to 48,000).
            validation: held-out inputs (same forms as ``train``); None: a
                tenth of ``train`` (at most 1,000 examples, at least 20) is
                held out. Their labels cost ``budget`` evaluations each too;
                they choose the kept network state, calibrate the intervals
                and give the report.
            generator: ``torch.Generator`` for the labels' draws, the
                split, the network's initialisation and the shuffles.
            show_progress: progress bars for labelling and training.
            label_estimator: ``"potential"`` (None, the default, with the
                default explainer or a ``ShapleyPotential``: no labels, the
                potential trained on the coalitions' values, ``potential.py``;
                on the six MLPs of benchmarks/amortized.py at 3,000 examples
                its held-out error to exact values was 0.3-0.8 of
                ``"fastshap"``'s, docs/guide/amortized.md), ``"fastshap"``
                (None for other networks without ``labels``: FastSHAP's
                objective, the weighted squared error
                of the values over each example's sampled kernel coalitions,
                computed exactly from the ``"kernel"`` label and its
                coalitions' matrix, ``amortized/objective.py``; chosen by
                measurement: on the MLPs of benchmarks/amortized.py, the same
                labels trained this way had a held-out error to exact values
                3.5-7% lower on every seed tried: ReLU 0.128 against 0.136 at
                3,000 examples and 0.087 against 0.091 at 20,000, tanh 0.022
                against 0.024 and 0.0133 against 0.0142), ``"kernel"`` (None
                with ``labels``: the paired kernel fit on fresh coalitions as
                a label, trained by squared error; consistent, not unbiased:
                the mean of many draws is off by about 1% of the largest value
                at d = 6 and 16-48 evaluations; on the tanh MLP 0.027 (3,000)
                and 0.016 (20,000) against 0.032 and 0.019 with permutation
                labels), ``"permutation"``
                (antithetic orderings, the budget's remaining rows on single
                features' antithetic samples; unbiased, tests/test_amortized.py
                checks the mean of many draws), ``"regression_mc"``
                (regression-adjusted Monte Carlo: about as good as
                ``"kernel"`` there, but the mean of its draws measured a few
                percent off the exact values when many relabelled examples
                share one call) or ``"default"`` (``PairedKernelShap``'s own
                choice, a shrunk posterior: biased, so the network cannot
                average its error away: 0.021 at 20,000), each drawn afresh
                per example.
            confidence: the intervals' level, in (0, 1).
            exact_examples: held-out examples on which the report compares
                with exact Shapley values when ``d <= 16`` (``2^d``
                evaluations each, counted apart) and measures the intervals'
                coverage: at most half the held-out examples, and at most as
                many as the labels' evaluations would buy, so the check
                never costs more than the fit; 0 skips it.
            labels: the training labels, made elsewhere, one row per example
                of ``train`` in its order: what
                :class:`~.label_attribution.ShapleyLabels` gives with
                ``return_input_shape=False`` (``(N, d)``, or ``(N, outputs, d)``
                for every output), for instance on Ray actors through
                :func:`~captum_graphshap.distributed.explain_dataset`. Give the
                ``budget`` and ``label_estimator`` they were made with (not
                ``"fastshap"`` or ``"potential"``: labels carry no coalitions): the report counts
                ``budget`` evaluations per labelled example.
                ``validation`` examples, if given, are labelled here.

        Returns:
            A :class:`FitReport`; also kept as ``self.report``.
        """
        check_count(budget, "budget", 1)
        if epochs is not None:
            check_count(epochs, "epochs", 1)
        check_generator(generator)
        if show_progress is not None:
            check_flag(show_progress, "show_progress")
        potential = self.explainer is None or isinstance(self.explainer, ShapleyPotential)
        if label_estimator is None:
            label_estimator = (
                "kernel" if labels is not None else "potential" if potential else "fastshap"
            )
        check_choice(label_estimator, LABEL_ESTIMATORS, "label_estimator")
        if label_estimator == "potential" and not potential:
            raise ValueError(
                "label_estimator='potential' trains a potential network: pass explainer=None "
                "(the default one) or a ShapleyPotential(body), or choose 'fastshap' for a "
                "network that outputs the values themselves."
            )
        if labels is not None and label_estimator == "potential":
            raise ValueError(
                "label_estimator='potential' trains on each example's coalitions and their "
                "values, which labels made elsewhere do not carry: fit on them with the "
                "estimator they were made with (ShapleyLabels' label_estimator, 'kernel' by "
                "default)."
            )
        if labels is not None and label_estimator == "fastshap":
            raise ValueError(
                "label_estimator='fastshap' trains on each example's sampled coalitions, "
                "which labels made elsewhere do not carry: fit on them with the estimator "
                "they were made with (ShapleyLabels' label_estimator, 'kernel' by default)."
            )
        check_confidence(confidence)
        check_count(exact_examples, "exact_examples", 0)
        plan = fitting.prepare_fit(
            self.forward_func, self.feature_mask, train, baselines, target, validation, generator
        )
        given = fitting.checked_labels(labels, plan)
        check_label_budget(budget, label_estimator, plan.num_features)
        with model_state_kept(self.forward_func):
            result = fitting.fit(
                self.forward_func, plan, self.explainer, budget, epochs, generator,
                bool(show_progress), label_estimator, confidence, exact_examples, given,
            )  # fmt: skip
        self.explainer, self.settings, self.report = result
        return self.report

    # ------------------------------------------------------------- attribute

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        *,
        return_uncertainty: bool = False,
        spot_check: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Any:
        """One explainer forward per example, normalised to sum to ``f(x) - f(baseline)``.

        Args:
            inputs, baselines, target, feature_mask: Captum's, shaped as at
                ``fit``. ``baselines`` and ``feature_mask`` default to the
                fit's and must equal them; ``target`` defaults to the fit's
                fixed target, or every output.
            additional_forward_args: not supported (None): the explainer sees
                the inputs only.
            return_uncertainty: also return ``lower`` and ``upper``, the
                split-conformal interval bounds at the fit's ``confidence``.
            spot_check: a budget of model evaluations per example for a
                fresh unbiased estimate (antithetic orderings, at least
                ``2 d``); the result then also holds ``spot_estimate`` and
                ``flagged``, ``(N,)`` bool: examples whose estimate disagrees
                with the explainer more than any held-out example's label did
                (allowing for the estimate's extra noise), which
                are likely off the training distribution.
            generator: the spot check's draws.

        Returns:
            Attributions in the inputs' shapes (with every output: ``(N,
            *outputs, *input)``), or, with ``return_uncertainty`` or
            ``spot_check``, a NamedTuple whose first field is them.
        """
        settings = self._fitted()
        check_flag(return_uncertainty, "return_uncertainty")
        check_generator(generator)
        if additional_forward_args is not None:
            raise TypeError(
                "AmortizedShapley does not take additional_forward_args: the explainer "
                "network sees the inputs only. Wrap the model so it takes the inputs alone."
            )
        if spot_check is not None:
            check_count(
                spot_check, "spot_check", minimum_evaluations("permutation", settings.num_features)
            )
        game, is_tuple, columns = self._game(settings, inputs, baselines, target, feature_mask)
        shared = settings.target_mode == "fixed" or target is None or is_int(target)
        active = active_features(
            game.inputs, game.backgrounds, game.features.masks, game.num_features
        )
        with model_state_kept(self.forward_func):
            phi = self._explain(settings, game, gaps(game, shared), columns, active)
            spot = None
            if spot_check is not None:
                spot = sampled_labels(game, "permutation", spot_check, generator)
        intervals = active if return_uncertainty else None
        return self._pack(settings, game, is_tuple, phi, intervals, spot, spot_check)

    def _fitted(self) -> FitSettings:
        if self.settings is None or self.explainer is None:
            raise NotFittedError(
                "AmortizedShapley has no trained explainer yet: call fit(train, ...) first, or "
                "load_state_dict(...) a fitted one's state."
            )
        return self.settings

    def _game(
        self, settings: FitSettings, inputs: Any, baselines: Any, target: Any, feature_mask: Any
    ) -> tuple[CoalitionGame, bool, Tensor | None]:
        """The checked game of the call and the network columns to read (None: all)."""
        tensors, _ = format_inputs(inputs)
        check_inputs_match(settings, tensors)
        if baselines is None:
            baselines = fitting.baselines_argument(settings, tensors)
        mask = fitting.mask_argument(settings, tensors) if feature_mask is None else feature_mask
        game_target, columns = fitting.target_argument(settings, target, tensors[0].shape[0])
        game, is_tuple = prepare_game(self.forward_func, inputs, baselines, game_target, None, mask)
        check_game_matches(settings, game)
        if settings.vocabulary is not None:
            largest = int(game.inputs[0].max())
            if largest >= settings.vocabulary or int(game.inputs[0].min()) < 0:
                raise ValueError(
                    f"inputs hold token id {largest}, outside the explainer's vocabulary "
                    f"0..{settings.vocabulary - 1} (the largest id of the training data)."
                )
        return game, is_tuple, columns

    def _explain(
        self,
        settings: FitSettings,
        game: CoalitionGame,
        gaps: Tensor,
        columns: Tensor | None,
        active: Tensor,
    ) -> Tensor:
        """``(N, d, K)`` normalised values of the network's columns (all, or one per
        example); 0 for the features at their baseline (``active`` False)."""
        assert self.explainer is not None  # checked by _fitted
        raw = network_values(self.explainer, game.inputs, settings.num_features)
        if columns is not None:
            raw = raw.gather(2, columns.to(raw.device)[:, None, None].expand(-1, raw.shape[1], 1))
        with torch.no_grad():
            return normalised(raw.detach().to(gaps.dtype) * settings.scale, gaps, active)

    def _pack(
        self,
        settings: FitSettings,
        game: CoalitionGame,
        is_tuple: bool,
        phi: Tensor,
        intervals: Tensor | None,
        spot: Tensor | None,
        spot_budget: int | None,
    ) -> Any:
        """The result: attributions, and the spot checks and intervals asked for
        (``intervals``: the features off their baseline; at the others, whose value is
        exactly 0, the intervals only admit rounding, :data:`~.conformal.DUMMY_HALF_WIDTH`)."""

        def pack(values: Tensor) -> Any:
            if values.shape[2] == 1:
                return pack_attributions(game, values[..., 0], is_tuple)
            per_output = values.permute(0, 2, 1).reshape(
                values.shape[0], *settings.output_shape, -1
            )
            return pack_attributions(game, per_output, is_tuple)

        fields: dict[str, Any] = {}
        if intervals is not None:
            half = half_widths(phi, intervals, settings.quantile)
            fields["lower"], fields["upper"] = pack(phi - half), pack(phi + half)
        if spot is not None and spot_budget is not None:
            threshold = spot_threshold_of(settings, spot_budget)
            fields["spot_estimate"] = pack(spot)
            fields["flagged"] = example_scores(phi, spot) > threshold
        if not fields:
            return pack(phi)
        return explanation_type(tuple(fields))(pack(phi), *fields.values())

    # ------------------------------------------------------------ save, load

    def state_dict(self) -> dict[str, Any]:
        """The fitted explainer: its settings, network configuration and weights, the report."""
        settings = self._fitted()
        assert self.explainer is not None
        return {
            "settings": settings.as_dict(),
            "network": network_config(self.explainer),
            "weights": {k: v.detach().cpu() for k, v in self.explainer.state_dict().items()},
            "report": None if self.report is None else self.report._asdict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a fitted explainer from :meth:`state_dict` (the same model is assumed).

        A default network is rebuilt from its stored configuration; a custom
        ``explainer`` given to the constructor receives the weights.
        """
        if not isinstance(state, dict) or not {"settings", "network", "weights"} <= set(state):
            raise TypeError("state must be a dict from AmortizedShapley.state_dict().")
        settings = FitSettings(**state["settings"])
        network = self.explainer
        if network is None:
            network = build_network(state["network"])
        if isinstance(network, ShapleyPotential):  # its masks and baselines are the fit's
            shapes = [tuple(shape) for shape in settings.shapes]
            network.bind(settings.masks, settings.baselines, shapes, settings.num_features)
        network.load_state_dict(state["weights"])
        network.eval()
        self.explainer, self.settings = network, settings
        self.report = None if state.get("report") is None else FitReport(**state["report"])


def spot_threshold_of(settings: FitSettings, spot_budget: int) -> float:
    """The spot check's disagreement threshold (:func:`~.conformal.spot_threshold`)."""
    return spot_threshold(torch.tensor([settings.largest_score]), settings.budget, spot_budget)
