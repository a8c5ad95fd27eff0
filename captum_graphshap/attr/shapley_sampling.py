"""Permutation sampling (Captum's ``ShapleyValueSampling`` estimator), with intervals."""

from __future__ import annotations

import dataclasses
from typing import Any

import captum.attr as captum_attr
import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..engine.derivatives import taylor_cost
from ..plans.control_variates import (
    controlled_contributions,
    ordering_groups,
    surrogate_contributions,
)
from ..plans.draws import random_indices
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.permutation_window import draw_window, window_estimate
from ..plans.permutations import (
    filled_orderings_and_references,
    pair_antithetic,
    permutation_contributions,
    permutation_plan,
    permutation_ranks,
)
from ..uncertainty.intervals import check_confidence, mean_and_half_width
from ._options import check_count, check_flag, check_generator
from .base import Options, Outcome, SampledAttribution
from .budget import check_budget, samples_within
from .control_variate import check_control_options, taylor_control

INTERVALS: tuple[str, ...] = ("moderated", "t", "normal", "bootstrap")

#: Captum's default number of orderings
DEFAULT_ORDERINGS = 25
#: the default with ``return_uncertainty=True`` and ``antithetic=True``:
#: an interval needs whole antithetic pairs
DEFAULT_PAIRED_ORDERINGS = 26


@dataclasses.dataclass(frozen=True)
class ShapleySamplingOptions(Options):
    """Options of :class:`ShapleySampling`.

    Args:
        n_samples: number of orderings (Captum's meaning, default 25; 26 with
            ``return_uncertainty`` and ``antithetic``); each costs at most
            ``d - 1`` evaluations besides the shared empty and full
            coalitions. With ``antithetic`` an odd count is ``n // 2``
            antithetic pairs plus one independent ordering (the estimate is
            the mean over all ``n``, still unbiased); an interval needs an
            even count then.
        budget: model evaluations per example instead of ``n_samples``:
            orderings are added while their distinct prefixes (the empty and
            full coalitions, and the first and last few members many
            orderings share) number at most ``budget``; at least the ``M``
            with ``2 + (d - 1) M <= budget`` (``(d + 1) M`` with
            ``references``, where a row is a prefix with its reference),
            which is the count with ``control_variate`` and the
            ``"optimal"`` coefficient (whose cross-fitting wants a fixed
            count). With ``antithetic``, whole pairs (one ordering only where
            no pair fits); the rows they leave buy a window of one more pair.
        antithetic: pair each ordering with its reverse (default True, as in
            :class:`Shear`): exact for games of order two, and never less
            accurate than independent orderings in our benchmarks.
        generator: ``torch.Generator`` for orderings, references and the
            bootstrap; the same seed gives the same result.
        return_uncertainty: also return ``half_width``, the interval
            half-widths.
        confidence: the interval's confidence level, in (0, 1).
        interval: over the ``K`` independent samples (orderings, or
            antithetic pairs): ``"moderated"`` (default) the wider of the
            ``"t"`` interval and a moderated ``t`` whose per-feature variance
            is shrunk toward a prior fitted across the features
            (:func:`~captum_graphshap.uncertainty.moderated_half_width`);
            below 16 orderings a model with skewed contributions can
            under-cover (docs/guide/uncertainty.md has the measured
            coverage); ``"t"`` (``t_{K-1} * SSD / sqrt(K)``, the plain
            Student interval, which under-covers at few orderings: a
            feature's few samples often coincide, leaving a zero-width
            interval);
            ``"normal"`` (the same with the normal ``z``, which under-covers
            more) or ``"bootstrap"`` (percentile interval of 1000 resampled
            means, halved).
        references: a background set ``(B, ...)`` replacing ``baselines``:
            each ordering takes one reference drawn uniformly, so the estimate
            and its interval cover both the orderings and the references.
        control_variate: None (default), or ``"taylor"``: ControlSHAP's
            control variate, a second-order Taylor expansion of the model
            (one gradient and ``d`` Hessian-vector products per example,
            counted as ``1 + 3 + 4 d`` evaluations in ``n_evaluations`` and
            ``budget=``, per output without ``target``) evaluated on the same
            orderings by arithmetic; the
            estimate stays unbiased and efficient (each ordering's sum is
            restored after the per-feature coefficients) and the interval is
            that of the residual game. It pays with ``antithetic=False``: antithetic pairs already
            cancel a game's quadratic part (``plans/control_variates.py``).
            Needs floating inputs and a differentiable model.
        control_point: the expansion point ``b + t (x - b)``, ``t`` in
            [0, 1] (default 0.5, the midpoint).
        control_coefficient: ``"optimal"`` (default: ``Cov / Var`` per
            example and feature, cross-fitted between two halves of the
            orderings so the estimate stays unbiased) or a number (1.0:
            sample the residual game and add the surrogate's Shapley value).
    """

    n_samples: int | None = None
    budget: int | None = None
    antithetic: bool = True
    generator: torch.Generator | None = None
    return_uncertainty: bool = False
    confidence: float = 0.95
    interval: str = "moderated"
    control_variate: str | None = None
    control_point: float = 0.5
    control_coefficient: float | str = "optimal"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_control_options(
            self.control_variate, self.control_point, self.control_coefficient, self.references
        )
        check_budget(self.budget, self.n_samples)
        check_flag(self.antithetic, "antithetic")
        check_confidence(self.confidence)
        check_choice(self.interval, INTERVALS, "interval")
        check_generator(self.generator)
        if self.n_samples is not None:
            check_orderings(self.n_samples, self.antithetic, self.return_uncertainty)

    def minimum(self) -> int:
        if self.return_uncertainty:
            return 4 if self.antithetic else 2
        return 1


