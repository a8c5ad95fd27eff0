"""Hop distances and ``k``-hop balls of a graph given by its adjacency.

The functions take plain adjacency data (canonical edges, neighbour lists,
neighbour bitmasks or the padded neighbour table of
:mod:`~captum_graphshap.graphs.edges`);
:class:`~captum_graphshap.graphs.FeatureGraph` validates the arguments and
caches the results.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from .bitsets import bits, grow_balls, masks_to_rows
from .edges import EdgeArray

__all__ = [
    "ball_mask",
    "ball_table",
    "dedup_sorted_rows",
    "distances_bitsets",
    "distances_scipy",
    "has_scipy",
    "hop_distances",
    "neighbourhood_rows",
]


@functools.cache
def has_scipy() -> bool:
    """Whether ``scipy.sparse.csgraph`` imports (checked once; see ``clear_caches``)."""
    try:
        import scipy.sparse.csgraph  # noqa: F401
    except ImportError:
        return False
    return True


def hop_distances(
    n: int, edges: EdgeArray, lists: Sequence[Sequence[int]]
) -> npt.NDArray[np.int32]:
    """Hop distances ``(n, n)`` (int32), ``-1`` where unreachable.

    ``scipy.sparse.csgraph`` when scipy is installed, else a bit-parallel
    breadth-first search from every node at once.
    """
    if n == 0:
        return np.zeros((0, 0), dtype=np.int32)
    if has_scipy():
        return distances_scipy(n, edges)
    return distances_bitsets(n, lists)


def distances_scipy(n: int, edges: EdgeArray) -> npt.NDArray[np.int32]:
    """All-pairs unweighted shortest paths with ``scipy.sparse.csgraph``."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    e = edges
    matrix = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
    d: npt.NDArray[np.float64] = shortest_path(matrix, method="D", directed=False, unweighted=True)
    d[np.isinf(d)] = -1
    return d.astype(np.int32)


def distances_bitsets(n: int, lists: Sequence[Sequence[int]]) -> npt.NDArray[np.int32]:
    """All-pairs BFS, one level for all sources at a time.

    ``balls[v]`` is the bitmask of the nodes within the current radius of
    ``v``; growing all balls by one hop is one big-int OR per edge, and the
    bits new at a level are written into row ``v`` of the result.
    """
    out = np.full((n, n), -1, dtype=np.int32)
    np.fill_diagonal(out, 0)
    balls = [1 << v for v in range(n)]
    width = max((n + 7) // 8, 1)
    level = 0
    while True:
        level += 1
        grown = grow_balls(balls, lists)
        changed = False
        for v in range(n):
            new = grown[v] & ~balls[v]
            if new:
                changed = True
                found = np.unpackbits(
                    np.frombuffer(new.to_bytes(width, "little"), dtype=np.uint8),
                    count=n,
                    bitorder="little",
                ).astype(bool)
                out[v, found] = level
        if not changed:
            return out
        balls = grown


def ball_mask(nbr: Sequence[int], i: int, k: int) -> int:
    """Bitmask of the nodes at distance ``<= k`` from ``i`` (``nbr``: neighbour bitmasks)."""
    ball = frontier = 1 << i
    for _ in range(k):
        reach = 0
        for node in bits(frontier):
            reach |= nbr[node]
        frontier = reach & ~ball
        if not frontier:
            break
        ball |= frontier
    return ball


def neighbourhood_rows(n: int, lists: Sequence[Sequence[int]], k: int) -> npt.NDArray[np.bool_]:
    """Boolean ``(n, n)``: row ``i`` marks the nodes within ``k`` hops of ``i``.

    ``k`` rounds of "OR in your neighbours' balls" grow all ``n`` balls at
    once without the ``O(n^2)``-int distance matrix.
    """
    balls = [1 << v for v in range(n)]
    for _ in range(k):
        grown = grow_balls(balls, lists)
        if grown == balls:
            break
        balls = grown
    return masks_to_rows(balls, n)


def ball_table(table: Tensor, n: int, k: int) -> Tensor:
    """Long ``(n, W)``: row ``i`` holds the sorted ids of ``N_k(i)``, ``-1`` padded.

    ``table`` is the ``-1`` padded neighbour table. Grown a hop at a time for
    all nodes at once (sort and drop repeats per row), so memory is
    ``O(n W D)``, never ``n^2`` bits.
    """
    pad = n  # sorts after every id
    ball = torch.arange(n).reshape(n, 1)
    for _ in range(k):
        safe = ball.clamp(max=max(n - 1, 0))
        reach = torch.where((ball < pad)[:, :, None], table[safe], -1).reshape(n, -1)
        grown = torch.cat([ball, torch.where(reach >= 0, reach, pad)], dim=1)
        grown = dedup_sorted_rows(grown, pad)
        if grown.shape == ball.shape and bool((grown == ball).all()):
            break
        ball = grown
    return torch.where(ball < pad, ball, -1)


def dedup_sorted_rows(rows: Tensor, pad: int) -> Tensor:
    """Sort each row, replace repeats by ``pad``, and drop all-``pad`` columns."""
    rows, _ = torch.sort(rows, dim=1)
    repeat = torch.zeros_like(rows, dtype=torch.bool)
    repeat[:, 1:] = rows[:, 1:] == rows[:, :-1]
    rows = torch.where(repeat, pad, rows)
    rows, _ = torch.sort(rows, dim=1)
    width = max(int((rows < pad).sum(dim=1).max()) if rows.shape[0] else 1, 1)
    return rows[:, :width].contiguous()
