"""Local parities: extra prior variance on the odd interactions of neighbouring features.

What: a prior shape of the Walsh-basis process (``plans/walsh_gp.py``) that
adds variance to the parities of order three and five whose features lie
within a window of neighbouring features: the interactions a convolution, a
window of tokens or a sequence of segments makes. The windows come from the
feature mask's geometry (``plans/local_windows.py``), or are
:data:`LOCAL_WIDTH` consecutive feature ids where there is none.

Why: on a 1-d CNN with max-pooling the even part's pairwise fit cannot find
the neighbourhoods at 32 features from 511 pairs (as many coefficients as
pairs), while the feature ids' order gives them for free. A prior that puts
its higher orders there reproduced a d = 32 ReLU CNN's values to 0.0040 at
1,024 evaluations (the process without it: 0.026; ``Shear``, which reads the
neighbourhoods off derivatives: 0.0052). Where the ids' order means nothing
(tabular columns, a 2-d raster) the restricted likelihood keeps the shapes
without it: on 23 zoo models with 17-64 features they moved the error by more
than 1% only on the two 1-d CNNs and one SiLU MLP (0.97x;
``benchmarks/ZOO.md``, "Local parities").

Each parity ``T`` gets ``lambda sigma_|T| prod_{j in T} r_j m_T`` more prior
variance, ``m_T`` the number of windows holding it (one window per feature,
by default centred on it, cut at the ends) and ``lambda`` one of
:data:`LOCAL_WEIGHTS`.
"""

from __future__ import annotations

import functools
import itertools

import torch
from torch import Tensor

#: Features per window: a feature and the two ids on either side of it (from a
#: mask's geometry: at least this many, median over features).
LOCAL_WIDTH = 5
#: One window per feature: the sorted ids of the features it holds.
Windows = tuple[tuple[int, ...], ...]
#: The orders of the local parities (odd: only they carry Shapley value).
LOCAL_ORDERS = (3, 5)
#: Their extra weight ``lambda`` relative to the product prior's parities of the
#: same order, each a candidate shape of the restricted likelihood's grid beside
#: each plain one (a d = 32 and a d = 48 1-d CNN at 1,024 evaluations: 0.0143 /
#: 0.0353 at 10, 0.0043 / 0.0153 at 1,000, 0.0040 / 0.0127 at 10,000; on four
#: 1-d CNNs with 20-64 features the pair 1,000 and 10,000 was at or below the
#: single weight 3,000 on each, 0.76-1.00x, at about its time).
LOCAL_WEIGHTS = (1_000.0, 10_000.0)
#: The decays of the product prior the local shapes are tried with (of
#: ``walsh_gp.ORDER_DECAYS``): with 0.01 alone the five zoo 1-d CNNs of one seed
#: (16-64 features, 4 d to 1,024 evaluations) had the errors of both decays
#: (0.96-1.06x), with 0.1 alone up to 2.6x at 1,024 evaluations and 48-64
#: features; half the local shapes, 1.16-1.35x the time without them on a cheap
#: game (d = 16 and 32, 256 and 1,024 evaluations).
LOCAL_DECAYS = (0.01,)
#: From this many features on: below it a window holds half the features or more,
#: so the local parities are most of the product prior's triples anyway (at 8
#: features the likelihood took them on a tanh MLP at 32 evaluations, 1.10x the
#: error without them).
LOCAL_MIN_FEATURES = 10


def local_enabled(windows: Windows) -> bool:
    """Whether the grid has the local shapes with these windows: from
    :data:`LOCAL_MIN_FEATURES` features, where some window holds an odd parity of
    order three."""
    return len(windows) >= LOCAL_MIN_FEATURES and max(map(len, windows)) >= 3


@functools.lru_cache(maxsize=64)
def line_windows(num_features: int) -> Windows:
    """:data:`LOCAL_WIDTH` consecutive ids centred on each feature, cut at the ends."""
    d, half = num_features, LOCAL_WIDTH // 2
    return tuple(tuple(range(max(0, c - half), min(d, c + half + 1))) for c in range(d))


@functools.lru_cache(maxsize=32)
def local_sets(windows: Windows, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """``(P, d)`` the local parities' members (0 / 1), ``(P,)`` their windows' count
    and ``(P,)`` their orders; cached (read only)."""
    counts: dict[tuple[int, ...], int] = {}
    for window in windows:
        for size in LOCAL_ORDERS:
            for subset in itertools.combinations(window, size):
                counts[subset] = counts.get(subset, 0) + 1
    members = torch.zeros(len(counts), len(windows), dtype=torch.float64)
    for row, subset in enumerate(counts):
        members[row, list(subset)] = 1.0
    multiplicity = torch.tensor(list(counts.values()), dtype=torch.float64)
    order = members.sum(dim=1)
    return members.to(device), multiplicity.to(device), order.to(device)


def local_parities(signs: Tensor, members: Tensor) -> Tensor:
    """``(rows, P)`` each local parity ``prod_{j in T} x_j`` at the +-1 rows ``(rows, d)``:
    ``-1`` to the number of members outside the coalition."""
    outside = (signs < 0).to(members.dtype)
    return 1.0 - 2.0 * torch.remainder(outside @ members.T, 2.0)


def local_mass(relevance: Tensor, variances: Tensor, weight: Tensor, windows: Windows) -> Tensor:
    """``(..., P)`` each local parity's extra prior variance over the scale:
    ``weight sigma_|T| prod_{j in T} r_j m_T``.

    ``relevance`` ``(..., d)``, ``variances`` ``(..., top + 1)`` per order and
    ``weight`` ``(...)`` broadcast together (``lambda``; 0: no local parities).
    """
    order = local_sets(windows, relevance.device)[2]
    per_order = variances[..., order.long()]
    return weight[..., None] * counted_products(relevance, windows) * per_order


def counted_products(relevance: Tensor, windows: Windows) -> Tensor:
    """``(..., P)`` each local parity's ``prod_{j in T} r_j m_T`` from ``relevance``
    ``(..., d)``."""
    members, multiplicity, _ = local_sets(windows, relevance.device)
    return torch.exp(torch.log(relevance.clamp_min(1e-300)) @ members.T) * multiplicity


def add_local_covariances(
    covariances: Tensor,
    signs: Tensor,
    relevance: Tensor,
    grid: Tensor,
    weight: Tensor,
    windows: Windows,
) -> None:
    """Add the local parities' covariance in place to ``covariances`` ``(E, W, G, rows,
    rows)``, under the shapes of the grid that have them (``weight > 0``).

    ``relevance`` ``(E, W, d)``, ``grid`` ``(E, G, top + 1)``, ``weight`` ``(E, G)``. One
    product per relevance and order, added per shape scaled by ``lambda sigma_k``: not
    one per shape, and no temporary of the covariances' size (at d = 16 and 256 rows
    the sum through temporaries took 5 of a call's 50 ms).
    """
    members, _, order = local_sets(windows, signs.device)
    parities = local_parities(signs, members)  # (rows, P)
    products = counted_products(relevance, windows)  # (E, W, P)
    shapes = (weight > 0).any(dim=0).nonzero()[:, 0].tolist()
    for size in LOCAL_ORDERS:
        of_size = order == size
        if not bool(of_size.any()):
            continue
        chosen = parities[:, of_size]
        part = (chosen * products[..., None, of_size]) @ chosen.T  # (E, W, rows, rows)
        for shape in shapes:
            scale = weight[:, shape] * grid[:, shape, size]  # (E,)
            covariances[:, :, shape].addcmul_(scale[:, None, None, None], part)
