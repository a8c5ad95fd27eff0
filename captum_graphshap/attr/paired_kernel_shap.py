"""Paired KernelSHAP with the endpoints enforced."""

from __future__ import annotations

import dataclasses

import captum.attr as captum_attr
import torch

from .._warnings import warn_caller
from ..engine.coalition_game import CoalitionGame
from ..engine.features import FeatureMasks
from ..engine.plan import Plan
from ..plans.exact import exact_shapley_plan
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.local_windows import feature_windows
from ..plans.paired_designs import filled_kernel_plan, paired_kernel_plan
from ..plans.permutation_fill import filled_permutation_plan
from ..plans.permutations import filled_orderings
from ..plans.regression_adjusted import cubic_kernel_plan
from ..plans.regression_mc import regression_mc_plan
from ..plans.walsh_gp import (
    MAX_FEATURES,
    auto_fit_pairs,
    auto_walsh_gp,
    check_walsh_gp_pairs,
    walsh_gp_plan,
)
from ._options import check_count, check_generator
from .base import KernelAttribution, Options, Outcome, evaluate_plan
from .budget import check_budget, samples_within
from .guards import check_attribution_scale


@dataclasses.dataclass(frozen=True)
class PairedKernelShapOptions(Options):
    """Options of :class:`PairedKernelShap`.

    Args:
        n_samples: sampled coalitions besides the empty and full ones, in
            complementary pairs (an odd count is rounded up); at least
            ``2 d``: a pair and its complement pin one direction of the fit.
            None: ``2 d + 2048``, the rule of SHAP's ``KernelExplainer``.
        budget: model evaluations per example instead of ``n_samples``:
            ``budget - 2`` distinct sampled coalitions (rounded down to
            pairs), so the budget is spent: ``"kernel"`` keeps drawing i.i.d.
            pairs until that many are distinct and weights each by how often
            it came up; the stratified designs (``"walsh_gp"``, ``"cubic"``)
            draw without replacement; the permutations of ``"auto"`` add
            orderings while their distinct prefixes fit. Below ``2 d``
            (and ``2^d``) the values are not determined: a
            ``RuntimeWarning`` says so (``"kernel"`` and ``"walsh_gp"``
            refuse); from ``2 d`` on ``"auto"`` is exact on games of order
            two.
        generator: ``torch.Generator`` for the draws (reproducible).
        estimator: ``"auto"`` (default): by the evaluations per example
            (``budget``, or ``n_samples + 2``): every coalition and exact
            Shapley when they cover the ``2^d`` coalitions; up to 32
            features ``"walsh_gp"`` from ``d`` pairs on, factorised on at
            most 512 pairs and adjusted over the others, so more
            budget never hands over to a worse estimator (see
            :func:`~captum_graphshap.plans.walsh_gp.auto_walsh_gp`), and
            from 33 to 96 features from ``4 d`` pairs (``8 d + 2``
            evaluations) on; otherwise above 32 features antithetic
            permutations up to there (below ``32 d`` evaluations beyond
            96 features) and ``"cubic"`` from there,
            with a fixed share of its triples instead of a cross-validated
            count (as accurate on the models measured, at a tenth of the
            time or less). ``"walsh_gp"``: the stratified
            pairs and Gaussian-process regression of their odd part in the
            Walsh basis (see ``plans/walsh_gp.py``), every pair factorised:
            exact on games of order two, at least ``d`` pairs and at most
            2,048 (and ``d x pairs^2 <= 2^26``: its cost grows as the pairs
            cubed).
            ``"kernel"``: i.i.d. pairs from the Shapley kernel and the linear
            fit (Captum's estimator, with pairing); ``"stratified"``: the same fit on
            pairs stratified by size, the sizes with few coalitions
            enumerated and no coalition drawn twice; ``"cubic"``: the
            stratified pairs and a regression-adjusted fit whose surrogate
            also holds the most interacting triples (from ``6 d`` pairs on;
            see ``plans/regression_adjusted.py``), 3-20x more accurate on
            smooth models at 256-4,096 evaluations; ``"regression_mc"``:
            unbiased regression-adjusted Monte Carlo (Witter et al., 2025):
            small sizes enumerated, the rest drawn i.i.d., the same surrogate
            fitted out of fold and its sampled residual added back
            (cross-fitted, see ``plans/regression_mc.py``): 0.9-2.4x (mostly
            1.1-1.6x) the cubic estimator's error, for an estimate whose mean
            is exact.
    """

    n_samples: int | None = None
    budget: int | None = None
    generator: torch.Generator | None = None
    estimator: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_budget(self.budget, self.n_samples)
        check_generator(self.generator)
        check_choice(self.estimator, KERNEL_ESTIMATORS, "estimator")


