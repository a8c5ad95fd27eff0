"""Sampled coalition plans and their estimators.

Three Monte Carlo estimators of the Shapley value, each a plan (which
coalitions to evaluate, drawn with a ``torch.Generator``) and an estimator
(a fixed map from the coalition values to attributions):

* permutation sampling: marginal contributions along random orderings,
  optionally antithetic (each ordering with its reverse);
* paired KernelSHAP: coalitions drawn from the Shapley kernel with their
  complements, and the efficiency-constrained least-squares fit;
* SHEAR's Eq. (14): an exact Shapley sum over a feature's cooperators with
  the other features present at random, antithetically paired.

The functions are pure tensor maths; ``attr/sampling.py`` and
``attr/shear.py`` adapt them to Captum.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan, PrefixCoalitions
from ..uncertainty.intervals import normal_quantile

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

    Each example gets its own orderings, so the errors of different examples
    are independent (intervals hold per example, not just on average over a
    batch). With ``antithetic`` the second half are the first half reversed
    (``M`` must be even), so each feature's early and late positions pair up.
    """
    drawn = num_permutations // 2 if antithetic else num_permutations
    scores = uniform((batch, drawn, num_features), generator, device)
    ranks = scores.argsort(dim=2).argsort(dim=2)
    if antithetic:
        ranks = torch.cat([ranks, num_features - 1 - ranks], dim=1)
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
        return permutation_samples(values, ranks, antithetic).mean(dim=1)

    return Plan(PrefixCoalitions(ranks), estimate, example_index)


def permutation_samples(values: Tensor, ranks: Tensor, antithetic: bool) -> Tensor:
    """The independent samples ``(N, K, d)`` of a permutation plan's ``(R,)`` values.

    ``K`` is the number of orderings, or of antithetic pairs.
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

    ``"normal"``: ``z * SSD / sqrt(K)`` (Merrick & Taly), SSD the sample
    standard deviation. ``"bootstrap"``: half the distance between the
    percentile bounds of 1000 resampled means, which needs no normality.
    """
    mean = samples.mean(dim=1)
    count = samples.shape[1]
    if interval == "normal":
        spread = samples.std(dim=1, unbiased=True)
        return mean, normal_quantile(confidence) * spread / math.sqrt(count)
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
    keys = torch.rand(rows, d, generator=generator, device=device)
    ranks = keys.argsort(dim=1).argsort(dim=1)
    return (ranks < sizes[:, None]).view(*shape, d)


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
    batch, d, m = cooperators.shape
    device = cooperators.device
    bits = subset_bits(m, device).to(torch.float64)  # (2^m, m)
    chosen = torch.nn.functional.one_hot(cooperators, d).to(torch.float64)  # (N, d, m, d)
    subsets = torch.einsum("sb,nibk->nisk", bits, chosen) > 0  # (N, d, 2^m, d)
    identity = torch.eye(d, dtype=torch.bool, device=device)
    others = ~(chosen.sum(dim=2) > 0) & ~identity  # (N, d, d): neither i nor a cooperator
    count = 2**m
    if antithetic and m > 0:
        # subset s and its complement 2^m - 1 - s share one draw, complemented
        half = uniform((batch, d, count // 2, d), generator, device) < 0.5
        present = torch.cat([half, (~half).flip(2)], dim=2)
    else:
        present = uniform((batch, d, count, d), generator, device) < 0.5
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
