"""Sampled coalition plans and their estimators.

Three Monte Carlo estimators of the Shapley value, each a plan (which
coalitions to evaluate, drawn with a ``torch.Generator``) and an estimator
(a fixed map from the coalition values to attributions):

* permutation sampling: marginal contributions along random orderings,
  optionally antithetic (each ordering with its reverse);
* paired KernelSHAP: coalitions drawn from the Shapley kernel with their
  complements, and the efficiency-constrained least-squares fit; or drawn
  size-stratified, enumerating the sizes with few coalitions
  (:func:`stratified_paired_coalitions`, used by the regression-adjusted
  estimator of ``plans/regression_adjusted.py``);
* SHEAR's Eq. (14): an exact Shapley sum over a feature's cooperators with
  the other features present at random, antithetically paired.

The functions are pure tensor maths; ``attr/sampling.py`` and
``attr/shear.py`` adapt them to Captum.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan, PrefixCoalitions

#: Bootstrap resamples of ``interval="bootstrap"``.
BOOTSTRAP_RESAMPLES = 1000


def uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform [0, 1) draws on ``device`` from ``generator`` (drawn on its own device)."""
    source = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=source).to(device)


def random_indices(
    high: int, shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform integers in ``[0, high)`` on ``device`` from ``generator``."""
    source = generator.device if generator is not None else device
    return torch.randint(high, shape, generator=generator, device=source).to(device)


# ---------------------------------------------------------------- permutations


def permutation_ranks(
    batch: int,
    num_features: int,
    num_permutations: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
) -> Tensor:
    """``(N, M, d)`` long: ``ranks[n, m, i]`` is the position of feature ``i`` in ordering ``m``.

    The orderings are drawn once and shared by the batch, as Captum's
    ``ShapleyValueSampling`` does: an example's explanation does not depend
    on the other examples or their order (the same seed gives it alone the
    row it gets in any batch), and each example's interval still holds, its
    samples being independent orderings. With ``antithetic`` the first
    ``M // 2`` orderings are followed by their reverses, so each feature's
    early and late positions pair up; an odd ``M`` adds one independent
    ordering last (the mean over all ``M`` stays unbiased).
    """
    pairs = num_permutations // 2 if antithetic else 0
    drawn = num_permutations - pairs
    scores = uniform((1, drawn, num_features), generator, device).expand(batch, -1, -1)
    ranks = scores.argsort(dim=2).argsort(dim=2)
    if antithetic:
        ranks = torch.cat(
            [ranks[:, :pairs], num_features - 1 - ranks[:, :pairs], ranks[:, pairs:]], 1
        )
    return ranks


def permutation_plan(ranks: Tensor, antithetic: bool) -> Plan:
    """The plan of permutation sampling: every prefix of every example's orderings.

    ``ranks`` is ``(N, M, d)`` (:func:`permutation_ranks`); rows are
    per example, stored as the ranks (:class:`PrefixCoalitions`), and the
    estimator is the mean marginal contribution, ``(M,)`` values of rows
    ``(n, m, size)`` in that order to ``(N, d)``.
    """
    batch, orderings, d = ranks.shape
    example_index = torch.arange(batch, device=ranks.device).repeat_interleave(orderings * (d + 1))

    def estimate(values: Tensor) -> Tensor:
        if antithetic and orderings % 2 == 0:
            return permutation_samples(values, ranks, antithetic).mean(dim=1)
        return permutation_samples(values, ranks, False).mean(dim=1)

    return Plan(PrefixCoalitions(ranks), estimate, example_index)


def shared_permutation_plan(ranks: Tensor, antithetic: bool) -> Plan:
    """Permutation sampling as a plan shared by the batch: orderings ``ranks`` ``(M, d)``.

    The same estimator as :func:`permutation_plan` for orderings shared by
    every example; the rows are one set for the batch, so the engine's shared
    path evaluates each distinct prefix once for all examples.
    """
    orderings, d = ranks.shape

    def estimate(values: Tensor) -> Tensor:
        batch = values.shape[0]
        expanded = ranks.to(values.device).expand(batch, orderings, d)
        paired = antithetic and orderings % 2 == 0
        return permutation_samples(values.reshape(-1), expanded, paired).mean(dim=1)

    return Plan(PrefixCoalitions(ranks), estimate)


def permutation_samples(values: Tensor, ranks: Tensor, antithetic: bool) -> Tensor:
    """The independent samples ``(N, K, d)`` of a permutation plan's ``(R,)`` values.

    ``K`` is the number of orderings, or of antithetic pairs (``M`` even).
    """
    contributions = permutation_contributions(values.view(*ranks.shape[:2], -1), ranks)
    return pair_antithetic(contributions) if antithetic else contributions


def prefix_coalitions(ranks: Tensor) -> Tensor:
    """``(..., d + 1, d)`` bool coalitions of every ordering's prefixes.

    Entry ``[..., k, :]`` holds the first ``k`` features of the ordering
    ``ranks[...]``.
    """
    d = ranks.shape[-1]
    sizes = torch.arange(d + 1, device=ranks.device)
    return ranks.unsqueeze(-2) < sizes[:, None]


def permutation_contributions(values: Tensor, ranks: Tensor) -> Tensor:
    """Marginal contributions ``(N, M, d)`` from prefix values ``(N, M, d + 1)``.

    Feature ``i`` at position ``r`` of ordering ``m`` contributes
    ``v(first r + 1) - v(first r)``.
    """
    return values.gather(2, ranks + 1) - values.gather(2, ranks)


def pair_antithetic(contributions: Tensor) -> Tensor:
    """Average each ordering's contributions with its reverse's: ``(N, M/2, d)``.

    The pairs, not the orderings, are the independent samples an interval
    is computed from.
    """
    half = contributions.shape[1] // 2
    return (contributions[:, :half] + contributions[:, half:]) / 2


def mean_and_half_width(
    samples: Tensor,
    confidence: float,
    interval: str,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """Mean over i.i.d. samples ``(N, K, d)`` and the half-width of its interval.

    ``"t"``: ``t_{K-1} * SSD / sqrt(K)``, SSD the sample standard deviation
    and ``t_{K-1}`` Student's quantile with ``K - 1`` degrees of freedom
    (exact for normal samples; Merrick & Taly's normal ``z`` under-covers at
    few samples). ``"normal"``: the same with the normal ``z``.
    ``"bootstrap"``: half the distance between the percentile bounds of 1000
    resampled means, which needs no normality.
    """
    from ..uncertainty.intervals import normal_quantile, student_t_quantile

    mean = samples.mean(dim=1)
    count = samples.shape[1]
    if interval in ("t", "normal"):
        spread = samples.std(dim=1, unbiased=True)
        quantile = (
            student_t_quantile(confidence, count - 1)
            if interval == "t"
            else normal_quantile(confidence)
        )
        return mean, quantile * spread / math.sqrt(count)
    picks = random_indices(count, (BOOTSTRAP_RESAMPLES, count), generator, samples.device)
    weights = torch.zeros(BOOTSTRAP_RESAMPLES, count, dtype=samples.dtype, device=samples.device)
    weights.scatter_add_(1, picks, torch.ones_like(picks, dtype=samples.dtype))
    resampled = torch.einsum("bk,nkd->nbd", weights / count, samples)
    tail = (1.0 - confidence) / 2
    bounds = torch.quantile(
        resampled,
        torch.tensor([tail, 1.0 - tail], dtype=samples.dtype, device=samples.device),
        dim=1,
    )
    return mean, (bounds[1] - bounds[0]) / 2


# ---------------------------------------------------------------- KernelSHAP


def kernel_size_probabilities(d: int) -> Tensor:
    """``P(|z| = s)`` for ``s = 1 .. d - 1`` under the KernelSHAP distribution."""
    sizes = torch.arange(1, d, dtype=torch.float64)
    mass = 1.0 / (sizes * (d - sizes))
    return mass / mass.sum()


def sample_kernel_coalitions(
    shape: tuple[int, ...], d: int, generator: torch.Generator | None
) -> Tensor:
    """Coalitions ``(*shape, d)`` from the KernelSHAP distribution: the one sampler.

    A size ``s`` in ``1..d-1`` with probability proportional to
    ``1 / (s (d - s))``, then a uniform subset of that size. Sampled on the
    generator's device (CPU without one); the caller moves them. Needs
    ``d >= 2`` (there is no coalition besides the endpoints otherwise).
    """
    device = generator.device if generator is not None else torch.device("cpu")
    rows = math.prod(shape)
    probabilities = kernel_size_probabilities(d).to(device)
    sizes = torch.multinomial(probabilities, rows, replacement=True, generator=generator) + 1
    return uniform_subsets(sizes, d, generator).view(*shape, d)


def uniform_subsets(sizes: Tensor, d: int, generator: torch.Generator | None) -> Tensor:
    """``(len(sizes), d)`` bool: row ``r`` a uniform subset of ``sizes[r]`` members.

    Drawn on the generator's device (CPU without one): the members are the
    ``sizes[r]`` smallest of ``d`` uniform keys.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    keys = torch.rand(sizes.shape[0], d, generator=generator, device=device)
    return keys.argsort(dim=1).argsort(dim=1) < sizes.to(device)[:, None]


def pair_capacity(d: int, size: int) -> int:
    """Complementary pairs of the size pair ``(size, d - size)``."""
    return math.comb(d, size) // (2 if 2 * size == d else 1)


def kernel_coalitions(
    num_features: int,
    num_samples: int,
    generator: torch.Generator | None,
    device: torch.device,
) -> Tensor:
    """``(P, d)`` bool coalitions from the Shapley kernel, in complementary pairs.

    Each draw of :func:`sample_kernel_coalitions` is followed by its
    complement (paired sampling, Covert & Lee 2021). ``P`` is
    ``num_samples`` rounded up to even. The endpoints are not sampled: the
    fit enforces them.
    """
    pairs = (num_samples + 1) // 2
    drawn = sample_kernel_coalitions((pairs,), num_features, generator).to(device)
    return torch.stack([drawn, ~drawn], dim=1).reshape(2 * pairs, num_features)


def size_allocation(d: int, pairs: int) -> list[tuple[int, int, float]]:
    """How many complementary pairs of each size pair ``(s, d - s)`` to draw.

    Pairs are spread evenly over the size pairs ``s = 1 .. d // 2`` (the
    leverage-score distribution of Musco & Witter, which measured a little
    better than the kernel's own here); a size pair with fewer coalitions
    than its share is enumerated whole and its surplus goes to the others.
    Returns ``(s, count, kernel_mass)`` for each size pair with
    ``kernel_mass`` the Shapley kernel's total weight on it.
    """
    sizes = list(range(1, d // 2 + 1))
    capacity = {s: pair_capacity(d, s) for s in sizes}
    kernel = {s: (1.0 if 2 * s == d else 2.0) / (s * (d - s)) for s in sizes}
    share = {s: (1.0 if 2 * s == d else 2.0) for s in sizes}
    counts: dict[int, int] = {}
    left, open_sizes = pairs, list(sizes)
    while open_sizes:
        total = sum(share[s] for s in open_sizes)
        full = [s for s in open_sizes if left * share[s] / total >= capacity[s]]
        if not full:
            break
        for s in full:
            counts[s] = capacity[s]
            left -= capacity[s]
            open_sizes.remove(s)
    if open_sizes:
        total = sum(share[s] for s in open_sizes)
        raw = {s: left * share[s] / total for s in open_sizes}
        for s in open_sizes:
            counts[s] = int(raw[s])
        rest = left - sum(counts[s] for s in open_sizes)
        by_remainder = sorted(open_sizes, key=lambda s: (int(raw[s]) - raw[s], s))
        for s in by_remainder[:rest]:
            counts[s] += 1
    return [(s, counts.get(s, 0), kernel[s]) for s in sizes]


#: a size with at most this many coalitions is enumerated, then subsampled
ENUMERATE_UP_TO = 50_000


def distinct_subsets(
    d: int, size: int, count: int, generator: torch.Generator | None, half: bool = False
) -> Tensor:
    """``(count, d)`` distinct uniform coalitions of ``size`` members (on the generator's device).

    With ``half`` (``2 size == d``) one coalition of each complementary pair:
    those holding feature 0.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    available = math.comb(d, size) // (2 if half else 1)
    if available <= ENUMERATE_UP_TO:
        members = torch.tensor(
            list(itertools.combinations(range(d), size)), dtype=torch.long, device=device
        ).view(-1, size)
        if half:
            members = members[members[:, 0] == 0]
        pick = torch.randperm(members.shape[0], generator=generator, device=device)[:count]
        rows = torch.zeros(count, d, dtype=torch.bool, device=device)
        return rows.scatter_(1, members[pick], True)
    rows = torch.zeros(0, d, dtype=torch.bool, device=device)
    while rows.shape[0] < count:
        drawn = uniform_subsets(torch.full((2 * count,), size, device=device), d, generator)
        if half:
            drawn = torch.where(drawn[:, :1], drawn, ~drawn)
        merged = torch.cat([rows, drawn])
        _, inverse = torch.unique(merged, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), merged.shape[0], device=device)
        first = first.scatter_reduce(
            0, inverse, torch.arange(merged.shape[0], device=device), "amin"
        )
        rows = merged[first.sort().values]
    return rows[:count]


def stratified_paired_coalitions(
    num_features: int, pairs: int, generator: torch.Generator | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``pairs`` distinct coalitions ``(P, d)``, one of each complementary pair, and weights.

    Sizes are allocated by :func:`size_allocation`: small sizes (and their
    complements) are enumerated, the others drawn uniformly without
    replacement, so every evaluation is of a new coalition. ``weights``
    ``(P,)`` float64 give each pair its size pair's Shapley-kernel mass over
    the number drawn of it, so a kernel-weighted fit stays consistent. ``P``
    is ``pairs`` or, when that exceeds them, every pair there is.
    """
    d = num_features
    rows, weights = [], []
    for size, count, mass in size_allocation(d, pairs):
        if count == 0:
            continue
        rows.append(distinct_subsets(d, size, count, generator, half=2 * size == d))
        weights.append(torch.full((count,), mass / count, dtype=torch.float64))
    if not rows:
        return torch.zeros(0, d, dtype=torch.bool, device=device), torch.zeros(
            0, dtype=torch.float64, device=device
        )
    return torch.cat(rows).to(device), torch.cat(weights).to(device)


def paired_kernel_plan(
    num_features: int,
    num_samples: int,
    generator: torch.Generator | None,
    device: torch.device,
) -> Plan:
    """Paired KernelSHAP's plan, shared by the batch: the endpoints, then the draws."""
    d = num_features
    sampled = kernel_coalitions(d, num_samples, generator, device)
    endpoints = torch.zeros(2, d, dtype=torch.bool, device=device)
    endpoints[1] = True

    def estimate(values: Tensor) -> Tensor:
        return kernel_shapley(sampled, values[:, 2:], values[:, 0], values[:, 1])

    return Plan(DenseCoalitions(torch.cat([endpoints, sampled])), estimate)


def kernel_shapley(
    coalitions: Tensor, values: Tensor, empty_value: Tensor, full_value: Tensor
) -> Tensor:
    """KernelSHAP with the endpoints enforced: ``(N, d)`` from ``(N, P)`` values.

    Coalitions drawn from the Shapley kernel need no weights, so the fit is
    the constrained least squares
    ``min_phi mean_p (v(z_p) - v(0) - z_p . phi)^2`` s.t. ``sum phi = v(1) - v(0)``,
    solved in closed form with ``A = mean z z^T`` and ``b = mean z (v - v(0))``::

        phi = A^-1 (b - 1 (1^T A^-1 b - (v(1) - v(0))) / (1^T A^-1 1))

    ``A`` is shared by the batch (one ``d x d`` pseudo-inverse).
    """
    z = coalitions.to(values.dtype)
    count = z.shape[0]
    a_inverse = torch.linalg.pinv(z.T @ z / count, hermitian=True)
    b = (values - empty_value[:, None]) @ z / count  # (N, d)
    a_inverse_b = b @ a_inverse
    a_inverse_ones = a_inverse.sum(dim=1)  # A^-1 1 (A symmetric)
    gap = (a_inverse_b.sum(dim=1) - (full_value - empty_value)) / a_inverse_ones.sum()
    return a_inverse_b - gap[:, None] * a_inverse_ones[None, :]


# ---------------------------------------------------------------- SHEAR


def subset_bits(count: int, device: torch.device) -> Tensor:
    """``(2^count, count)`` bool: row ``s`` is the bit pattern of ``s``."""
    codes = torch.arange(2**count, device=device)
    return (codes[:, None] >> torch.arange(count, device=device)) & 1 == 1


def shear_coalitions(
    cooperators: Tensor,
    antithetic: bool,
    generator: torch.Generator | None,
) -> Tensor:
    """SHEAR's plan: ``(N, d, 2^m, 2, d)`` bool, coalitions without and with each feature.

    For example ``n``, feature ``i`` with cooperators ``S_i`` (``m`` of them,
    ``cooperators[n, i]``) and every subset ``S`` of ``S_i``: the coalition
    ``S | V_S`` and ``S | V_S | {i}``, where ``V_S`` holds each other feature
    with probability 1/2. With ``antithetic`` the complementary subset
    ``S_i - S`` gets the complementary set of the other features.
    """
    _, d, m = cooperators.shape
    device = cooperators.device
    bits = subset_bits(m, device).to(torch.float64)  # (2^m, m)
    chosen = torch.nn.functional.one_hot(cooperators, d).to(torch.float64)  # (N, d, m, d)
    subsets = torch.einsum("sb,nibk->nisk", bits, chosen) > 0  # (N, d, 2^m, d)
    identity = torch.eye(d, dtype=torch.bool, device=device)
    others = ~(chosen.sum(dim=2) > 0) & ~identity  # (N, d, d): neither i nor a cooperator
    count = 2**m
    # one draw shared by the batch (each example's cooperators differ), so an
    # example's explanation does not depend on the others in its batch
    if antithetic and m > 0:
        # subset s and its complement 2^m - 1 - s share one draw, complemented
        half = uniform((1, d, count // 2, d), generator, device) < 0.5
        present = torch.cat([half, (~half).flip(2)], dim=2)
    else:
        present = uniform((1, d, count, d), generator, device) < 0.5
    without = subsets | (present & others[:, :, None, :])
    with_feature = without | identity[None, :, None, :]
    return torch.stack([without, with_feature], dim=3)


def shear_plan(cooperators: Tensor, antithetic: bool, generator: torch.Generator | None) -> Plan:
    """SHEAR's plan (:func:`shear_coalitions`), per example, with Eq. (14) as estimator."""
    coalitions = shear_coalitions(cooperators, antithetic, generator)
    batch, d = coalitions.shape[:2]
    example_index = torch.arange(batch, device=coalitions.device).repeat_interleave(
        coalitions[0].numel() // d
    )

    def estimate(values: Tensor) -> Tensor:
        return shear_estimates(values.view(*coalitions.shape[:-1]))

    return Plan(DenseCoalitions(coalitions.reshape(-1, d)), estimate, example_index)


def shear_weights(num_cooperators: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``(2^m,)`` Eq. (14) weights ``1 / ((m + 1) C(m, |S|))`` of the subsets."""
    m = num_cooperators
    sizes = subset_bits(m, device).sum(dim=1).tolist()
    return torch.tensor(
        [1.0 / ((m + 1) * math.comb(m, size)) for size in sizes], dtype=dtype, device=device
    )


def shear_estimates(values: Tensor) -> Tensor:
    """Eq. (14): ``(N, d)`` from the plan's values ``(N, d, 2^m, 2)``."""
    m = int(math.log2(values.shape[2]))
    weights = shear_weights(m, values.device, values.dtype)
    return ((values[..., 1] - values[..., 0]) * weights).sum(dim=2)