#: ``estimator=`` choices of :class:`PairedKernelShap`
KERNEL_ESTIMATORS: tuple[str, ...] = (
    "auto",
    "kernel",
    "stratified",
    "cubic",
    "regression_mc",
    "walsh_gp",
)
#: Beyond :data:`~captum_graphshap.plans.walsh_gp.MAX_FEATURES` features,
#: ``estimator="auto"`` samples antithetic permutations below this many
#: evaluations per feature and fits the cubic surrogate from it on, where the
#: cubic fit's error falls below the permutations' (benchmarks/README.md,
#: "Constants and their measurements"; measured at d = 10-16).
AUTO_PERMUTATIONS_BELOW = 6
#: From :data:`WIDE_FEATURES` features on, the crossover is at this many
#: evaluations per feature instead (it matters beyond the process's 96 features):
#: on benchmarks/wide.py's games the cubic fit was 3.7x the permutations' error
#: on a ViT over 196 patches at 10 per feature (seed 803612: 0.55 against 0.15)
#: and 3.5x on one over its about 147 tokens off the baseline at 14 per feature
#: (seed 214803: 0.339 against 0.097; the handover at 12 took the cubic fit
#: there), 1.1-1.3x on a 49-patch CNN and 52 superpixels at 10; from 31 per
#: feature on it was 0.71-0.87x. On a max game at d = 96 the cubic fit stays
#: 2.3x the permutations' error up to 48 per feature. The other way: on three
#: tanh MLPs with 100 features it had 0.78-0.93x their error at 12-30 per
#: feature; the handover at 32 gives that up to keep the ViT's 3.5x away.
AUTO_PERMUTATIONS_BELOW_WIDE = 32
WIDE_FEATURES = 48
#: From 33 features to :data:`WIDE_FEATURES`, antithetic permutations up to where
#: the process starts (``8 d``), not the cubic fit from ``6 d``: in the 19 zoo cells
#: of that band (d = 40 at 256 evaluations, runs A-G) the cubic fit was our best
#: in 3, permutations in 11; permutations had 0.37-1.61x its error, median 0.77,
#: where both are known (18 cells); on a fresh seed's five models 0.36-1.37x
#: (``benchmarks/ZOO.md``, "Permutations up to the process").
AUTO_PERMUTATIONS_BELOW_MIDDLE = 8