def check_orderings(n_samples: Any, antithetic: bool, uncertainty: bool) -> int:
    minimum = (4 if antithetic else 2) if uncertainty else 1
    count = check_count(
        n_samples,
        "n_samples",
        minimum,
        "An interval needs at least two independent samples (pairs when antithetic)."
        if uncertainty
        else "",
    )
    if antithetic and uncertainty and count % 2:
        raise ValueError(
            f"n_samples must be even with antithetic=True and return_uncertainty=True (the "
            f"interval's samples are antithetic pairs), got {count}; use {count + 1}, or "
            "antithetic=False."
        )
    return count


class ShapleySampling(SampledAttribution, captum_attr.ShapleyValueSampling):
    r"""Shapley values by permutation sampling, with intervals.

    Each sampled ordering of the features adds them one at a time; a
    feature's marginal contribution along it is an unbiased sample of its
    Shapley value, and the estimate is the mean over ``n_samples`` orderings
    (the estimator of :class:`captum.attr.ShapleyValueSampling`, with the
    same arguments). The orderings are shared by the batch, as in Captum, so
    an example's explanation does not depend on the others in its batch;
    their :math:`d + 1` prefixes are deduplicated and evaluated in few
    batched model calls.

    Beyond Captum: ``antithetic=True`` (the default) pairs each ordering with
    its reverse, which makes the estimate exact for games of order two
    (``antithetic=False`` draws Captum's independent orderings);
    ``references`` samples one reference per ordering (Merrick & Taly, "The
    Explanation Game"); ``return_uncertainty=True`` returns the half-width
    of a confidence interval over the independent samples; ``budget=``
    chooses the number of orderings from a number of evaluations.

    Example:
        A game of order two, on which antithetic orderings are exact:

        >>> import torch
        >>> from captum_graphshap import ExactShapley, ShapleySampling
        >>> def pairs(x):
        ...     return x[:, 0] * x[:, 1] + 2 * x[:, 2] * x[:, 3] - x[:, 4]
        >>> x = torch.linspace(-1, 1, 10, dtype=torch.float64).view(2, 5)
        >>> g = torch.Generator().manual_seed(0)
        >>> phi, n = ShapleySampling(pairs).attribute(
        ...     x, budget=50, generator=g, return_evaluations=True
        ... )
        >>> bool((n <= 50).all()), torch.allclose(phi, ExactShapley(pairs).attribute(x))
        (True, True)
    """

    progress_desc = "Shapley Value Sampling attribution"
    exact_for_dummies = True
    drops_null_players = True
    Options = ShapleySamplingOptions
    budget_accounting = "row"  # budget.py: a row is a prefix with its own sampled reference

    def explain(
        self, game: CoalitionGame, options: ShapleySamplingOptions, show_progress: bool
    ) -> Outcome:
        d = game.num_features
        # every refusal (budget, plan size) before the surrogate's derivatives run the model
        count = self._orderings(options, d, game.outputs)
        check_plan_size(
            count * (d + 1),
            MAX_COALITIONS,
            "ShapleySampling",
            f"lower {'budget' if options.budget is not None else 'n_samples'} or group "
            "features with feature_mask",
        )
        surrogate = None
        if options.control_variate is not None:
            surrogate = taylor_control(game, float(options.control_point))
        generator = options.generator
        # target=None on a model of several outputs: the rows are shared (the tape), the
        # surrogate's derivatives are each output's own, so the budget pays for all of them
        cost = taylor_cost(d) * game.outputs if surrogate is not None else 0
        ranks, reference_index = _draw_orderings(game, options, count, cost)
        count = ranks.shape[1]
        plan = permutation_plan(ranks, options.antithetic)
        before = game.evaluations_with_replays()
        values = game.evaluate_rows(
            plan.example_index,  # type: ignore[arg-type]
            plan.coalitions,
            reference_index=reference_index,
            show_progress=show_progress,
            desc=self.progress_desc,
        )
        if surrogate is None and not options.return_uncertainty:
            spent = int((game.evaluations_with_replays() - before).max())
            whole_mean = plan.estimator(values)
            return Outcome(_with_window(game, options, whole_mean, values, ranks, spent))
        contributions = permutation_contributions(values.view(*ranks.shape[:2], -1), ranks)
        if surrogate is not None:
            contributions = controlled_contributions(
                contributions,
                surrogate_contributions(surrogate, ranks).to(contributions.dtype),
                surrogate.shapley().to(contributions.dtype),
                ordering_groups(count, options.antithetic).to(ranks.device),
                options.control_coefficient,
            )
            # the surrogate's derivatives carry the inputs' autograd graph: detach,
            # as every class's attributions are
            contributions = contributions.detach()
        if not options.return_uncertainty:
            return Outcome(contributions.mean(dim=1))
        samples = pair_antithetic(contributions) if options.antithetic else contributions
        mean, half_width = mean_and_half_width(
            samples, options.confidence, options.interval, generator
        )
        return Outcome(mean, {"half_width": half_width}, per_feature=("half_width",))

    @staticmethod
    def _orderings(options: ShapleySamplingOptions, d: int, outputs: int = 1) -> int:
        if options.budget is None:
            if options.n_samples is None:
                paired = options.antithetic and options.return_uncertainty
                return DEFAULT_PAIRED_ORDERINGS if paired else DEFAULT_ORDERINGS
            return check_orderings(
                options.n_samples, options.antithetic, options.return_uncertainty
            )
        if options.references is not None:
            fixed, per_ordering = 0, d + 1
        elif d == 1 and options.control_variate is None:
            # one feature: every ordering is the two endpoints, whatever their number
            if options.budget < 2:
                raise ValueError(
                    f"budget={options.budget} is too small for ShapleySampling: one "
                    "feature's value is v(D) - v(empty), 2 evaluations per example; raise "
                    "budget to 2."
                )
            return options.minimum()
        else:
            fixed, per_ordering = min(2, d + 1), max(1, d - 1)
        if options.control_variate is not None:  # every output's derivatives
            fixed += taylor_cost(d) * outputs
        count = samples_within(
            options.budget, fixed, per_ordering, options.minimum(), "ShapleySampling"
        )
        # with antithetic orderings the budget buys whole pairs: a lone ordering's
        # contributions carry the game's even part, which a pair cancels, and weighed
        # as one sample of several it doubled the error (d = 8, 32 evaluations: 4
        # pairs' rows and one lone ordering 0.123, the pairs alone 0.068); where no
        # pair fits, one ordering
        if options.antithetic and count >= 2:  # intervals' minimum is 4
            return count - count % 2
        return count


