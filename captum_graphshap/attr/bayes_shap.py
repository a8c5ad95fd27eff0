"""BayesSHAP: Bayesian KernelSHAP with credible intervals (Slack et al., NeurIPS 2021)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import captum.attr as captum_attr
import torch

from .._warnings import warn_caller
from ..engine.coalition_game import CoalitionGame
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.local_windows import feature_windows
from ..plans.walsh_gp import (
    auto_walsh_gp,
    check_walsh_gp_pairs,
    drawn_pairs,
    posterior_fit_pairs,
    walsh_gp_design,
)
from ..uncertainty.bayes import (
    DEFAULT_MAX_SAMPLES,
    BayesShapReport,
    BayesShapRounds,
    enumerable_pairs,
)
from ..uncertainty.intervals import check_confidence, student_t_quantile
from ._options import check_flag, check_generator
from .base import KernelAttribution, Options, Outcome, evaluate_plan
from .budget import check_budget, samples_within
from .guards import check_attribution_scale


@dataclasses.dataclass(frozen=True)
class BayesShapOptions(Options):
    """Options of :class:`BayesShap`.

    Args:
        n_samples: sampled coalitions per example, besides the empty and full
            ones (evaluated as well, for the endpoints); at least ``d + 2``.
            None: ``max(256, 4 d)``.
        budget: model evaluations per example instead of ``n_samples``:
            ``budget - 2`` distinct sampled coalitions, drawn i.i.d. until
            that many are distinct, each pair counted as often as drawn
            (with ``target_width``, the most draws it may make).
        generator: a ``torch.Generator`` that makes the sampling reproducible
            (coalitions are drawn on its device).
        return_uncertainty: also return ``half_width``, the half-widths of the
            credible intervals.
        confidence: the level of the credible intervals, in (0, 1).
        focused: spend half of the samples on focused sampling (Alg. 2).
        target_width: sample further until every half-width is at most this
            (or ``max_samples`` is reached).
        max_samples: with ``target_width``, the most sampled coalitions per
            example (default ``2^16``).
        return_report: also return ``report``, a
            :class:`~captum_graphshap.uncertainty.BayesShapReport` (samples,
            stopping reason, widest interval, perturbations still needed).
        estimator: the posterior: ``"auto"`` (default) is ``"walsh_gp"``
            wherever it applies (a fixed budget, not ``focused``, ``d`` from
            2 to 32, at least ``d`` complementary pairs; see
            :func:`~captum_graphshap.plans.walsh_gp.auto_walsh_gp`), else
            ``"kernel"``. ``"walsh_gp"``: the posterior of
            :class:`PairedKernelShap`'s ``estimator="walsh_gp"``, a Gaussian
            process over the Walsh parities of order three to seven beside
            the linear ones, on stratified complementary pairs; its mean is
            that estimator's and its intervals are Student t with
            ``pairs + 1 - d`` degrees of freedom (``plans/walsh_gp.py``).
            ``"kernel"``: the paper's Bayesian linear regression on i.i.d.
            Shapley-kernel draws (the only one with ``focused`` and
            ``target_width``).
    """

    n_samples: int | None = None
    budget: int | None = None
    generator: torch.Generator | None = None
    return_uncertainty: bool = False
    confidence: float = 0.95
    focused: bool = False
    target_width: float | None = None
    max_samples: int | None = None
    return_report: bool = False
    estimator: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.estimator, BAYES_ESTIMATORS, "estimator")
        if self.estimator == "walsh_gp" and (self.focused or self.target_width is not None):
            raise ValueError(
                "estimator='walsh_gp' draws one fixed design: it takes neither focused=True nor "
                "target_width=; use estimator='kernel' (or 'auto') for sequential sampling."
            )
        check_confidence(self.confidence)
        check_flag(self.focused, "focused")
        check_generator(self.generator)
        check_budget(self.budget, self.n_samples)
        _check_target_width(self.target_width)
        if self.budget is not None and self.max_samples is not None:
            raise ValueError("pass either budget= or max_samples=, not both.")


#: ``estimator=`` choices of :class:`BayesShap`
BAYES_ESTIMATORS: tuple[str, ...] = ("auto", "walsh_gp", "kernel")


class BayesShap(KernelAttribution, captum_attr.KernelShap):
    r"""BayesSHAP (Slack et al., NeurIPS 2021): KernelSHAP with credible intervals.

    A Bayesian weighted linear regression of the game on sampled coalitions
    with a conjugate Normal-Inv-:math:`\chi^2` prior. The posterior mean is
    the attribution; each feature's marginal posterior is a Student t, whose
    central interval at ``confidence`` is returned as a half-width. As in
    docs/definitions.md, and unlike the authors' release, the KernelSHAP
    weights are normalised (mean 1, so the unit prior does not shrink the
    estimate) and both endpoints are enforced, so the attributions sum to
    :math:`f(x) - f(b)` and the 95% intervals cover the exact Shapley value
    at 92-95% (``benchmarks/uncertainty.py``; docs/definitions.md reports about 35% for
    a literal port of the release). Coalitions are drawn from the KernelSHAP
    distribution in complementary pairs (as :class:`PairedKernelShap`, whose
    accuracy the posterior mean then matches); only ``d x d`` statistics per
    example are kept, never a sample-by-sample weight matrix. Each round of
    sampling is a plan evaluated by the engine, its estimator the posterior
    update.

    By default (``estimator="auto"``) a fixed budget for 2 to 32 features
    gets the Walsh-basis Gaussian process instead (``estimator="walsh_gp"``):
    its mean is :class:`PairedKernelShap`'s default, several times more
    accurate than the linear regression's, and the intervals are its
    posterior's. Beyond the pairs the process factorises (2,048 up to 16
    features, :func:`~captum_graphshap.plans.walsh_gp.posterior_fit_pairs`)
    it is fitted on those and adjusted over the others, its interval the
    fitted process's: more budget never widens it.

    ``focused=True`` spends half the budget on the paper's focused
    (uncertainty) sampling, Alg. 2: candidates are chosen with probability
    growing with their posterior predictive variance. It narrows the
    intervals somewhat but shifts what they estimate (the rows keep their
    KernelSHAP weights, as in the paper), so their coverage of the exact
    Shapley value drops below nominal as ``n_samples`` grows
    (``benchmarks/uncertainty.py``).

    ``target_width`` keeps sampling until every half-width of an example is
    at most it, or ``max_samples`` is reached; ``return_report=True`` says
    which happened and estimates the perturbations still needed, and a
    warning is raised when the budget ran out first. With a single feature efficiency
    alone gives its value exactly (half-width 0, nothing sampled).

    The draws are shared by the batch, so an example's explanation does not
    depend on the others in it; with ``target_width`` the rounds after the
    first draw as many as the neediest example asks, so there it does. Once
    a round asks for more pairs than there are (``2^(d-1) - 1``, up to
    4,096), it draws how often each comes up: memory follows the distinct
    coalitions, whatever the budget.

    Example:
        >>> import torch
        >>> from captum_graphshap import BayesShap
        >>> model = torch.nn.Linear(4, 1)
        >>> g = torch.Generator().manual_seed(0)
        >>> mean, half = BayesShap(model).attribute(
        ...     torch.ones(1, 4), target=0, generator=g, return_uncertainty=True
        ... )
        >>> mean.shape == half.shape
        True
    """

    Options = BayesShapOptions
    drops_null_players = True
    reads_feature_layout = True

    def explain(
        self, game: CoalitionGame, options: BayesShapOptions, show_progress: bool
    ) -> Outcome:
        d = game.num_features
        samples, cap, width = _sample_counts(options, d)
        if _uses_walsh_gp(options, d, samples):
            return self._walsh_gp(game, options, samples // 2, show_progress)
        corners = torch.zeros(2, d, dtype=torch.bool, device=game.device)
        corners[1] = True
        endpoints = game.evaluate(corners, distinct=True, desc=self.progress_desc)

        rounds = BayesShapRounds(
            endpoints[:, 0],
            endpoints[:, 1],
            d,
            samples,
            confidence=options.confidence,
            focused=options.focused,
            target_width=width,
            max_samples=cap,
            generator=options.generator,
            # budget= counts distinct evaluations: fill them (not with target_width,
            # whose rounds and max_samples count draws)
            fill=options.budget is not None and width is None,
        )
        plan = rounds.next_plan()  # each round: plan -> evaluate -> estimate (posterior update)
        while plan is not None:
            plan.estimator(evaluate_plan(game, plan, show_progress, self.progress_desc))
            plan = rounds.next_plan()
        posterior, report = rounds.result()
        if width is not None and "max_samples" in report.stopped_by:
            _warn_max_samples(report, game.batch_size, cap, width)
        extras = {"half_width": posterior.half_width(options.confidence), "report": report}
        return Outcome(posterior.mean, extras, per_feature=("half_width",))

    def _walsh_gp(
        self, game: CoalitionGame, options: BayesShapOptions, pairs: int, show_progress: bool
    ) -> Outcome:
        """The Walsh-basis Gaussian process's posterior on ``pairs`` stratified pairs."""
        d = game.num_features
        fit = None
        if options.estimator == "walsh_gp":  # as asked: every pair, within the fit's limits
            check_walsh_gp_pairs(d, pairs, options.budget is not None)
        else:  # "auto": beyond what it factorises, adjusted over the other pairs
            fit = posterior_fit_pairs(d)
        windows = feature_windows(game.features)  # the local parities' neighbourhoods
        design = walsh_gp_design(
            d, pairs, options.generator, game.device, fit_pairs=fit, windows=windows
        )
        values = evaluate_plan(game, design.plan(), show_progress, self.progress_desc)
        posterior = design.posterior(values)
        if posterior.variance is None or posterior.dof < 1:
            # no degree of freedom left: every pair observed (d = 2), phi known exactly
            half_width = torch.zeros_like(posterior.mean)
        else:  # with every pair observed (d >= 3) the variances are zero
            quantile = student_t_quantile(options.confidence, posterior.dof)
            half_width = quantile * posterior.variance.sqrt()
        report = BayesShapReport(
            samples=torch.full((game.batch_size,), 2 * len(design.sampled), device=game.device),
            stopped_by=("n_samples",) * game.batch_size,
            max_half_width=half_width.amax(dim=1),
            perturbations_needed=None,
        )
        extras = {"half_width": half_width, "report": report}
        mean = check_attribution_scale(type(self).__name__, values, posterior.mean)
        return Outcome(mean, extras, per_feature=("half_width",))