class PairedKernelShap(KernelAttribution, captum_attr.KernelShap):
    r"""KernelSHAP with paired sampling and the endpoints enforced.

    The default ``estimator="auto"`` picks the most accurate estimator
    measured for the budget: exact Shapley when it covers the ``2^d``
    coalitions, the Walsh-basis Gaussian process (``"walsh_gp"``) at low
    budgets, the cubic fit (``"cubic"``) above (see the options).

    With ``estimator="kernel"``, coalitions are drawn from the Shapley kernel (size :math:`s` with
    probability :math:`\propto 1/(s(d-s))`, then a uniform subset), each with
    its complement (Covert & Lee, 2021), and the attributions solve the
    efficiency-constrained least squares in closed form, so
    :math:`\sum_i \phi_i = v(D) - v(\emptyset)` exactly. The draws are shared
    by the batch: one ``d x d`` solve serves every example.

    ``estimator="cubic"`` keeps the pairs but stratifies them by size (small
    sizes enumerated, no duplicates) and fits, besides the linear terms, the
    triples whose pairs interact most: a regression-adjusted estimate that
    is exact on games of order three once the fit is determined.

    Example:
        >>> import torch
        >>> from captum_graphshap import PairedKernelShap
        >>> model = torch.nn.Linear(4, 1)
        >>> g = torch.Generator().manual_seed(0)
        >>> phi = PairedKernelShap(model).attribute(torch.ones(1, 4), target=0, generator=g)
        >>> gap = (model(torch.ones(1, 4)) - model.bias).detach()
        >>> round(float(phi.sum()), 4) == round(float(gap), 4)
        True
    """

    progress_desc = "Kernel Shap attribution"
    Options = PairedKernelShapOptions
    drops_null_players = True
    reads_feature_layout = True

    def explain(
        self, game: CoalitionGame, options: PairedKernelShapOptions, show_progress: bool
    ) -> Outcome:
        d = game.num_features
        endpoints = torch.stack(
            [
                torch.zeros(d, dtype=torch.bool, device=game.device),
                torch.ones(d, dtype=torch.bool, device=game.device),
            ]
        )
        if d == 1:
            if options.budget is not None and options.budget < 2:
                raise ValueError(
                    f"budget={options.budget} is too small for PairedKernelShap: one feature's "
                    "value is v(D) - v(empty), 2 evaluations per example; raise budget to 2."
                )
            values = game.evaluate(endpoints, distinct=True)
            return Outcome(values[:, 1:] - values[:, :1])
        count = self._samples(options, d)
        plan, estimator = None, options.estimator
        if estimator == "auto":
            plan, estimator = auto_plan(
                d, count, options.generator, game.device, features=game.features
            )
        if plan is None:
            plan = chosen_plan(estimator, d, count, options, game.device, game.features)
            if estimator == "kernel":
                _check_kernel_design(plan, d)
        values = evaluate_plan(game, plan, show_progress, self.progress_desc)
        return Outcome(check_attribution_scale(type(self).__name__, values, plan.estimator(values)))

    @staticmethod
    def _samples(options: PairedKernelShapOptions, d: int) -> int:
        advice = (
            "A complementary pair pins one direction of the fit, so d features need about "
            "d pairs (2 d coalitions)."
        )
        if options.budget is not None:
            if options.estimator == "kernel" and options.budget < 2 * d:
                # each pair pins one direction and efficiency the last: d - 1 pairs at least
                raise ValueError(
                    f"budget={options.budget} is too small for PairedKernelShap("
                    f"estimator='kernel') with d = {d} features: the kernel fit needs d - 1 = "
                    f"{d - 1} complementary pairs besides the 2 endpoints, budget >= 2 d = "
                    f"{2 * d}; below that it is underdetermined. Raise budget to {2 * d}, or use "
                    "estimator='auto', which picks an estimator for any budget."
                )
            count = samples_within(options.budget, 2, 1, 2, "PairedKernelShap")
            count -= count % 2
            if _underdetermined(count + 2, d) and options.estimator != "walsh_gp":  # it refuses
                warn_caller(
                    f"PairedKernelShap: budget={options.budget} leaves {count // 2} "
                    f"complementary pair(s) for d = {d} features, fewer than the d - 1 = {d - 1} "
                    "that determine the values: the fit is underdetermined and its values can be "
                    "far from exact (efficiency still holds; on a game of order two they are "
                    f"exact from budget={2 * d} on). Raise budget to {2 * d}, or group features "
                    "with feature_mask.",
                    RuntimeWarning,
                )
        else:
            count = 2 * d + 2048 if options.n_samples is None else options.n_samples
            count = check_count(count, "n_samples", 1)
            if count < 2 * d and options.estimator != "walsh_gp":  # it refuses
                warn_caller(
                    f"PairedKernelShap: n_samples={count} is below 2 d = {2 * d} for d = {d} "
                    f"features; the fit is underdetermined and gives the minimum-norm "
                    f"solution (efficiency still holds). {advice}",
                    RuntimeWarning,
                )
        check_plan_size(
            count,
            MAX_COALITIONS,
            "PairedKernelShap",
            f"lower {'budget' if options.budget is not None else 'n_samples'} or group features",
        )
        return count


#: The kernel design's rank is checked below this many sampled coalitions per
#: feature (its ``(M, d)`` SVD is cheap there; above, no draw measured was singular)
KERNEL_RANK_CHECK_PER_FEATURE = 8


def _check_kernel_design(plan: Plan, d: int) -> None:
    """Warn, before any model call, when the kernel's i.i.d. draws leave the values
    undetermined: their coalitions of rank below ``d`` (d = 8, 8-10 distinct pairs of
    sizes 1, 2 and 3 only, rank 7: the least-norm split had 0.18 relative error on an
    additive game)."""
    sampled = plan.coalitions.dense()[2:]  # the endpoints first
    if not 2 * d <= sampled.shape[0] < KERNEL_RANK_CHECK_PER_FEATURE * d:  # below: warned
        return
    rank = int(torch.linalg.matrix_rank(sampled.to(torch.float64)))
    if rank < d:
        warn_caller(
            f"PairedKernelShap(estimator='kernel'): the {sampled.shape[0] // 2} distinct pairs "
            f"drawn leave the values undetermined (their coalitions have rank {rank} of d = "
            f"{d}): the fit takes the least-norm split, which can be far from exact. Raise "
            "budget, or use estimator='auto' (its designs are drawn to identify every feature).",
            RuntimeWarning,
        )


