"""The parities of order three reweighted by the even part's pairwise interactions.

What: a prior of the Walsh-basis process (``plans/walsh_gp.py``) may give
triple ``{i, j, k}`` more variance where its three pairs interact strongly in
the even part of the game, observed for free beside the odd part. These are
the triples' weights, their prior masses, and their covariance between
coalitions, either as one product (``rows^2 C(d, 3)``) or read from a table of
the ``2^d`` agreement patterns (a product of the two halves' parities).
"""

from __future__ import annotations

import functools
import itertools

import torch
from torch import Tensor

from .linear import popcount
from .surrogates import cubic_rows
from .walsh_kernel import triple_parities

#: From :data:`~captum_graphshap.plans.walsh_gp.INTERACTION_PAIRS_PER_FEATURE`
#: pairs per feature, up to this many features, each prior is also tried with
#: its parities of order three reweighted by how strongly their three pairs
#: interact in the even part (observed for free beside the odd one): triple
#: ``{i, j, k}``'s weight is ``(g / mean g)^2`` scaled to mean one, plus
#: :data:`TRIPLE_FLOOR`, scaled to mean one again, ``g`` the geometric mean of
#: ``|a_ij|, |a_ik|, |a_jk|``; it multiplies the prior variance ``r_i r_j r_k``.
#: On every number of rows: at 1,024 evaluations of zoo models with 12-24
#: features that changed the error by 0.35-1.34x (median 0.89-0.96 on each of
#: three seeds; the largest gains on 1-d CNNs) against reweighting only up to
#: :data:`~captum_graphshap.plans.walsh_gp.SELECTION_ROWS` rows, at about 1.7x
#: the time (``benchmarks/ZOO.md``, "Triples on every row").
TRIPLE_MAX_FEATURES = 16
#: ... and up to this many features from :data:`TRIPLE_WIDE_PAIRS_PER_FEATURE`
#: pairs per feature (the triples' covariance costs ``rows^2 x C(d, 3)``: at
#: 32 features and 512 pairs it was 4x the default's time for no gain; at 6
#: pairs per feature and 20 features it raised the error 1.03-1.07x).
TRIPLE_WIDE_FEATURES = 24
TRIPLE_WIDE_PAIRS_PER_FEATURE = 16
TRIPLE_FLOOR = 0.1


def triple_weights(interactions: Tensor, pairs: int) -> Tensor | None:
    """``(N, T)`` each triple's weight from the pairwise coefficients ``(N, d, d)``
    fitted on ``pairs`` pairs; None below three features and above
    :data:`TRIPLE_MAX_FEATURES` features (up to :data:`TRIPLE_WIDE_FEATURES` from
    :data:`TRIPLE_WIDE_PAIRS_PER_FEATURE` pairs per feature)."""
    d = interactions.shape[1]
    wide = d <= TRIPLE_WIDE_FEATURES and pairs >= TRIPLE_WIDE_PAIRS_PER_FEATURE * d
    if d < 3 or (d > TRIPLE_MAX_FEATURES and not wide):
        return None
    i, j, k = triple_parities(d, interactions.device).T
    strength = (interactions[:, i, j] * interactions[:, i, k] * interactions[:, j, k]) ** (1 / 3)
    return unit_mean(unit_mean(unit_mean(strength) ** 2) + TRIPLE_FLOOR)


def unit_mean(scale: Tensor) -> Tensor:
    """Each row over its mean; a row of zeros (no signal) becomes ones."""
    mean = scale.mean(dim=1, keepdim=True)
    return torch.where(mean > 0, scale / mean.clamp_min(1e-300), torch.ones_like(scale))


@functools.lru_cache(maxsize=16)
def triple_members(num_features: int, device: torch.device) -> Tensor:
    """``(T, d)`` which features each triple holds (0 / 1); cached (read only)."""
    triples = triple_parities(num_features, device)
    members = torch.zeros(len(triples), num_features, dtype=torch.float64, device=device)
    return members.scatter_(1, triples, 1.0)


def triple_products(signs: Tensor) -> Tensor:
    """``(rows, T)`` every triple's parity ``x_i x_j x_k`` of the +-1 rows ``(rows, d)``
    (:func:`~captum_graphshap.plans.surrogates.cubic_rows`, which gathers rows of the
    transpose: 20x faster than gathering columns)."""
    return cubic_rows(signs.T.contiguous(), triple_parities(signs.shape[1], signs.device)).T


def triple_table(mass: Tensor, num_features: int) -> Tensor:
    """``(..., 2^d)`` the triples' covariance ``sum_T m_T chi_T(c)`` for every agreement
    pattern ``c`` (in :func:`~captum_graphshap.plans.walsh_kernel.read_patterns`'
    order: the first ``d // 2`` features' bits above the others'), from their masses
    ``(..., T)``.

    ``chi_T(c)`` is the product of the halves' parities, so the table is
    ``A M B'``: ``A`` and ``B`` the parities of each half's subsets of at most three
    features at its ``2^(d/2)`` patterns, ``M`` the masses placed at each triple's
    pair of subsets. Two matrix products of about ``2^d x 93`` at d = 16, where the
    Walsh-Hadamard transform of the masses took ``d 2^d`` scattered passes (7.8 ->
    1.5 ms at d = 16 and two relevances).
    """
    first, second, at_first, at_second = _half_parities(num_features, mass.device)
    placed = mass.new_zeros(*mass.shape[:-1], first.shape[1], second.shape[1])
    placed[..., at_first, at_second] = mass
    return (first.to(mass.dtype) @ placed @ second.to(mass.dtype).T).flatten(-2)


@functools.lru_cache(maxsize=16)
def _half_parities(
    num_features: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each half's subsets of at most three features: their parities at the half's
    patterns ``(2^h, n)`` (first half, second half), and each triple's subset in
    either half ``(T,)``."""
    d = num_features
    half = d // 2
    triples = triple_parities(d, device)

    def subsets(size: int) -> list[tuple[int, ...]]:
        return [s for k in range(min(3, size) + 1) for s in itertools.combinations(range(size), k)]

    def parities(chosen: list[tuple[int, ...]], size: int) -> Tensor:
        masks = torch.tensor([sum(1 << j for j in s) for s in chosen], device=device)
        patterns = torch.arange(2**size, device=device)
        ones = popcount(patterns[:, None] & masks[None, :], size)
        return 1.0 - 2.0 * (ones % 2).to(torch.float64)

    lists = subsets(half), subsets(d - half)
    index = [{s: n for n, s in enumerate(chosen)} for chosen in lists]
    rows = triples.tolist()
    at_first = [index[0][tuple(j for j in t if j < half)] for t in rows]
    at_second = [index[1][tuple(j - half for j in t if j >= half)] for t in rows]
    return (
        parities(lists[0], half),
        parities(lists[1], d - half),
        torch.tensor(at_first, dtype=torch.long, device=device),
        torch.tensor(at_second, dtype=torch.long, device=device),
    )


def triple_mass(relevance: Tensor, excess: Tensor) -> Tensor:
    """``(..., T)`` each triple's extra prior variance over ``sigma_3``: ``r_i r_j r_k x_T``."""
    i, j, k = triple_parities(relevance.shape[-1], relevance.device).T
    return relevance[..., i] * relevance[..., j] * relevance[..., k] * excess