def _draw_orderings(
    game: CoalitionGame, options: ShapleySamplingOptions, count: int, surrogate_cost: int
) -> tuple[Tensor, Tensor | None]:
    """The orderings' ranks ``(N, M, d)`` and, with ``references``, each row's reference.

    With ``budget=`` orderings are added while their distinct prefixes fit the
    budget left after the surrogate's derivatives (``count`` at least), shared
    by the batch; otherwise ``count`` orderings.
    """
    d, batch, generator = game.num_features, game.batch_size, options.generator
    if options.budget is not None and _fills_budget(options, d):
        shared, references = filled_orderings_and_references(
            d, options.budget - surrogate_cost, options.antithetic, generator, game.device,
            minimum=count, even=options.antithetic and count % 2 == 0,
            references=game.num_references if options.references is not None else 0,
        )  # fmt: skip
        ranks = shared.expand(batch, -1, -1)
        if references is None:
            return ranks, None
        per_row = references.expand(batch, -1).repeat_interleave(d + 1, dim=1)
        return ranks, per_row.reshape(-1)
    ranks = permutation_ranks(batch, d, count, options.antithetic, generator, game.device)
    if options.references is None:
        return ranks, None
    return ranks, _sampled_references(game, ranks, options.antithetic, generator)


def _with_window(
    game: CoalitionGame,
    options: ShapleySamplingOptions,
    whole_mean: Tensor,
    values: Tensor,
    ranks: Tensor,
    spent: int,
) -> Tensor:
    """The whole orderings' mean, with ``budget=``'s rest spent on one ordering's window.

    ``spent``: the evaluations per example the whole orderings made (or the
    multi-output tape replayed: the window is the same in each output's run).

    :mod:`~captum_graphshap.plans.permutation_window`: unbiased, efficient,
    exact where the whole orderings are (additive models). Not with
    ``references`` (a row is a prefix and its reference).
    """
    if options.budget is None or options.references is not None:
        return whole_mean
    batch, orderings, d = ranks.shape
    paired = options.antithetic and orderings % 2 == 0
    left = options.budget - spent
    window = draw_window(d, left, paired, options.generator, game.device)
    if window is None:
        return whole_mean
    coalitions = window.coalitions()
    rows = coalitions.shape[0]
    window_values = game.evaluate_rows(
        torch.arange(batch, device=game.device).repeat_interleave(rows),
        coalitions.repeat(batch, 1),
        distinct=True,
    ).view(batch, rows)
    ends = values.view(batch, orderings, d + 1)[:, 0, [0, d]]
    samples = orderings // 2 if paired else orderings
    return window_estimate(whole_mean, samples, window, window_values, ends)