def _underdetermined(evaluations: int, d: int) -> bool:
    """Whether ``evaluations`` per example (endpoints included) leave fewer than ``d - 1``
    complementary pairs and do not cover the ``2^d`` coalitions."""
    return evaluations < 2 * d and not _covers_every_coalition(evaluations, d)


def _covers_every_coalition(evaluations: int, d: int) -> bool:
    """``2^d <= evaluations``, without forming ``2^d``."""
    return d < evaluations.bit_length()


def chosen_plan(
    estimator: str,
    d: int,
    count: int,
    options: PairedKernelShapOptions,
    device: torch.device,
    features: FeatureMasks | None = None,
) -> Plan:
    """The plan of a named ``estimator`` (not ``"auto"``) for ``count + 2`` evaluations;
    ``features``: the call's masks, whose geometry gives the process's local windows."""
    generator = options.generator
    if estimator == "kernel" and options.budget is not None:
        # budget= counts distinct evaluations: draw until they are all spent
        return filled_kernel_plan(d, count // 2, generator, device)
    if estimator == "kernel":
        return paired_kernel_plan(d, count, generator, device)
    if estimator == "regression_mc":
        return regression_mc_plan(d, (count + 1) // 2, generator, device)
    if estimator == "walsh_gp":
        check_walsh_gp_pairs(d, count // 2, options.budget is not None)
        return walsh_gp_plan(d, count // 2, generator, device, windows=feature_windows(features))
    triples = 0 if estimator == "stratified" else None
    return cubic_kernel_plan(d, (count + 1) // 2, generator, device, triples=triples)


def auto_plan(
    d: int,
    count: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    features: FeatureMasks | None = None,
) -> tuple[Plan | None, str]:
    """``estimator="auto"``: the plan for ``count + 2`` evaluations, or the estimator to use.

    Every coalition (exact Shapley) when they fit; the Walsh-basis
    Gaussian-process fit where
    :func:`~captum_graphshap.plans.walsh_gp.auto_walsh_gp` takes it;
    otherwise (more features, or fewer pairs than features) antithetic
    permutations below
    :data:`AUTO_PERMUTATIONS_BELOW` ``d`` evaluations
    (:data:`AUTO_PERMUTATIONS_BELOW_MIDDLE` ``d`` above
    :data:`~captum_graphshap.plans.walsh_gp.MAX_FEATURES` features,
    :data:`AUTO_PERMUTATIONS_BELOW_WIDE` ``d`` from :data:`WIDE_FEATURES`
    features on; at least two
    orderings, the rows they leave spent on single features' samples,
    :func:`~captum_graphshap.plans.permutation_fill.filled_permutation_plan`);
    otherwise no plan here and ``"cubic"``. ``features``: the call's masks, whose
    geometry gives the process's local windows (``plans/local_windows.py``; None:
    the ids' order).
    """
    evaluations = count + 2
    if _covers_every_coalition(evaluations, d):
        return exact_shapley_plan(d, device, method="PairedKernelShap"), "exact"
    if auto_walsh_gp(d, count // 2, wide=True):
        fit = auto_fit_pairs(d)
        windows = feature_windows(features)
        plan = walsh_gp_plan(d, count // 2, generator, device, fit_pairs=fit, windows=windows)
        return plan, "walsh_gp"
    # an ordering adds at most d - 1 rows besides the shared empty and full coalitions
    orderings = (evaluations - 2) // max(1, d - 1)
    per_feature = AUTO_PERMUTATIONS_BELOW
    if d > MAX_FEATURES:
        wide = d >= WIDE_FEATURES
        per_feature = AUTO_PERMUTATIONS_BELOW_WIDE if wide else AUTO_PERMUTATIONS_BELOW_MIDDLE
    # (+ 2: the endpoints, so the middle band meets the process at 8 d + 2)
    if evaluations < per_feature * d + 2 and orderings >= 2:
        # as many antithetic orderings as their distinct prefixes allow
        ranks = filled_orderings(d, evaluations, True, generator, device, minimum=2, even=True)
        return filled_permutation_plan(ranks, evaluations, generator, device), "permutation"
    return None, "cubic"
