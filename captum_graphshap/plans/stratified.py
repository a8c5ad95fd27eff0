"""Size-stratified paired coalitions: distinct draws, the small sizes enumerated.

Complementary pairs are allocated over the size pairs ``(s, d - s)``
(:func:`size_allocation`); a size pair with fewer coalitions than its share
is enumerated whole, the others drawn uniformly without replacement, so no
evaluation repeats. Each pair carries its size pair's Shapley-kernel mass
over the number drawn of it, so a kernel-weighted fit stays consistent
(used by ``regression_adjusted.py`` and ``regression_mc.py``).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from .draws import distinct_ids, uniform_subsets

#: a size with at most this many coalitions is enumerated, then subsampled,
#: when the draw takes at least ``1 / ENUMERATE_SHARE`` of them
ENUMERATE_UP_TO = 50_000
ENUMERATE_SHARE = 4


def pair_capacity(d: int, size: int) -> int:
    """Complementary pairs of the size pair ``(size, d - size)``."""
    return math.comb(d, size) // (2 if 2 * size == d else 1)


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


def enumerates(d: int, size: int, count: int, half: bool = False) -> bool:
    """Whether :func:`distinct_subsets` enumerates the coalitions of ``size`` members.

    Enumerating costs a Python tuple per coalition (12 ms for the 12,870 of
    d = 16, size 8): only worth it when the draw takes a large share of them;
    a few draws among many are rejection-sampled, vectorised, in well under 1 ms.
    """
    available = math.comb(d, size) // (2 if half else 1)
    return available <= ENUMERATE_UP_TO and ENUMERATE_SHARE * count >= available


def drawn_subsets(
    d: int, wanted: list[tuple[int, int]], generator: torch.Generator | None
) -> dict[int, Tensor]:
    """``{size: (count, d)}`` distinct uniform coalitions for every ``(size, count)`` at once.

    One draw of twice the rows and one pass of ids for all sizes (coalitions
    of different sizes differ anyway), instead of a draw and a ``unique`` per
    size: at d = 49 the 24 sizes of 1,024 evaluations took 5.5 ms that way. A
    size with fewer distinct draws than asked is drawn again alone
    (:func:`distinct_subsets`). With ``2 size == d`` the coalition holding
    feature 0 stands for its pair.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    if not wanted:
        return {}
    sizes = torch.tensor([size for size, count in wanted for _ in range(2 * count)])
    drawn = uniform_subsets(sizes, d, generator)
    halves = (2 * sizes == d).to(device)[:, None]
    drawn = torch.where(halves & ~drawn[:, :1], ~drawn, drawn)
    ids = distinct_ids(drawn)
    position = torch.arange(len(ids), device=device)
    first = torch.full((int(ids.max()) + 1,), len(ids), device=device)
    first = first.scatter_reduce(0, ids, position, "amin")
    new = first[ids] == position
    out, start = {}, 0
    for size, count in wanted:
        block = drawn[start : start + 2 * count][new[start : start + 2 * count]]
        start += 2 * count
        if block.shape[0] >= count:
            out[size] = block[:count]
        else:
            out[size] = distinct_subsets(d, size, count, generator, half=2 * size == d)
    return out


def distinct_subsets(
    d: int, size: int, count: int, generator: torch.Generator | None, half: bool = False
) -> Tensor:
    """``(count, d)`` distinct uniform coalitions of ``size`` members (on the generator's device).

    With ``half`` (``2 size == d``) one coalition of each complementary pair:
    those holding feature 0.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    if enumerates(d, size, count, half):
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
    allocation = [
        (size, count, mass)
        for size, count, mass in size_allocation(d, pairs, small_first=small_first)
        if count > 0
    ]
    drawn = drawn_subsets(
        d,
        [(s, c) for s, c, _ in allocation if not enumerates(d, s, c, half=2 * s == d)],
        generator,
    )
    rows, weights = [], []
    for size, count, mass in allocation:
        if size not in drawn:
            drawn[size] = distinct_subsets(d, size, count, generator, half=2 * size == d)
        rows.append(drawn[size])
        weights.append(torch.full((count,), mass / count, dtype=torch.float64))
    if not rows:
        return torch.zeros(0, d, dtype=torch.bool, device=device), torch.zeros(
            0, dtype=torch.float64, device=device
        )
    return torch.cat(rows).to(device), torch.cat(weights).to(device)