def _fills_budget(options: ShapleySamplingOptions, d: int) -> bool:
    """Whether ``budget=`` adds orderings while their distinct prefixes fit
    (:func:`~captum_graphshap.plans.permutations.filled_orderings`).

    With ``references`` a row is a prefix and its reference. Not with
    ``control_variate`` and ``control_coefficient="optimal"``, whose
    cross-fitted coefficient is unbiased for independent halves of the
    orderings: a count chosen from how all of them overlap would tie the
    halves together (a fixed coefficient is a plain mean, unbiased as it is).
    """
    optimal = options.control_variate is not None and options.control_coefficient == "optimal"
    return d >= 2 and not optimal


def _sampled_references(
    game: CoalitionGame, ranks: Tensor, antithetic: bool, generator: torch.Generator | None
) -> Tensor:
    """One reference per ordering, drawn uniformly (an antithetic pair shares one),
    repeated over the ordering's ``d + 1`` prefixes."""
    batch, orderings, d = ranks.shape
    pairs = orderings // 2 if antithetic else 0
    # one reference per ordering, shared by the batch as the orderings are
    reference = random_indices(
        game.num_references, (1, orderings - pairs), generator, game.device
    ).expand(batch, -1)
    if antithetic:
        reference = torch.cat([reference[:, :pairs], reference], dim=1)
    return reference.repeat_interleave(d + 1, dim=1).reshape(-1)
