"""Edge arrays: parsing every graph input, the canonical edge list, adjacency lists.

Every constructor of :class:`~captum_graphshap.graphs.FeatureGraph` reduces
its input to ``(num_nodes, edges)``, an ``(E, 2)`` int64 array of in-range
node ids, here; the graph then keeps :func:`canonical_edges` of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
from torch import Tensor

from ._validation import as_numpy, check_count, check_edge_range

__all__ = [
    "EdgeArray",
    "MatrixLike",
    "adjacency_edges",
    "canonical_edges",
    "feature_mask_edges",
    "neighbour_list_edges",
    "neighbour_lists",
    "neighbour_table",
    "networkx_edges",
    "pair_edges",
    "region_edges",
]

#: Anything :meth:`~captum_graphshap.graphs.FeatureGraph.from_adjacency` accepts.
MatrixLike = np.ndarray | Tensor | Sequence[Sequence[Any]]

#: An ``(E, 2)`` array of node ids, one row per edge.
EdgeArray = npt.NDArray[np.int64]


def canonical_edges(edges: EdgeArray, n: int) -> EdgeArray:
    """Rows ``u < v``, no self loops, unique, sorted."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    low = np.minimum(edges[:, 0], edges[:, 1])
    high = np.maximum(edges[:, 0], edges[:, 1])
    codes = np.unique(low * max(n, 1) + high)
    return np.stack([codes // max(n, 1), codes % max(n, 1)], axis=1).astype(np.int64)


def neighbour_list_edges(neighbours: Sequence[Iterable[int]]) -> tuple[int, EdgeArray]:
    """``(n, edges)`` of neighbour lists: ``neighbours[i]`` lists the neighbours of ``i``."""
    n = len(neighbours)
    pairs = [(u, int(v)) for u, row in enumerate(neighbours) for v in row]
    edges = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    check_edge_range(edges, n, "neighbours")
    return n, edges


def adjacency_edges(matrix: MatrixLike) -> tuple[int, EdgeArray]:
    """``(n, edges)`` of a square adjacency matrix: any nonzero entry is an edge."""
    array = as_numpy(matrix, "matrix")
    if array.ndim != 2 or array.shape[0] != array.shape[1]:
        raise ValueError(
            f"matrix must be a square 2-D adjacency matrix of shape (n, n), got shape "
            f"{tuple(array.shape)}."
        )
    if array.dtype.kind not in "biufc":
        raise TypeError(
            f"matrix must hold booleans or numbers (nonzero = edge), got dtype {array.dtype}."
        )
    rows, cols = np.nonzero(array)
    edges = np.stack([rows, cols], axis=1).astype(np.int64)
    return array.shape[0], edges


def networkx_edges(
    g: nx.Graph, nodelist: Sequence[Hashable] | None = None
) -> tuple[int, EdgeArray]:
    """``(n, edges)`` of a networkx graph, with node ``nodelist[i]`` as node ``i``.

    See :meth:`FeatureGraph.from_networkx
    <captum_graphshap.graphs.FeatureGraph.from_networkx>` for the default order.
    """
    if not isinstance(g, nx.Graph):
        raise TypeError(f"g must be a networkx graph, got {type(g).__name__}.")
    nodes = list(g.nodes)
    if nodelist is None:
        ints = all(isinstance(u, (int, np.integer)) and not isinstance(u, bool) for u in nodes)
        if ints and set(nodes) == set(range(len(nodes))):
            order: list[Hashable] = sorted(nodes)
        else:
            order = nodes
    else:
        order = list(nodelist)
        listed = set(order)
        if len(order) != len(nodes) or listed != set(nodes):
            missing = [u for u in nodes if u not in listed][:5]
            raise ValueError(
                f"nodelist must list each of the {len(nodes)} nodes of g exactly once; got "
                f"{len(order)} entries ({len(set(order))} distinct)"
                + (f", missing e.g. {missing}" if missing else "")
                + "."
            )
    index = {u: i for i, u in enumerate(order)}
    pairs = [(index[u], index[v]) for u, v in g.edges()]
    edges = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return len(order), edges


def pair_edges(num_nodes: int, edges: Iterable[tuple[int, int]] | Tensor) -> tuple[int, EdgeArray]:
    """``(n, edges)`` of ``(u, v)`` pairs (an iterable, or an ``(E, 2)`` array/tensor)."""
    n = check_count(num_nodes, "num_nodes", minimum=0)
    if isinstance(edges, (Tensor, np.ndarray)):
        raw = as_numpy(edges, "edges")
    else:
        try:
            raw = np.asarray([tuple(pair) for pair in edges])
        except (TypeError, ValueError):
            raise TypeError("edges must be an iterable of (u, v) pairs of node ids.") from None
    if raw.size == 0:
        raw = raw.reshape(0, 2)
    if raw.ndim != 2 or raw.shape[1] != 2:
        raise ValueError(
            f"edges must be (u, v) pairs, i.e. of shape (E, 2); got shape {tuple(raw.shape)}."
        )
    if raw.dtype.kind not in "iu" and raw.size:
        raise TypeError(f"edges must hold integer node ids, got dtype {raw.dtype}.")
    array = raw.astype(np.int64)
    check_edge_range(array, n, "edges")
    return n, array


def region_edges(ids: npt.NDArray[np.int64], *, diagonals: bool = False) -> EdgeArray:
    """``(E, 2)`` id pairs that touch along any axis of ``ids`` (may repeat: one row per
    touching pair of elements); with ``diagonals`` across the diagonals too."""
    pairs = []
    for offset in _touching_offsets(ids.ndim, diagonals):
        here = tuple(slice(max(0, -s), n - max(0, s)) for n, s in zip(ids.shape, offset))
        there = tuple(slice(max(0, s), n - max(0, -s)) for n, s in zip(ids.shape, offset))
        first, second = ids[here], ids[there]
        differ = first != second
        pairs.append(np.stack([first[differ], second[differ]], axis=1))
    return np.concatenate(pairs) if pairs else np.zeros((0, 2), dtype=np.int64)


def _touching_offsets(rank: int, diagonals: bool) -> list[tuple[int, ...]]:
    """The unit step along each axis; with ``diagonals`` every offset in
    ``{-1, 0, 1}^rank`` whose first nonzero entry is positive (each touching pair of
    elements once)."""
    if not diagonals:
        return [tuple(int(a == b) for b in range(rank)) for a in range(rank)]
    every = itertools.product((-1, 0, 1), repeat=rank)
    return [o for o in every if any(o) and next(x for x in o if x) > 0]


def feature_mask_edges(mask: Tensor | np.ndarray) -> tuple[int, EdgeArray]:
    """``(n, edges)`` of the regions of a feature mask.

    See :func:`~captum_graphshap.graphs.graph_from_feature_mask`.
    """
    array = as_numpy(mask, "mask")
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim not in (1, 2):
        raise ValueError(
            f"mask must have shape (L,) or (H, W), with optional leading singleton "
            f"dimensions, got shape {tuple(np.shape(mask))}."
        )
    if array.dtype.kind not in "iu":
        raise TypeError(f"mask must hold integer feature ids, got dtype {array.dtype}.")
    if array.size == 0:
        raise ValueError(f"mask must not be empty, got shape {tuple(np.shape(mask))}.")
    ids = array.astype(np.int64)
    if ids.min() < 0:
        raise ValueError(f"mask ids must be >= 0, got {int(ids.min())}.")
    return int(ids.max()) + 1, region_edges(ids)


def neighbour_lists(n: int, edges: EdgeArray) -> tuple[tuple[int, ...], ...]:
    """Sorted neighbours of each node, of canonical ``edges``."""
    both = np.concatenate([edges, edges[:, ::-1]])
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    counts = np.bincount(both[:, 0], minlength=n)
    targets = both[:, 1].tolist()
    out = []
    start = 0
    for count in counts.tolist():
        out.append(tuple(targets[start : start + count]))
        start += count
    return tuple(out)


def neighbour_table(n: int, edges: EdgeArray) -> npt.NDArray[np.int64]:
    """``(n, D)`` int64: row ``i`` lists the neighbours of ``i`` sorted, ``-1`` padded.

    ``D`` is the largest degree (at least 1).
    """
    both = np.concatenate([edges, edges[:, ::-1]])
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    counts = np.bincount(both[:, 0], minlength=n) if n else np.zeros(0, np.int64)
    width = max(int(counts.max()) if n else 0, 1)
    table = np.full((n, width), -1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if n else counts
    slot = np.arange(both.shape[0]) - np.repeat(starts, counts)
    table[both[:, 0], slot] = both[:, 1]
    return table