def _uses_walsh_gp(options: BayesShapOptions, d: int, samples: int) -> bool:
    """Whether the posterior is the Walsh-basis Gaussian process's (see ``estimator``).

    Never for one feature, whose value efficiency gives exactly.
    """
    if d < 2 or options.estimator == "kernel":
        return False
    if options.estimator == "walsh_gp":
        return True
    if options.focused or options.target_width is not None:
        return False
    return auto_walsh_gp(d, drawn_pairs(d, samples // 2))


def _sample_counts(options: BayesShapOptions, d: int) -> tuple[int, int | None, float | None]:
    """First-round coalitions, the cap on coalitions, and the target width."""
    width = _check_target_width(options.target_width)
    if options.budget is None:
        samples = _check_n_samples(options.n_samples, d)
        return samples, _check_max_samples(options.max_samples, samples, width), width
    # one feature: the two endpoints are its value (nothing is sampled)
    budget_samples = samples_within(options.budget, 2, 1, 2 if d > 1 else 0, "BayesShap")
    if budget_samples // 2 < enumerable_pairs(d):
        # drawn pair by pair (memory per draw): bounded like every plan; beyond
        # the distinct pairs, multiplicities are drawn and any budget is fine
        check_plan_size(
            budget_samples, MAX_COALITIONS, "BayesShap", "lower budget or group features"
        )
    if width is None:
        return budget_samples, None, width
    return min(_check_n_samples(None, d), budget_samples), budget_samples, width


def _warn_max_samples(report: Any, batch: int, cap: int | None, width: float) -> None:
    missed = report.stopped_by.count("max_samples")
    needed = report.perturbations_needed
    more = int(needed.max()) if needed is not None else 0
    warn_caller(
        f"BayesShap: {missed} of {batch} examples reached max_samples="
        f"{cap if cap is not None else DEFAULT_MAX_SAMPLES} before target_width="
        f"{width}; about {more:,} more coalitions would be needed (see "
        "return_report=True, report.perturbations_needed). Raise max_samples or "
        "target_width.",
        RuntimeWarning,
    )


def _check_n_samples(n_samples: Any, d: int) -> int:
    if n_samples is None:
        return max(256, 4 * d)
    if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral):
        raise TypeError(f"n_samples must be an int, got {type(n_samples).__name__}.")
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2 sampled coalitions, got {n_samples}.")
    if n_samples < d + 2:
        warn_caller(
            f"BayesShap: n_samples={n_samples} is below d + 2 = {d + 2} for d = {d} "
            "features; the posterior rests mostly on the prior and its intervals are wide. "
            f"Pass n_samples >= {d + 2} or group features with feature_mask.",
            RuntimeWarning,
        )
    check_plan_size(
        int(n_samples), MAX_COALITIONS, "BayesShap", "pass a smaller n_samples or target_width."
    )
    return int(n_samples)


def _check_target_width(target_width: Any) -> float | None:
    if target_width is None:
        return None
    if isinstance(target_width, bool) or not isinstance(target_width, numbers.Real):
        raise TypeError(
            f"target_width must be a positive number (a half-width) or None, got "
            f"{type(target_width).__name__}."
        )
    width = float(target_width)
    if not (math.isfinite(width) and width > 0):
        raise ValueError(f"target_width must be a positive finite number, got {target_width}.")
    return width


def _check_max_samples(max_samples: Any, n_samples: int, target_width: float | None) -> int | None:
    if max_samples is None:
        return None
    if target_width is None:
        raise ValueError(
            "max_samples only bounds the sampling towards target_width; pass target_width= "
            "as well, or use n_samples= for a fixed budget."
        )
    if isinstance(max_samples, bool) or not isinstance(max_samples, numbers.Integral):
        raise TypeError(f"max_samples must be an int or None, got {type(max_samples).__name__}.")
    max_samples = int(max_samples)
    if max_samples < n_samples:
        raise ValueError(
            f"max_samples={max_samples} is below n_samples={n_samples}; it must be at least "
            "the initial budget."
        )
    check_plan_size(int(max_samples), MAX_COALITIONS, "BayesShap", "pass a smaller max_samples.")
    return int(max_samples)
