r"""Shapley values by Gaussian-process regression of the odd part in the Walsh basis.

Write the game in the Walsh (parity) basis, ``v(S) = sum_T c_T chi_T(S)`` with
``chi_T(S) = prod_{j in T} x_j`` and ``x_j = +1`` for members, ``-1`` otherwise.
Only odd ``|T|`` carry Shapley value, and ``phi_i = sum_{T odd, T ni i} (2 / |T|) c_T``,
a linear functional of the coefficients. A complementary pair measures the
odd part ``u(S) = (v(S) - v(D - S)) / 2 = sum_{T odd} c_T chi_T(S)`` exactly.

The linear parities are fitted by generalised least squares (a flat prior:
never shrunk); the others get an independent Gaussian prior
``c_T ~ N(0, s^2 sigma_|T| prod_{j in T} r_j)``, ``sigma_k`` falling with the
order and ``r_j`` feature ``j``'s relevance (from the paired linear fit and,
from :data:`INTERACTION_PAIRS_PER_FEATURE` pairs per feature, the even part's
pairwise interactions). The odd part is then a Gaussian process
(``plans/walsh_kernel.py``), ``phi`` is jointly Gaussian with it, and the
estimate is the posterior mean (universal kriging): twice the linear
coefficients plus ``Cov(phi, u) K^-1 (u - X beta)``. It is exact on games of
order two, uses every parity of order three to :data:`MAX_ORDER` at once,
shrunk by its prior instead of chosen, and efficient because the full
coalition is observed. The scale ``s`` is profiled out and the prior's shape
is chosen per example by the restricted likelihood over a small grid.

Beyond the pairs it factorises, the process is fitted on a smaller budget's
design and its posterior mean is the surrogate of a regression adjustment
over every pair (:func:`adjusted_posterior`), so more budget refines the
estimate instead of handing it to another estimator. The designs are in
``plans/walsh_design.py``. Accuracy and cost against shapiq's kADDSHAP and the
other estimators: ``benchmarks/estimators.py``; the constants' measurements:
``benchmarks/README.md``, "Walsh-basis process: constants".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .paired_designs import kernel_shapley
from .regression_adjusted import (
    MAX_PAIRWISE_FIT_FEATURES,
    cubic_predicts_better,
    cubic_shapley,
    even_pairwise,
    triple_count,
)
from .walsh_design import draw_design, drawn_pairs, fewest_pairs
from .walsh_kernel import (
    MAX_ORDER,
    built_covariances,
    cross_covariances,
    leave_one_out_symmetric,
    order_variances,
    pattern_covariances,
    prior_shapley_variances,
    shapley_order_weights,
    signed_elementary_symmetric,
    work_floats,
)
from .walsh_kriging import (
    Factored,
    factor_projected,
    kriging,
    leave_one_out_scale,
    linear_projection,
    posterior_variances,
)
from .walsh_local import (
    LOCAL_DECAYS,
    LOCAL_WEIGHTS,
    Windows,
    add_local_covariances,
    line_windows,
    local_enabled,
    local_mass,
    local_parities,
    local_sets,
)
from .walsh_triples import (
    triple_mass,
    triple_members,
    triple_products,
    triple_table,
    triple_weights,
    unit_mean,
)

#: The ratios of prior variances from order ``k`` to ``k + 2`` (``k >= 3``) tried.
ORDER_DECAYS = (0.01, 0.1)
#: Relevance ``r_j = (|phi_j| / mean |phi| + floor) ** power``, power from these
#: (0.5 and 1.5 rather than 1 and 2: on fresh zoo seeds, no peers, six or four runs
#: a cell, 0.96-0.98x the error on average at 4 d, 256 and 1,024: benchmarks/ZOO.md).
RELEVANCE_POWERS = (0.5, 1.5)
RELEVANCE_FLOOR = 0.05
#: From this many pairs per feature the relevance before its power is the
#: geometric mean of ``|phi_j|`` (the linear fit) and feature ``j``'s summed
#: absolute pairwise coefficients of the even part; with fewer, the linear fit's.
INTERACTION_PAIRS_PER_FEATURE = 6
#: ``estimator="auto"`` factorises the process on at most this many pairs, up
#: to :data:`MAX_FEATURES` features (up to 16 the table of agreement patterns
#: makes it about as cheap as the cubic fit; from 17 to 32 features, at 1,024
#: evaluations, 512 pairs measured 0.64-1.10x the error, median 0.88, of the
#: pairs of 20 d evaluations adjusted over the rest, at 0.73-1.07x the time:
#: ``benchmarks/ZOO.md``) ...
AUTO_WALSH_GP_MAX_PAIRS = 512
#: ... at every budget up to this many features ...
AUTO_WALSH_GP_FEATURES = 16
#: ... and above them up to this many pairs, then hands over to the cubic fit.
AUTO_ADJUSTED_MAX_PAIRS = 8192
#: Above this many features ``"auto"`` does not use the process at every
#: budget: the covariance's cost grows as ``d^3`` at a fixed number of
#: evaluations per feature, and at fewer than ``8 d`` evaluations it loses to
#: antithetic permutations on wide games ...
MAX_FEATURES = 32
#: ... but :class:`~captum_graphshap.attr.PairedKernelShap`'s ``"auto"`` fits it up
#: to this many features from :data:`WIDE_PAIRS_PER_FEATURE` pairs per feature
#: (``8 d + 2`` evaluations) on. On 42 zoo models with 40-64 features (four fresh
#: seeds; 62 cells at ``8 d``, ``12 d`` and 1,024 evaluations), against the rule
#: before (the cubic fit, or permutations below ``12 d`` from 48 features), its
#: error was median 0.76x (0.32-1.12x); at ``4 d`` and ``6 d`` it lost up to 2.8x
#: on LayerNorm models, hence the floor (``benchmarks/ZOO.md``, "The process up
#: to 64 features"). From 65 to 96 features (10 zoo models with 72-96 features,
#: a fresh seed, at 1,024 and 2,048 evaluations) it had 0.28-1.11x the error of
#: the rule before, median 0.68, below 1 in 19 of 20 cells; 67
#: superpixels at 2,048: 0.56-0.60x ("The process up to 96 features"). Its cost on a
#: cheap game there: 0.11-0.13 s per example at 1,024-2,048 evaluations.
WIDE_MAX_FEATURES = 96
WIDE_PAIRS_PER_FEATURE = 4
#: ``estimator="walsh_gp"`` refuses more complementary pairs than this (the
#: covariance is pairs^2 and its factorisation pairs^3 per prior and example) ...
MAX_PAIRS = 2048
#: ... and more than this ``d x pairs^2`` (the covariance's build).
MAX_WORK = 2**26
#: Beyond its fitted pairs the adjusted process hands an example to the plain
#: cubic fit where that predicts the other pairs better, once they number at
#: least this share of the fitted ones (fewer make a noisy comparison).
HELD_OUT_SHARE = 1.0
#: Floats of covariance work per chunk of examples: about 256 MiB of float64 on the
#: CPU; on an accelerator, where a chunk is hundreds of small launches whatever its
#: size, 2 GiB (H200, d = 49 on a 7 x 7 patch mask, 16 examples at 1,024
#: evaluations: 119 ms in chunks of two examples, 24 ms in one; 0.4 GiB at most),
#: or a quarter of the memory the device has left (walsh_kernel.work_floats).
CHUNK_FLOATS = {"cpu": 32 * 1024 * 1024, "accelerator": 256 * 1024 * 1024}
#: With more observed rows than this, the prior is chosen by the restricted
#: likelihood on this many of them (evenly spaced over the sizes, and the full
#: coalition), and only the chosen prior is factorised on every row.
SELECTION_ROWS = 256
#: Restricted log-likelihoods closer than this are a tie (a likelihood ratio of
#: 1 + 1e-8), which the grid's order breaks: at the fewest pairs every prior's is
#: the same, and rounding picked one at random (values 1e-15 apart moved the
#: estimate by 5e-3 of its scale; CPU and GPU were 3e-3 apart).
LIKELIHOOD_TIE = 1e-8


def auto_walsh_gp(num_features: int, pairs: int, *, wide: bool = False) -> bool:
    """Whether an ``estimator="auto"`` fits this process to ``pairs`` stratified pairs.

    Up to :data:`MAX_FEATURES` features, from :func:`fewest_pairs`; above
    :data:`AUTO_WALSH_GP_FEATURES` features up to
    :data:`AUTO_ADJUSTED_MAX_PAIRS` pairs. Beyond :func:`auto_fit_pairs`
    pairs the process is fitted on that many and adjusted over the rest
    (:func:`adjusted_posterior`). With ``wide``, also above :data:`MAX_FEATURES`
    up to :data:`WIDE_MAX_FEATURES` features, from :data:`WIDE_PAIRS_PER_FEATURE`
    pairs per feature up to :data:`AUTO_ADJUSTED_MAX_PAIRS` pairs.
    """
    d = num_features
    if wide and MAX_FEATURES < d <= WIDE_MAX_FEATURES:
        return WIDE_PAIRS_PER_FEATURE * d <= pairs <= AUTO_ADJUSTED_MAX_PAIRS
    if d > MAX_FEATURES or pairs < fewest_pairs(d):
        return False
    return d <= AUTO_WALSH_GP_FEATURES or pairs <= AUTO_ADJUSTED_MAX_PAIRS


def auto_fit_pairs(num_features: int) -> int:
    """The most pairs :class:`PairedKernelShap`'s ``"auto"`` factorises:
    :data:`AUTO_WALSH_GP_MAX_PAIRS` at any ``d`` it fits the process to
    (before, above 16 features, only the pairs of 20 ``d`` evaluations: a
    worse estimate at 1,024 evaluations on the model zoo, and no faster)."""
    del num_features  # one cap for every d up to MAX_FEATURES
    return AUTO_WALSH_GP_MAX_PAIRS


def posterior_fit_pairs(num_features: int) -> int:
    """The most pairs :class:`BayesShap`'s ``"auto"`` factorises: all that
    :func:`check_walsh_gp_pairs` allows (its intervals are the process's posterior)."""
    return min(MAX_PAIRS, math.isqrt(MAX_WORK // num_features))


def check_walsh_gp_pairs(num_features: int, pairs: int, budgeted: bool) -> None:
    """Refuse fewer pairs than :func:`fewest_pairs`, and more than :data:`MAX_PAIRS`
    or :data:`MAX_WORK` allow."""
    knob = "budget" if budgeted else "n_samples"
    d = num_features
    if pairs < fewest_pairs(d):
        need = 2 * d + 2 if budgeted else 2 * d
        raise ValueError(
            f"estimator='walsh_gp' needs at least d = {d} complementary pairs "
            f"(the linear parities are fitted, not shrunk), got {pairs}: raise {knob} to "
            f"{need} or more, or use estimator='auto'."
        )
    pairs = drawn_pairs(d, pairs)
    if pairs > MAX_PAIRS or d * pairs * pairs > MAX_WORK:
        raise ValueError(
            f"estimator='walsh_gp' would factor a {pairs + 1:,} x {pairs + 1:,} covariance per "
            f"prior and example over d = {d} features (d x pairs^2 = {d * pairs * pairs:,}; "
            f"at most {MAX_PAIRS:,} pairs and {MAX_WORK:,}): lower {knob}, or use "
            "estimator='auto' (the cubic fit there)."
        )


@dataclass(frozen=True)
class WalshGPDesign:
    """The stratified pairs ``sampled`` ``(P, d)`` of the fit and their kernel weights ``(P,)``.

    Its :meth:`plan` evaluates the empty and full coalitions, the pairs and
    their complements; :meth:`posterior` reads those values.
    """

    sampled: Tensor
    weights: Tensor
    #: ``(F,)`` the pairs the process is factorised on, adjusted over the others
    #: (:func:`adjusted_posterior`); None: every pair
    fitted: Tensor | None = None
    #: the local parities' windows (``plans/local_windows.py``); None: the ids' order
    windows: Windows | None = None

    def plan(self) -> Plan:
        """Shared plan whose estimator is the posterior mean."""
        d = self.sampled.shape[1]
        endpoints = torch.zeros(2, d, dtype=torch.bool, device=self.sampled.device)
        endpoints[1] = True
        rows = torch.cat([endpoints, self.sampled, ~self.sampled])
        return Plan(DenseCoalitions(rows), self.mean, distinct=True)

    def mean(self, values: Tensor) -> Tensor:
        """``(N, d)`` posterior means from the plan's values ``(N, 2 + 2P)``."""
        if self.fitted is None:
            return walsh_gp_shapley(self.sampled, self.weights, values, self.windows)
        return adjusted_posterior(
            self.sampled, self.weights, values, self.fitted, windows=self.windows
        ).mean

    def posterior(self, values: Tensor) -> WalshGPPosterior:
        """Posterior means and variances from the plan's values ``(N, 2 + 2P)``."""
        if self.fitted is None:
            return walsh_gp_posterior(self.sampled, self.weights, values, windows=self.windows)
        return adjusted_posterior(
            self.sampled, self.weights, values, self.fitted, variance=True, windows=self.windows
        )


def walsh_gp_design(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    fit_pairs: int | None = None,
    windows: Windows | None = None,
) -> WalshGPDesign:
    """The process's design (:func:`~captum_graphshap.plans.walsh_design.draw_design`),
    moved to ``device`` in one copy; ``windows``: its local parities'."""
    sampled, weights, fitted = draw_design(num_features, pairs, generator, fit_pairs=fit_pairs)
    on_device = None if fitted is None else fitted.to(device)
    return WalshGPDesign(sampled.to(device), weights.to(device), on_device, windows)


def walsh_gp_plan(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    fit_pairs: int | None = None,
    windows: Windows | None = None,
) -> Plan:
    """Shared plan: the endpoints, ``pairs`` stratified coalitions, then their complements."""
    design = walsh_gp_design(
        num_features, pairs, generator, device, fit_pairs=fit_pairs, windows=windows
    )
    return design.plan()


@dataclass(frozen=True)
class WalshGPPosterior:
    """The posterior of the Shapley values under the Walsh-basis Gaussian process.

    Attributes:
        mean: ``(N, d)`` the posterior means (the estimate).
        variance: ``(N, d)`` the posterior variances, the process's scale
            estimated by restricted likelihood (None when not asked for).
        dof: degrees of freedom of the Student t each ``phi_i`` follows once
            that scale is integrated out: observed pairs plus one (the full
            coalition) less ``d`` (the fitted linear parities).
    """

    mean: Tensor
    variance: Tensor | None
    dof: int
    predicted: Tensor | None = None


def walsh_gp_shapley(
    sampled: Tensor, weights: Tensor, values: Tensor, windows: Windows | None = None
) -> Tensor:
    """``(N, d)`` from the values ``(N, 2 + 2P)`` of :func:`walsh_gp_plan`'s rows."""
    return walsh_gp_posterior(sampled, weights, values, variance=False, windows=windows).mean


def walsh_gp_posterior(
    sampled: Tensor,
    weights: Tensor,
    values: Tensor,
    *,
    variance: bool = True,
    predict: Tensor | None = None,
    windows: Windows | None = None,
) -> WalshGPPosterior:
    """The posterior of ``phi`` from the values ``(N, 2 + 2P)`` of :func:`walsh_gp_plan`'s rows.

    With ``predict`` ``(P', d)`` (bool) it also holds the posterior means of the
    odd part at those coalitions, ``(N, P')``. ``windows``: the local parities'
    (:func:`~captum_graphshap.plans.walsh_local.line_windows` when None).
    """
    pairs, d = sampled.shape
    values = values.to(torch.float64)
    empty, full = values[:, 0], values[:, 1]
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    # the full coalition is observed too: u(D) = (v(D) - v(empty)) / 2
    odd = torch.cat([(inside - outside) / 2, ((full - empty) / 2)[:, None]], dim=1)
    full_row = torch.ones(1, d, dtype=torch.bool, device=sampled.device)
    signs = torch.cat([sampled, full_row]).to(torch.float64) * 2 - 1  # (P + 1, d)
    linear = kernel_shapley(
        torch.cat([sampled, ~sampled]),
        torch.cat([inside, outside], 1),
        empty,
        full,
        torch.cat([weights, weights]),
    ).to(torch.float64)
    if predict is None and d <= 62 and pairs == 2 ** (d - 1) - 1:
        # every pair observed: the kernel-weighted linear fit is exact Shapley (the
        # process would only add the jitter's error)
        exact = linear.to(values.dtype)
        return WalshGPPosterior(exact, torch.zeros_like(exact) if variance else None, pairs + 1 - d)
    scale, interactions = _relevance_scale(sampled, weights, linear, inside, outside)
    rows = pairs + 1
    triples = None if interactions is None else triple_weights(interactions, pairs)
    # examples per chunk: the covariances take (priors + powers x orders) x rows^2 floats
    # each, and the reweighted triples powers x (2 x their table, or rows x triples) more
    priors = len(RELEVANCE_POWERS) * len(ORDER_DECAYS) * (1 if triples is None else 2)
    per_example = (priors + len(RELEVANCE_POWERS) * (MAX_ORDER + 1)) * rows * rows
    if triples is not None:
        size = 2 * 2**d if 2**d <= rows * rows else rows * triples.shape[1]
        per_example += len(RELEVANCE_POWERS) * size
    given = line_windows(d) if windows is None else windows
    local = given if local_enabled(given) else None
    if local is not None:  # the local shapes' covariances and their parities' products
        local_priors = len(RELEVANCE_POWERS) * len(LOCAL_DECAYS) * len(LOCAL_WEIGHTS)
        per_example += local_priors * rows * (rows + len(local_sets(local, signs.device)[0]))
    predict_signs = None
    if predict is not None:
        predict_signs = predict.to(torch.float64) * 2 - 1
        per_example += (MAX_ORDER + 1) * len(predict) * rows
    chunk = max(1, work_floats(values.device, CHUNK_FLOATS) // per_example)
    parts = [
        posterior_parts(
            signs,
            odd[start : start + chunk],
            scale[start : start + chunk],
            variance,
            triples=None if triples is None else triples[start : start + chunk],
            predict=predict_signs,
            windows=local,
        )
        for start in range(0, len(values), chunk)
    ]
    phi = torch.cat([mean for mean, _, _ in parts])
    # the jitter leaves efficiency off by ~1e-10 relative: close the gap evenly
    phi = phi + ((full - empty) - phi.sum(dim=1))[:, None] / d
    spread = torch.cat([part for _, part, _ in parts]).to(values.dtype) if variance else None  # type: ignore[misc]
    predicted = None if predict is None else torch.cat([part for _, _, part in parts])  # type: ignore[misc]
    return WalshGPPosterior(phi.to(values.dtype), spread, rows - d, predicted)


def adjusted_posterior(
    sampled: Tensor,
    weights: Tensor,
    values: Tensor,
    fitted: Tensor,
    *,
    variance: bool = False,
    windows: Windows | None = None,
) -> WalshGPPosterior:
    """The process fitted on the pairs ``fitted``, its posterior mean the surrogate of
    a regression adjustment over all of them.

    The process is fitted on the pairs ``fitted`` (a smaller budget's design,
    :func:`extended_design`) and the full coalition; its posterior mean ``g``
    is a game whose Shapley value is the process's estimate. The residual
    game ``v - g`` (zero on the fitted pairs, up to the jitter) is estimated
    by the cubic fit
    (:func:`~captum_graphshap.plans.regression_adjusted.cubic_shapley`) over
    every pair, and added: ``phi(g) + phi_hat(v - g)``. One factorisation of
    ``len(fitted) + 1`` rows per prior, whatever the budget, and with few
    pairs besides the fitted ones it is the process itself, so more pairs
    refine it instead of handing over to another estimator
    (``benchmarks/README.md``, "Regression-adjusted process"). Once the other
    pairs are at least :data:`HELD_OUT_SHARE` times the fitted ones, an example
    whose other pairs a cubic surrogate on the fitted pairs predicts better
    than the process (held out: neither saw them) takes the plain cubic fit
    over every pair instead. Efficient: ``g``'s odd part at the full
    coalition is the observed one. ``variance``: the fitted process's
    posterior variances, an upper bound for an estimate that saw more pairs.
    """
    pairs, d = sampled.shape
    others = torch.ones(pairs, dtype=torch.bool, device=sampled.device)
    others[fitted] = False
    values = values.to(torch.float64)
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    subset = torch.cat([values[:, :2], inside[:, fitted], outside[:, fitted]], dim=1)
    posterior = walsh_gp_posterior(
        sampled[fitted],
        weights[fitted],
        subset,
        variance=variance,
        predict=sampled[others],
        windows=windows,
    )
    assert posterior.predicted is not None  # asked for
    surrogate = values.new_zeros(values.shape[0], pairs)  # g's odd part at every pair
    surrogate[:, others] = posterior.predicted
    surrogate[:, fitted] = ((inside - outside) / 2)[:, fitted]  # interpolated there
    # v - g: g's odd part leaves each pair, its value at the endpoints (+-u(D)) the
    # endpoints; the even part is v's
    half_total = (values[:, 1] - values[:, 0]) / 2
    residual = torch.cat(
        [
            (values[:, 0] + half_total)[:, None],
            (values[:, 1] - half_total)[:, None],
            inside - surrogate,
            outside + surrogate,
        ],
        dim=1,
    )
    count = triple_count(d, pairs)
    mean = posterior.mean + cubic_shapley(sampled, weights, residual, count).to(torch.float64)
    if len(fitted) * HELD_OUT_SHARE <= pairs - len(fitted):
        # enough unseen pairs to tell: where the cubic surrogate predicts them better
        # than the process, the plain cubic fit over every pair is the estimate
        cubic_wins = cubic_predicts_better(sampled, weights, values, fitted, posterior.predicted)
        if bool(cubic_wins.any()):
            cubic = cubic_shapley(sampled, weights, values, count).to(torch.float64)
            mean = torch.where(cubic_wins[:, None], cubic, mean)
    return WalshGPPosterior(mean.to(posterior.mean.dtype), posterior.variance, posterior.dof)


def _relevance_scale(
    sampled: Tensor, weights: Tensor, linear: Tensor, inside: Tensor, outside: Tensor
) -> tuple[Tensor, Tensor | None]:
    """``(N, d)`` each feature's relevance before its power, mean one per example, and
    the even part's absolute pairwise coefficients ``(N, d, d)`` where they were fitted.

    ``|phi_j|`` of the paired ``linear`` fit; from
    :data:`INTERACTION_PAIRS_PER_FEATURE` pairs per feature blended with the
    even part's pairwise interaction strength.
    """
    pairs, d = sampled.shape
    scale = unit_mean(linear.abs())
    if pairs < INTERACTION_PAIRS_PER_FEATURE * d or d > MAX_PAIRWISE_FIT_FEATURES:
        return scale, None
    # a feature that interacts strongly carries the odd parities of order three up
    # even where its own Shapley value is small: blend in the even part's pairwise fit
    interactions = even_pairwise(sampled, weights, (inside + outside) / 2).abs()
    strength = unit_mean(interactions.sum(2))
    return unit_mean((scale * strength).sqrt()), interactions


def posterior_parts(
    signs: Tensor,
    odd: Tensor,
    scale: Tensor,
    variance: bool = False,
    *,
    triples: Tensor | None = None,
    predict: Tensor | None = None,
    windows: Windows | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Posterior means of ``phi`` ``(E, d)``, (``variance``) their variances, and predictions.

    ``signs`` ``(rows, d)`` the observed coalitions in +-1, ``odd`` ``(E, rows)``
    their odd parts, ``scale`` ``(E, d)`` the relevance before its power,
    ``triples`` ``(E, T)`` the weights of the parities of order three
    (:func:`triple_weights`; each prior is then tried with and without). The
    linear parities get a flat prior (universal kriging: their coefficients
    are the generalised least-squares fit), so games whose odd part is linear
    (order two) are reproduced exactly; the parities of order three and up
    form the Gaussian process, whose scale is profiled out and whose shape
    (relevance power x decay) is chosen per example by the restricted
    likelihood. With ``predict`` ``(rows', d)`` (+-1) the third result is the
    posterior means of the odd part at those coalitions ``(E, rows')``
    (:func:`adjusted_posterior`), else None. ``windows``: the local parities'
    (``plans/walsh_local.py``); None: no local shapes.
    """
    d = signs.shape[1]
    top = min(MAX_ORDER, d)
    priors = _candidate_priors(scale, triples, windows is not None)
    best = _best_prior(signs, odd, priors, top, windows)
    if not bool(torch.isfinite(best.likelihood).all()):
        raise torch.linalg.LinAlgError("no prior of the grid gave a positive-definite covariance")
    predicted = None if predict is None else _odd_mean(predict, signs, best, top, windows)
    covariance = _shapley_covariance(signs, best, top, windows)
    mean = 2 * best.linear[..., 0] + torch.einsum("epi,ep->ei", covariance, best.inverse_residual)
    if not variance:
        return mean, None, predicted
    shapley_weights = best.variances[:, 1:] * shapley_order_weights(top, signs)[1:]
    order_weights = shapley_weights * shapley_order_weights(top, signs)[1:]  # sigma_k (2 / k)^2
    prior = prior_shapley_variances(best.relevance, order_weights)
    extra = _triple_excess(signs, best)
    if extra is not None:
        prior = prior + (4 / 9) * extra[0] @ extra[1]
    local = _local_excess(signs, best, windows)
    if local is not None:
        mass, members, order = local
        prior = prior + (mass * (2 / order) ** 2) @ members
    projection = linear_projection(signs)
    spread = posterior_variances(projection, prior, covariance, best.factor, best.cross)
    # the scale: the restricted likelihood's, or the leave-one-out residuals' where
    # the prior understates the game's higher orders (ReLU kinks, say)
    restricted = best.quadratic / max(1, signs.shape[0] - d)
    scale_estimate = torch.maximum(
        restricted,
        leave_one_out_scale(projection, best.factor, best.inverse_residual),
    )
    return mean, scale_estimate[:, None] * spread, predicted


def _odd_mean(
    predict: Tensor, signs: Tensor, best: _Prior, top: int, windows: Windows | None
) -> Tensor:
    """``(E, rows')`` the posterior means of the odd part at the coalitions ``predict``
    (+-1): ``x' beta + k(x, observed)' K^-1 (u - X beta)``."""
    cross = cross_covariances(predict, signs, best.relevance, best.variances, top)
    extra = _triple_excess(signs, best)
    if extra is not None:
        new, seen = triple_products(predict), triple_products(signs)
        cross = cross + (new * extra[0][:, None, :]) @ seen.T
    local = _local_excess(signs, best, windows)
    if local is not None:
        mass, members, _ = local
        new, seen = local_parities(predict, members), local_parities(signs, members)
        cross = cross + (new * mass[:, None, :]) @ seen.T
    linear = (predict @ best.linear)[..., 0]  # (E, rows')
    return linear + torch.einsum("eab,eb->ea", cross, best.inverse_residual)


def _shapley_covariance(signs: Tensor, best: _Prior, top: int, windows: Windows | None) -> Tensor:
    """``Cov(phi_i, u(S)) / s^2`` ``(E, rows, d)`` of the parities of order three and up."""
    # Cov(phi_i, u(S)) / s^2 = sum_k sigma_k (2 / k) r_i x_i e_(k-1)(r_j x_j, j != i)
    signed = best.relevance[:, None, :] * signs  # (E, rows, d): r_j x_j
    sums = signed_elementary_symmetric(signs, best.relevance, top - 1)  # (E, rows, top)
    cross = signed[..., None] * leave_one_out_symmetric(signed, sums)
    shapley_weights = best.variances[:, 1:] * shapley_order_weights(top, signs)[1:]  # (E, top)
    covariance = torch.einsum("epik,ek->epi", cross, shapley_weights)  # (E, rows, d)
    extra = _triple_excess(signs, best)  # the reweighted triples' part, if any
    if extra is not None:
        mass, members = extra
        parities = triple_products(signs)
        # 2 / 3 of each triple's parity to each of its members
        covariance = covariance + (2 / 3) * (parities * mass[:, None, :]) @ members
    local = _local_excess(signs, best, windows)
    if local is not None:  # 2 / |T| of each local parity to each of its members
        mass, members, order = local
        covariance += (local_parities(signs, members) * (mass * 2 / order)[:, None, :]) @ members
    return covariance


class _Priors(NamedTuple):
    """The candidate priors of each example: ``W`` relevances x ``G`` shapes."""

    relevance: Tensor  # (E, W, d)
    grid: Tensor  # (E, G, top + 1) variance per order
    excess: Tensor  # (E, T) extra weight on each triple beyond r_i r_j r_k (T = 0: none)
    reweighted: Tensor  # (E, G) bool: the shapes whose triples take the excess
    local: Tensor  # (E, G) the local parities' weight lambda (0: none; walsh_local.py)


def _candidate_priors(scale: Tensor, triples: Tensor | None, local_shapes: bool) -> _Priors:
    """The grid: :data:`RELEVANCE_POWERS` x :data:`ORDER_DECAYS`, with ``triples`` each
    shape once more with the triples reweighted, and from
    :data:`~captum_graphshap.plans.walsh_local.LOCAL_MIN_FEATURES` features each plain
    shape of a decay in :data:`~captum_graphshap.plans.walsh_local.LOCAL_DECAYS` once
    more per weight of the local parities
    (:data:`~captum_graphshap.plans.walsh_local.LOCAL_WEIGHTS`) with ``local_shapes``."""
    d = scale.shape[1]
    powers = torch.tensor(RELEVANCE_POWERS, dtype=torch.float64, device=scale.device)
    relevance = (scale[:, None, :] + RELEVANCE_FLOOR) ** powers[None, :, None]  # (E, W, d)
    relevance = relevance / relevance.mean(dim=-1, keepdim=True)
    grid = torch.stack([order_variances(d, decay) for decay in ORDER_DECAYS]).to(scale.device)
    grid = grid.expand(len(scale), -1, -1)  # (E, G, top + 1)
    excess = scale.new_zeros(len(scale), 0)  # (E, T): none
    reweighted = torch.zeros(grid.shape[:2], dtype=torch.bool, device=scale.device)
    plain = grid
    if triples is not None:
        grid, excess = torch.cat([grid, grid], dim=1), triples - 1
        reweighted = torch.cat([reweighted, ~reweighted], dim=1)
    local = torch.zeros(grid.shape[:2], dtype=torch.float64, device=scale.device)
    if local_shapes:
        plain = plain[:, [ORDER_DECAYS.index(decay) for decay in LOCAL_DECAYS]]
        shapes = plain.shape[1]
        grid = torch.cat([grid] + [plain] * len(LOCAL_WEIGHTS), dim=1)
        extra = torch.zeros(len(scale), shapes * len(LOCAL_WEIGHTS), dtype=torch.bool)
        reweighted = torch.cat([reweighted, extra.to(scale.device)], dim=1)
        weights = torch.tensor(LOCAL_WEIGHTS, dtype=torch.float64, device=scale.device)
        local = torch.cat([local, weights.repeat_interleave(shapes).expand(len(scale), -1)], 1)
    return _Priors(relevance, grid, excess, reweighted, local)


class _Prior(NamedTuple):
    """Each example's chosen prior ``(E, ...)`` and universal kriging under it."""

    relevance: Tensor  # (E, d)
    variances: Tensor  # (E, top + 1) per order
    excess: Tensor  # (E, T) the triples' excess weight, zero where not reweighted
    local: Tensor  # (E,) the local parities' weight, zero where none
    likelihood: Tensor  # (E,) restricted; -inf where it failed
    linear: Tensor  # (E, d, 1)
    inverse_residual: Tensor  # (E, rows)
    quadratic: Tensor  # (E,)
    factor: Tensor  # (E, rows, rows) of the projected covariance (walsh_kriging.py)
    cross: Tensor  # (E, rows, r) K Q1


def _best_prior(
    signs: Tensor, odd: Tensor, priors: _Priors, top: int, windows: Windows | None
) -> _Prior:
    """The prior of ``priors`` of highest restricted likelihood, per example, and the
    kriging under it on every row.

    Above :data:`SELECTION_ROWS` rows the choice is made on that many of them.
    """
    rows = signs.shape[0]
    if rows <= SELECTION_ROWS or priors.relevance.shape[1] * priors.grid.shape[1] == 1:
        return _best_of_grid(signs, odd, priors, top, windows)
    # evenly spaced over the pairs (drawn size by size, so every size keeps its share)
    # and the full coalition, the last row
    spaced = torch.linspace(0, rows - 2, SELECTION_ROWS - 1, device=signs.device).round().long()
    subset = torch.cat([spaced, spaced.new_full((1,), rows - 1)])
    pre = _best_of_grid(signs[subset], odd[:, subset], priors, top, windows)
    reweighted = (pre.excess != 0).any(dim=1, keepdim=True)
    chosen = _Priors(
        pre.relevance[:, None], pre.variances[:, None], pre.excess, reweighted, pre.local[:, None]
    )
    best = _best_of_grid(signs, odd, chosen, top, windows)
    failed = ~torch.isfinite(best.likelihood)
    if bool(failed.any()):  # not positive definite on every row: the whole grid there
        retry = _Priors(*(p[failed] for p in priors))
        again = _best_of_grid(signs, odd[failed], retry, top, windows)
        best = _Prior(*(field.clone() for field in best))
        for field, retried in zip(best, again):
            field[failed] = retried
    return best


def _best_of_grid(
    signs: Tensor, odd: Tensor, priors: _Priors, top: int, windows: Windows | None
) -> _Prior:
    """:func:`_best_prior` with the choice made on every row: every prior factorised."""
    factored = _factored_covariances(signs, priors, top, windows)
    fit = kriging(odd, factored)
    examples = torch.arange(odd.shape[0], device=signs.device)
    if factored.factor.shape[1] * factored.factor.shape[2] == 1:  # one prior: views
        power_pick = shape_pick = torch.zeros_like(examples)
        chosen: tuple[Tensor | slice | int, ...] = (slice(None), 0, 0)
    else:
        flat = fit.likelihood.flatten(1)  # (E, W x G)
        # ties within LIKELIHOOD_TIE go to the grid's first prior, not to rounding: at the
        # fewest pairs one residual direction leaves every prior the same likelihood
        pick = (flat >= flat.max(dim=1, keepdim=True).values - LIKELIHOOD_TIE).byte().argmax(1)
        power_pick, shape_pick = pick // priors.grid.shape[1], pick % priors.grid.shape[1]
        chosen = (examples, power_pick, shape_pick)
    taken = priors.reweighted[examples, shape_pick, None]
    return _Prior(
        priors.relevance[examples, power_pick],
        priors.grid[examples, shape_pick],
        torch.where(taken, priors.excess, 0.0),
        priors.local[examples, shape_pick],
        fit.likelihood[chosen],
        fit.linear[chosen],
        fit.inverse_residual[chosen],
        fit.quadratic[chosen],
        factored.factor[chosen],
        factored.cross[chosen],
    )


def _triple_excess(signs: Tensor, best: _Prior) -> tuple[Tensor, Tensor] | None:
    """The chosen priors' extra triple weights: ``(E, T)`` their variances and ``(T, d)``
    the triples' members; None where no triple was reweighted."""
    if best.excess.shape[-1] == 0 or not bool(best.excess.any()):
        return None
    mass = best.variances[:, 3, None] * triple_mass(best.relevance, best.excess)
    return mass, triple_members(signs.shape[1], signs.device)


def _local_excess(
    signs: Tensor, best: _Prior, windows: Windows | None
) -> tuple[Tensor, Tensor, Tensor] | None:
    """The chosen priors' local parities: ``(E, P)`` their extra variances, ``(P, d)``
    their members and ``(P,)`` their orders; None where no example took them."""
    if windows is None or not bool((best.local > 0).any()):
        return None
    members, _, order = local_sets(windows, signs.device)
    return local_mass(best.relevance, best.variances, best.local, windows), members, order


def _factored_covariances(
    signs: Tensor, priors: _Priors, top: int, windows: Windows | None
) -> Factored:
    """Every prior's covariance ``(E, W, G, rows, rows)``, projected and factorised
    (:func:`~captum_graphshap.plans.walsh_kriging.factor_projected`).

    A factorisation that failed (``info != 0``) is replaced by the identity.
    """
    rows, d = signs.shape
    relevance, grid, excess, reweighted, local = priors
    # the reweighted shapes add sigma_3 times the triples' covariance, one per relevance
    order_three = torch.where(reweighted, grid[..., 3], 0.0)[:, None, :, None]  # (E, 1, G, 1)
    mass = triple_mass(relevance, excess[:, None]) if bool(reweighted.any()) else None
    if 2**d <= rows * rows:  # the table of patterns is no larger than a covariance
        triples_added = None if mass is None else (order_three, triple_table(mass, d)[:, :, None])
        covariances = pattern_covariances(signs, relevance, grid, top, triples_added)
    else:
        covariances = built_covariances(signs, relevance, grid, top)
        if mass is not None:
            parities = triple_products(signs)  # (rows, T)
            triples = (parities * mass[..., None, :]) @ parities.T  # (E, W, rows, rows)
            covariances.addcmul_(order_three[..., None], triples[:, :, None])
    if windows is not None and bool((local > 0).any()):  # the local parities' covariance
        add_local_covariances(covariances, signs, relevance, grid, local, windows)
    return factor_projected(covariances, linear_projection(signs))
