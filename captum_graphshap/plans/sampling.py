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


def size_allocation(
    d: int, pairs: int, *, small_first: bool = False
) -> list[tuple[int, int, float]]:
    """How many complementary pairs of each size pair ``(s, d - s)`` to draw.

    Pairs are spread evenly over the size pairs ``s = 1 .. d // 2`` (the
    leverage-score distribution of Musco & Witter, which measured a little
    better than the kernel's own here); with ``small_first`` each size
    pair's share falls as ``1 / s`` instead. A size pair with fewer
    coalitions than its share is enumerated whole and its surplus goes to
    the others. Returns ``(s, count, kernel_mass)`` for each size pair with
    ``kernel_mass`` the Shapley kernel's total weight on it.
    """
    sizes = list(range(1, d // 2 + 1))
    capacity = {s: pair_capacity(d, s) for s in sizes}
    kernel = {s: (1.0 if 2 * s == d else 2.0) / (s * (d - s)) for s in sizes}
    share = {s: (1.0 if 2 * s == d else 2.0) / (s if small_first else 1) for s in sizes}
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


#: a size with at most this many coalitions is enumerated, then subsampled,
#: when the draw takes at least ``1 / ENUMERATE_SHARE`` of them
ENUMERATE_UP_TO = 50_000
ENUMERATE_SHARE = 4


def distinct_subsets(
    d: int, size: int, count: int, generator: torch.Generator | None, half: bool = False
) -> Tensor:
    """``(count, d)`` distinct uniform coalitions of ``size`` members (on the generator's device).

    With ``half`` (``2 size == d``) one coalition of each complementary pair:
    those holding feature 0.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    available = math.comb(d, size) // (2 if half else 1)
    # Enumerating costs a Python tuple per coalition (12 ms for the 12,870 of
    # d = 16, size 8): only worth it when the draw takes a large share of them;
    # a few draws among many are rejection-sampled, vectorised, in well under 1 ms.
    if available <= ENUMERATE_UP_TO and ENUMERATE_SHARE * count >= available:
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
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    small_first: bool = False,
) -> tuple[Tensor, Tensor]:
    """``pairs`` distinct coalitions ``(P, d)``, one of each complementary pair, and weights.

    Sizes are allocated by :func:`size_allocation` (``small_first`` passed
    on): small sizes (and their complements) are enumerated, the others
    drawn uniformly without replacement, so every evaluation is of a new
    coalition. ``weights``
    ``(P,)`` float64 give each pair its size pair's Shapley-kernel mass over
    the number drawn of it, so a kernel-weighted fit stays consistent. ``P``
    is ``pairs`` or, when that exceeds them, every pair there is.
    """
    d = num_features
    rows, weights = [], []
    for size, count, mass in size_allocation(d, pairs, small_first=small_first):
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


def filled_kernel_plan(
    num_features: int, pairs: int, generator: torch.Generator | None, device: torch.device
) -> Plan:
    """Paired KernelSHAP's plan for ``2 + 2 pairs`` evaluations, every one spent.

    The i.i.d. kernel draws of :func:`paired_kernel_plan`, drawn until
    ``pairs`` of them are distinct (:func:`filled_kernel_pairs`) and each
    distinct pair weighted by how often it came up: the same estimator on
    more draws, with no evaluation repeated. When ``pairs`` covers every
    pair (``2^(d-1) - 1``) each is weighted by its kernel probability, the
    limit of the draws, which is exact Shapley.
    """
    d = num_features
    endpoints = torch.zeros(2, d, dtype=torch.bool, device=device)
    endpoints[1] = True
    if pairs >= 2 ** (d - 1) - 1:  # pairs are at most MAX_COALITIONS: d is small
        sampled, weights = every_kernel_pair(d, device)
    else:
        sampled, weights = filled_kernel_pairs(d, pairs, generator, device)
    both = torch.cat([sampled, ~sampled])
    both_weights = torch.cat([weights, weights])

    def estimate(values: Tensor) -> Tensor:
        return kernel_shapley(both, values[:, 2:], values[:, 0], values[:, 1], both_weights)

    return Plan(DenseCoalitions(torch.cat([endpoints, both])), estimate, distinct=True)


def every_kernel_pair(d: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(2^(d-1) - 1, d)``: the coalition holding feature 0 of each pair besides the
    endpoints, and ``(K,)`` float64 its pair's Shapley-kernel probability."""
    codes = torch.arange(2 ** (d - 1) - 1, device=device) * 2 + 1  # odd: feature 0 in, not all
    members = (codes[:, None] >> torch.arange(d, device=device)) & 1 == 1
    sizes = members.sum(dim=1).tolist()
    weights = torch.tensor(
        [1.0 / (math.comb(d, s) * s * (d - s)) for s in sizes], dtype=torch.float64
    )
    return members, weights.to(device)


def kernel_shapley(
    coalitions: Tensor,
    values: Tensor,
    empty_value: Tensor,
    full_value: Tensor,
    weights: Tensor | None = None,
) -> Tensor:
    """KernelSHAP with the endpoints enforced: ``(N, d)`` from ``(N, P)`` values.

    Coalitions drawn from the Shapley kernel need no weights, so the fit is
    the constrained least squares
    ``min_phi mean_p (v(z_p) - v(0) - z_p . phi)^2`` s.t. ``sum phi = v(1) - v(0)``,
    solved in closed form with ``A = mean z z^T`` and ``b = mean z (v - v(0))``::

        phi = A^-1 (b - 1 (1^T A^-1 b - (v(1) - v(0))) / (1^T A^-1 1))

    ``A`` is shared by the batch (one ``d x d`` pseudo-inverse). ``weights``
    ``(P,)`` (how often each coalition was drawn, or its probability) turn the
    means into weighted means.
    """
    z = coalitions.to(values.dtype)
    if weights is None:
        weighted = z / z.shape[0]
    else:
        share = weights.to(device=z.device, dtype=z.dtype)
        weighted = z * (share / share.sum())[:, None]
    a_inverse = torch.linalg.pinv(weighted.T @ z, hermitian=True)
    b = (values - empty_value[:, None]) @ weighted  # (N, d)
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


# ---------------------------------------------------------------- filling a budget
#
# ``budget=`` counts distinct evaluations, and i.i.d. draws repeat themselves:
# at d = 14 and 1,024 evaluations, 511 i.i.d. kernel pairs are about 320
# distinct ones and 78 antithetic orderings about 830 distinct prefixes. The
# samplers below keep drawing until the distinct rows fill the budget. The
# kernel pairs stop at a stopping time of the i.i.d. stream, so the draws (and
# their estimator) are the usual ones, only more of them; the orderings' count,
# and which of a few pools is kept, are chosen from which prefixes coincide
# only, which keeps each ordering uniform (:func:`filled_orderings`).

#: The most kernel draws :func:`filled_kernel_pairs` makes (the last distinct
#: pairs of a nearly covering budget take coupon-collector many draws).
MAX_FILL_DRAWS = 2**20
#: :func:`filled_orderings` draws at most this many times the orderings the
#: worst case (no shared prefix) would fit.
FILL_ORDERINGS_FACTOR = 16
#: The pools of orderings :func:`filled_orderings` draws, in stages
#: ``(pools, share)``: a stage is drawn only while the best pool so far fills
#: less than ``share`` of the rows that can be filled (one pool; 7 more below
#: 99%; 56 more below 95%). From 4,096 rows on the first nearly always does.
FILL_STAGES = ((1, 1.0), (7, 0.99), (56, 0.95))
#: A stage draws at most this many prefix rows to begin with (fewer pools when
#: ``d`` is large), which bounds the arithmetic of the later stages.
FILL_WORK = 2**17


def distinct_ids(coalitions: Tensor | PrefixCoalitions) -> Tensor:
    """``(M,)`` an id per coalition, equal exactly when the coalitions are (the engine's keys)."""
    from ..engine.plan import coalition_keys

    store = DenseCoalitions(coalitions) if isinstance(coalitions, Tensor) else coalitions
    keys = coalition_keys(store)
    ids = torch.unique(keys[:, 0], return_inverse=True)[1]  # bit codes: a flat sort
    # hashed words: a flat sort per word and one of the pair of ranks (exact: two rows
    # are equal when both words are), about ten times faster than ``unique(dim=0)``
    for column in range(1, keys.shape[1]):
        word = torch.unique(keys[:, column], return_inverse=True)[1]
        ids = torch.unique(ids * (int(word.max()) + 1) + word, return_inverse=True)[1]
    return ids


def filled_kernel_pairs(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    max_draws: int = MAX_FILL_DRAWS,
) -> tuple[Tensor, Tensor]:
    """Draw kernel pairs i.i.d. until ``pairs`` of them are distinct: the distinct ones and counts.

    Each draw is :func:`sample_kernel_coalitions`' (a size from the Shapley
    kernel, then a uniform subset) with its complement; drawing stops at the
    draw that makes ``pairs`` distinct complementary pairs (or after
    ``max_draws`` draws, or once every pair there is has come up).
    Returns ``(P, d)`` bool, one coalition of each distinct pair in the order
    first drawn, and ``(P,)`` float64 how often each was drawn: a fit
    weighting each pair by its count is exactly the fit on the i.i.d. draws
    (duplicates included), whose number is a stopping time of the stream.
    """
    d = num_features
    total = 2 ** (d - 1) - 1 if d <= 62 else math.inf
    target = int(min(pairs, total))
    source = generator.device if generator is not None else torch.device("cpu")
    found = torch.zeros(0, d, dtype=torch.bool, device=source)
    counts = torch.zeros(0, dtype=torch.float64, device=source)
    drawn = 0
    while found.shape[0] < target and drawn < max_draws:
        need = target - found.shape[0]
        chunk = min(max(2 * need, drawn // 2, 64), max_draws - drawn)
        rows = sample_kernel_coalitions((chunk,), d, generator)
        rows = torch.where(rows[:, :1], rows, ~rows)  # one member of each pair: feature 0's
        inverse = distinct_ids(torch.cat([found, rows]))
        known, ids = inverse[: found.shape[0]], inverse[found.shape[0] :]
        ids_count = int(inverse.max()) + 1
        position = torch.arange(chunk, device=source)
        first = torch.full((ids_count,), chunk, dtype=torch.long, device=source)
        first = first.scatter_reduce(0, ids, position, "amin")
        seen = torch.zeros(ids_count, dtype=torch.bool, device=source)
        seen[known] = True
        new = ~seen[ids] & (first[ids] == position)
        cumulative = new.cumsum(0)
        stop = chunk
        if int(cumulative[-1]) >= need:
            stop = int(torch.searchsorted(cumulative, torch.tensor(need, device=source))) + 1
        ids, new = ids[:stop], new[:stop]
        index = torch.full((ids_count,), -1, dtype=torch.long, device=source)
        index[known] = torch.arange(found.shape[0], device=source)
        index[ids[new]] = found.shape[0] + torch.arange(int(new.sum()), device=source)
        found = torch.cat([found, rows[:stop][new]])
        counts = torch.cat([counts, counts.new_zeros(int(new.sum()))])
        counts += torch.bincount(index[ids], minlength=found.shape[0]).to(counts.dtype)
        drawn += stop
    return found.to(device), counts.to(device)


def filled_orderings(
    num_features: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    minimum: int = 1,
    even: bool = False,
) -> Tensor:
    """``(M, d)`` shared orderings whose distinct prefixes (endpoints included) fit ``rows``.

    Orderings are drawn as :func:`permutation_ranks` draws them (with
    ``antithetic``, each followed by its reverse) and taken while their
    distinct prefixes number at most ``rows``: orderings share the empty and
    full coalitions, and many share their first or last few members, so the
    count is usually well above ``(rows - 2) // (d - 1)``. The largest count
    that fits is taken (even with ``even``; at least ``minimum``, and at
    most :data:`FILL_ORDERINGS_FACTOR` times the worst case's), in the best
    filling of up to 64 pools (:data:`FILL_STAGES`,
    :func:`filled_orderings_and_references`). Returned in
    :func:`permutation_ranks`' layout: the first ``M // 2`` orderings, their
    reverses, then (``M`` odd) one more.

    The count depends on the orderings only through which prefixes coincide,
    which relabelling the features (the same relabelling in every ordering)
    leaves as it is; so, given the count, each ordering is still uniform and
    the mean marginal contribution stays unbiased.
    """
    ranks, _ = filled_orderings_and_references(
        num_features, rows, antithetic, generator, device, minimum=minimum, even=even
    )
    return ranks


def filled_orderings_and_references(
    num_features: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    minimum: int = 1,
    even: bool = False,
    references: int = 0,
) -> tuple[Tensor, Tensor | None]:
    """:func:`filled_orderings`, each ordering with a reference out of ``references`` (if any).

    With ``references`` each ordering draws one uniformly (an antithetic pair
    shares it) and a row is a prefix with its reference, so orderings
    share rows only where they share the reference too; the worst case is
    ``d + 1`` rows an ordering. Relabelling the references, like the
    features, leaves the coincidences as they are, so given the count each
    ordering and its reference are still uniform. Returns ``(M, d)`` ranks
    and ``(M,)`` reference ids (None without ``references``).

    Whole orderings fill ``rows`` only as finely as an ordering's cost
    (up to ``d - 1`` rows): at d = 13 and 52 rows four orderings fill 50 rows
    if none of their prefixes coincide and 49 or fewer if some do, which
    one pool did in 30% (antithetic) to 76% (independent) of seeds. So
    several independent pools are drawn, in the stages of
    :data:`FILL_STAGES` (up to 64 pools, more only while the best so far
    misses 99%, then 95%, of the rows), and the pool whose largest fitting
    count evaluates the most rows is kept (ties to the first drawn). Where
    the first pool suffices the draws are those of a single pool, as before.

    Why that keeps the estimate unbiased: whether a stage is drawn and which
    pool is kept depend on the pools only through which of their rows
    coincide. Relabelling the features of one pool (the same relabelling in
    each of its orderings; with references, relabelling its references too)
    leaves its coincidences, hence the choice, as they are, and leaves the
    law of the pools as it is, the orderings being i.i.d. uniform. So the
    kept pool's law is invariant under relabelling, each of its orderings
    is uniform given the coincidences, and the mean marginal contribution
    is unbiased for any count so chosen. The kept orderings are not
    independent of each other (a pool with fewer, or more, shared prefixes
    is favoured); the estimate's mean is unaffected, and an interval that
    treats them as independent is approximate, as it already was with the
    count chosen from the coincidences.

    Some budgets whole orderings cannot fill to 95%, and no pool is faked to
    reach it: with ``even`` the unit is an antithetic pair of ``2 (d - 1)``
    rows, so at d = 14 and 112 rows four pairs fill 106 (0.946) and five
    need 20 shared prefixes; and independent orderings at d = 16 and 128
    rows need eight with no shared prefix (122 rows) or nine sharing nine,
    which the best of 64 pools misses in about 7% of seeds (0.945).
    """
    from .limits import MAX_COALITIONS

    d = num_features
    if references:
        worst = max(minimum, rows // (d + 1))
    else:
        worst = max(minimum, (rows - min(2, d + 1)) // max(1, d - 1))
    most = max(minimum, min(FILL_ORDERINGS_FACTOR * max(worst, 1), MAX_COALITIONS // (d + 1)))
    # every row there is: a pool that evaluates them all cannot be bettered
    available = min(rows, 2**d * max(1, references)) if d <= 62 else rows
    start = min(most, worst + worst // 4 + 4)

    def draw(pools: int) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        return candidate_pools(
            pools, d, rows, antithetic, generator, device,
            start=start, most=most, minimum=minimum, even=even, references=references,
        )  # fmt: skip

    # ``rows - filled`` below 0: a pool forced past ``rows`` by ``minimum`` ranks
    # below every pool that fits, the least overshoot first
    drawn: list[tuple[Tensor, Tensor | None, Tensor, Tensor]] = []
    scores = torch.zeros(0, dtype=torch.long, device=device)
    for size, share in FILL_STAGES:
        if drawn and int(scores.max()) >= share * available:
            break
        drawn.append(draw(min(size, max(1, FILL_WORK // (start * (d + 1))))))
        filled = drawn[-1][2]
        scores = torch.cat([scores, torch.where(filled <= rows, filled, rows - filled)])
    best = int(torch.argmax(scores))  # the first of the best: argmax returns the first
    stage = 0
    while best >= drawn[stage][3].shape[0]:  # the stage that drew it
        best -= drawn[stage][3].shape[0]
        stage += 1
    streams, labels, _, counts = drawn[stage]
    count = int(counts[best])
    chosen = streams[best, :count]
    chosen_labels = labels[best, :count] if labels is not None else None
    if not antithetic:
        return chosen, chosen_labels
    pairs = count // 2

    def layout(x: Tensor) -> Tensor:  # permutation_ranks': the firsts, their reverses, the odd one
        return torch.cat([x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2], x[2 * pairs :]])

    return layout(chosen), None if chosen_labels is None else layout(chosen_labels)


def candidate_pools(
    pools: int,
    d: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    start: int,
    most: int,
    minimum: int,
    even: bool,
    references: int,
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """``pools`` independent streams of orderings, each cut where its prefixes fit ``rows``.

    The pools of :func:`filled_orderings_and_references`, drawn together.
    Each stream is drawn as :func:`permutation_ranks` draws (with
    ``antithetic`` the stream ``f1, r1, f2, r2, ...``), ``start`` orderings
    first, doubled until every pool's distinct rows overflow ``rows`` (or
    ``most`` orderings, or every row there is). Returns the streams
    ``(K, L, d)``, their reference ids ``(K, L)`` (or None), the distinct
    rows of the count kept ``(K,)``, and that count ``(K,)``: the largest
    that fits (even with ``even``), at least ``minimum``.
    """
    pool = start
    forward = torch.zeros(pools, 0, d, dtype=torch.long, device=device)
    drawn_references = torch.zeros(pools, 0, dtype=torch.long, device=device)
    candidate = torch.arange(pools, device=device)
    while True:  # the pools' streams, doubled until their prefixes overflow ``rows``
        wanted = (pool + 1) // 2 if antithetic else pool
        extra = wanted - forward.shape[1]
        more = permutation_ranks(1, d, pools * extra, False, generator, device)[0]
        forward = torch.cat([forward, more.view(pools, extra, d)], dim=1)
        if references:
            picks = random_indices(references, (pools, extra), generator, device)
            drawn_references = torch.cat([drawn_references, picks], dim=1)
        if antithetic:  # the stream f1, r1, f2, r2, ...: a prefix is pairs and maybe one more
            stream = torch.stack([forward, d - 1 - forward], dim=2).reshape(pools, -1, d)
            stream = stream[:, :pool]
            labels = drawn_references.repeat_interleave(2, dim=1)[:, :pool]
        else:
            stream, labels = forward, drawn_references
        inverse = distinct_ids(PrefixCoalitions(stream))  # over every pool: made per pool below
        if references:  # a row is a prefix and its reference
            inverse = inverse * references + labels.repeat_interleave(d + 1, dim=1).reshape(-1)
        keys = inverse.view(pools, -1) * pools + candidate[:, None]
        inverse = torch.unique(keys.reshape(-1), return_inverse=True)[1]
        position = torch.arange(inverse.shape[0], device=inverse.device)
        first = torch.full((int(inverse.max()) + 1,), inverse.shape[0], device=inverse.device)
        first = first.scatter_reduce(0, inverse, position, "amin")
        new = (first[inverse] == position).view(pools, pool, d + 1).sum(dim=2)
        distinct = new.cumsum(1)  # (K, L): distinct rows of each pool's first m + 1 orderings
        last = distinct[:, -1]
        # every row there is already: more orderings would cost arithmetic, no spend
        covered = d <= 62 and bool((last >= 2**d * max(1, references)).all())
        if bool((last > rows).all()) or pool >= most or covered:
            break
        pool = min(most, 2 * pool)
    counts = torch.arange(1, pool + 1, device=distinct.device)
    fits = (distinct <= rows) & (counts >= minimum)
    if even:
        fits &= counts % 2 == 0
    kept = torch.where(fits, counts, 0).max(dim=1).values
    kept = torch.where(kept > 0, kept, minimum).clamp(max=pool)
    filled = distinct.gather(1, (kept - 1)[:, None])[:, 0]
    return stream, labels if references else None, filled, kept
