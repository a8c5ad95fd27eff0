"""Paired KernelSHAP: coalitions from the Shapley kernel with their complements.

Coalitions are drawn from the KernelSHAP distribution (a size ``s`` with
probability proportional to ``1 / (s (d - s))``, then a uniform subset),
each followed by its complement (paired sampling, Covert & Lee 2021), and
fitted by the efficiency-constrained least squares of :func:`kernel_shapley`.
For a budget of distinct evaluations, :func:`filled_kernel_pairs` draws until
the distinct pairs fill it, weighting each by how often it came up. Pure
tensor maths; ``attr/paired_kernel_shap.py`` adapts it to Captum.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .draws import distinct_ids, uniform_subsets

# ``budget=`` counts distinct evaluations, and i.i.d. draws repeat themselves:
# at d = 14 and 1,024 evaluations, 511 i.i.d. kernel pairs are about 320
# distinct ones. :func:`filled_kernel_pairs` stops at a stopping time of the
# i.i.d. stream, so the draws (and their estimator) are the usual ones, only
# more of them.

#: The most kernel draws :func:`filled_kernel_pairs` makes (the last distinct
#: pairs of a nearly covering budget take coupon-collector many draws).
MAX_FILL_DRAWS = 2**20


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
    return kernel_design_plan(*filled_kernel_design(num_features, pairs, generator, device))


def filled_kernel_design(
    num_features: int, pairs: int, generator: torch.Generator | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """:func:`filled_kernel_plan`'s design: ``(2 P, d)`` bool coalitions (the distinct
    pairs' members, then their complements) and ``(2 P,)`` float64 weights."""
    d = num_features
    if pairs >= 2 ** (d - 1) - 1:  # pairs are at most MAX_COALITIONS: d is small
        sampled, weights = every_kernel_pair(d, device)
    else:
        sampled, weights = filled_kernel_pairs(d, pairs, generator, device)
    return torch.cat([sampled, ~sampled]), torch.cat([weights, weights])


def kernel_design_plan(coalitions: Tensor, weights: Tensor) -> Plan:
    """The plan of a weighted kernel design: the endpoints, then ``coalitions`` (distinct),
    fitted by :func:`kernel_shapley`."""
    d = coalitions.shape[1]
    endpoints = torch.zeros(2, d, dtype=torch.bool, device=coalitions.device)
    endpoints[1] = True

    def estimate(values: Tensor) -> Tensor:
        return kernel_shapley(coalitions, values[:, 2:], values[:, 0], values[:, 1], weights)

    return Plan(DenseCoalitions(torch.cat([endpoints, coalitions])), estimate, distinct=True)


def kernel_gram(coalitions: Tensor, weights: Tensor | None = None) -> Tensor:
    """``(d, d)`` float64 ``A = sum_p w_p z_p z_p^T`` with the weights normalised to sum
    to 1 (uniform without ``weights``): the matrix of :func:`kernel_shapley`'s fit, and
    of the quadratic ``mean_p w_p (v(z_p) - v(0) - z_p . phi)^2`` in ``phi``."""
    z = coalitions.to(torch.float64)
    return weighted_rows(z, weights).T @ z


def weighted_rows(z: Tensor, weights: Tensor | None) -> Tensor:
    """``z``'s rows times their weights normalised to sum to 1 (``1 / P`` without)."""
    if weights is None:
        return z / z.shape[0]
    share = weights.to(device=z.device, dtype=z.dtype)
    return z * (share / share.sum())[:, None]


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
    weighted = weighted_rows(z, weights)
    a_inverse = torch.linalg.pinv(weighted.T @ z, hermitian=True)
    b = (values - empty_value[:, None]) @ weighted  # (N, d)
    a_inverse_b = b @ a_inverse
    a_inverse_ones = a_inverse.sum(dim=1)  # A^-1 1 (A symmetric)
    gap = (a_inverse_b.sum(dim=1) - (full_value - empty_value)) / a_inverse_ones.sum()
    return a_inverse_b - gap[:, None] * a_inverse_ones[None, :]


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
