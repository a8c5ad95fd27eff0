"""Feature graphs: undirected simple graphs whose nodes are feature ids.

The nodes of a :class:`FeatureGraph` are the ids ``0..n-1`` of a Captum
``feature_mask``. Graph-structured attribution methods (Myerson, L-/C-Shapley)
only ever ask the graph for a few things: hop distances, k-hop neighbourhoods,
connected node sets and the connected components of a node set. All of them
are cached on the graph (:mod:`~captum_graphshap.graphs.caches`), and graphs
compare and hash by structure, so the same graph explained twice costs its
enumeration once.

This module holds the class: argument checks, caching and documentation.
The algorithms live in modules of their own: parsing and adjacency in
:mod:`~captum_graphshap.graphs.edges`, bitmask node sets in
:mod:`~captum_graphshap.graphs.bitsets`, distances and balls in
:mod:`~captum_graphshap.graphs.distances`, connected sets in
:mod:`~captum_graphshap.graphs.connected_sets`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from . import connected_sets as sets
from . import distances as dist
from . import edges as edge_arrays
from ._validation import check_count, check_limit, check_node
from .bitsets import NodesLike, bits, nodes_to_mask, sorted_rows
from .caches import GraphCache
from .edges import EdgeArray, MatrixLike
from .hierarchy import Hierarchy

__all__ = ["FeatureGraph"]


class FeatureGraph:
    """An undirected simple graph on the feature ids ``0..num_nodes-1``.

    Build one with :meth:`from_adjacency`, :meth:`from_networkx`,
    :meth:`from_edges` or :meth:`from_feature_mask`, or use a ready-made
    :class:`~captum_graphshap.graphs.LineGraph`,
    :class:`~captum_graphshap.graphs.GridGraph` or
    :class:`~captum_graphshap.graphs.SuperpixelGraph`.

    Graphs are immutable: equality and hashing use ``(num_nodes, edge set)``
    only (not the class), so they can be cache keys. Every derived quantity
    is computed once and cached (at most
    :data:`~captum_graphshap.graphs.caches.MAX_CACHE_ENTRIES` results per
    graph, CPU only; :func:`~captum_graphshap.graphs.clear_caches` empties
    them); the arrays and tensors returned by the cached methods are shared
    and must be treated as read-only.

    Args:
        neighbours:
            ``neighbours[i]`` lists the neighbours of node ``i``. The graph is
            symmetrised and self loops are dropped. Prefer the ``from_*``
            constructors, which validate their input.

    Example:
        >>> from captum_graphshap import FeatureGraph
        >>> star = FeatureGraph.from_edges(4, [(0, 1), (0, 2), (0, 3)])
        >>> star.neighbourhood(1, 1), star.diameter()
        ((0, 1), 2)
    """

    def __init__(self, neighbours: Sequence[Iterable[int]]) -> None:
        self._setup(*edge_arrays.neighbour_list_edges(neighbours))

    # ------------------------------------------------------------------ set-up

    def _setup(self, num_nodes: int, edges: EdgeArray, *, canonical: bool = False) -> None:
        """Store the graph; ``edges`` is an ``(E, 2)`` array of in-range ids.

        With ``canonical=True`` the caller promises ``u < v`` in every row,
        rows unique and sorted, which lets the vectorised subclasses skip the
        ``O(E log E)`` canonicalisation.
        """
        if not canonical:
            edges = edge_arrays.canonical_edges(edges, num_nodes)
        edges.setflags(write=False)
        self._num_nodes = int(num_nodes)
        self._edges = edges
        self._cache = GraphCache()
        self._hash: int | None = None

    @classmethod
    def _from_edge_array(cls, num_nodes: int, edges: EdgeArray) -> FeatureGraph:
        graph = FeatureGraph.__new__(FeatureGraph)
        graph._setup(num_nodes, edges)
        return graph

    @classmethod
    def from_adjacency(cls, matrix: MatrixLike) -> FeatureGraph:
        """Graph of a square adjacency matrix.

        Args:
            matrix:
                ``(n, n)`` numpy array, torch tensor or nested list, boolean or
                numeric; any nonzero entry is an edge. It is symmetrised
                (``A | A.T``) and its diagonal is ignored.
        """
        return cls._from_edge_array(*edge_arrays.adjacency_edges(matrix))

    @classmethod
    def from_networkx(cls, g: nx.Graph, nodelist: Sequence[Hashable] | None = None) -> FeatureGraph:
        """Graph of a networkx graph, with node ``nodelist[i]`` as feature ``i``.

        Args:
            g:
                Any networkx graph; directed graphs are made undirected and self
                loops are dropped.
            nodelist:
                The node of ``g`` that becomes feature ``i``, for each ``i``; it
                must list every node of ``g`` exactly once. By default
                ``sorted(g.nodes)`` when the nodes are exactly the ints
                ``0..n-1``, else ``list(g.nodes)``.
        """
        return cls._from_edge_array(*edge_arrays.networkx_edges(g, nodelist))

    @classmethod
    def from_edges(cls, num_nodes: int, edges: Iterable[tuple[int, int]] | Tensor) -> FeatureGraph:
        """Graph on ``num_nodes`` nodes with the given undirected edges.

        Args:
            num_nodes:
                Number of nodes ``n``; nodes are ``0..n-1``.
            edges:
                ``(u, v)`` pairs (an iterable, or an ``(E, 2)`` array/tensor);
                duplicates, both directions and self loops are allowed.
        """
        return cls._from_edge_array(*edge_arrays.pair_edges(num_nodes, edges))

    @classmethod
    def from_feature_mask(cls, mask: Tensor | np.ndarray) -> FeatureGraph:
        """Adjacency of the regions of a feature mask.

        See :func:`~captum_graphshap.graphs.graph_from_feature_mask`.
        """
        return cls._from_edge_array(*edge_arrays.feature_mask_edges(mask))

    # -------------------------------------------------------------- structure

    @property
    def num_nodes(self) -> int:
        """Number of nodes (features)."""
        return self._num_nodes

    def __len__(self) -> int:
        return self._num_nodes

    @property
    def num_edges(self) -> int:
        """Number of undirected edges."""
        return int(self._edges.shape[0])

    def edges(self) -> list[tuple[int, int]]:
        """Sorted list of the edges ``(u, v)``, each once with ``u < v``."""
        return [(int(u), int(v)) for u, v in self._edges.tolist()]

    def adjacency(self) -> npt.NDArray[np.bool_]:
        """Symmetric boolean adjacency matrix ``(n, n)``, a new array."""
        n = self._num_nodes
        out = np.zeros((n, n), dtype=bool)
        out[self._edges[:, 0], self._edges[:, 1]] = True
        out[self._edges[:, 1], self._edges[:, 0]] = True
        return out

    def to_networkx(self) -> nx.Graph:
        """A new ``networkx.Graph`` with nodes ``0..n-1`` and the same edges."""
        g = nx.Graph()
        g.add_nodes_from(range(self._num_nodes))
        g.add_edges_from(self.edges())
        return g

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_nodes={self._num_nodes}, num_edges={self.num_edges})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeatureGraph):
            return NotImplemented
        if self is other:
            return True
        return self._num_nodes == other._num_nodes and np.array_equal(self._edges, other._edges)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self._num_nodes, self._edges.tobytes()))
        return self._hash

    @functools.cached_property
    def _neighbour_lists(self) -> tuple[tuple[int, ...], ...]:
        """Sorted neighbours of each node."""
        return edge_arrays.neighbour_lists(self._num_nodes, self._edges)

    @functools.cached_property
    def _neighbour_masks(self) -> tuple[int, ...]:
        """Bitmask of the neighbours of each node (bit ``j`` = node ``j``).

        The primitive the set algorithms of
        :mod:`~captum_graphshap.graphs.connected_sets` build on.
        """
        return tuple(
            functools.reduce(operator.or_, (1 << u for u in row), 0)
            for row in self._neighbour_lists
        )

    # -------------------------------------------------------------- distances

    def distances(self) -> npt.NDArray[np.int32]:
        """Hop distances ``(n, n)`` (int32), ``-1`` where unreachable. Cached.

        Uses ``scipy.sparse.csgraph`` when scipy is installed, else a
        bit-parallel breadth-first search from every node at once.
        """
        cached = self._cache.get("distances")
        if cached is None:
            cached = dist.hop_distances(self._num_nodes, self._edges, self._neighbour_lists)
            cached.setflags(write=False)
            self._cache["distances"] = cached
        return cached

    def diameter(self) -> int:
        """Largest finite hop distance (0 for a graph without edges)."""
        if self._num_nodes == 0:
            return 0
        return int(self.distances().max())

    def _ball_mask(self, i: int, k: int) -> int:
        """Bitmask of the nodes at distance ``<= k`` from ``i``."""
        key = ("ball", i, k)
        cached = self._cache.get(key)
        if cached is None:
            cached = dist.ball_mask(self._neighbour_masks, i, k)
            self._cache[key] = cached
        return int(cached)

    def neighbourhood(self, i: int, k: int) -> tuple[int, ...]:
        """Sorted ids of the nodes at hop distance ``<= k`` from ``i`` (``i`` included).

        Args:
            i:
                A node id, ``0 <= i < num_nodes``.
            k:
                The radius, an int ``>= 0``.
        """
        i = check_node(i, "i", self._num_nodes)
        k = check_count(k, "k", minimum=0)
        key = ("neighbourhood", i, k)
        cached = self._cache.get(key)
        if cached is None:
            cached = tuple(bits(self._ball_mask(i, k)))
            self._cache[key] = cached
        return tuple(cached)

    def neighbourhoods(self, k: int) -> Tensor:
        """Boolean ``(n, n)`` tensor whose row ``i`` marks the nodes within ``k`` hops of ``i``.

        Cached per ``k``: the returned tensor is shared, do not modify it
        (``.clone()`` it first if you need to).
        """
        k = check_count(k, "k", minimum=0)
        key = ("neighbourhoods", k)
        cached = self._cache.get(key)
        if cached is None:
            n = self._num_nodes
            if "distances" in self._cache or k >= n:
                d = self.distances()
                rows = (d >= 0) & (d <= k)
            else:
                rows = dist.neighbourhood_rows(n, self._neighbour_lists, k)
            cached = torch.from_numpy(np.ascontiguousarray(rows))
            self._cache[key] = cached
        return cached

    def neighbour_table(self) -> Tensor:
        """Long ``(n, D)`` tensor: row ``i`` lists the neighbours of ``i`` sorted, ``-1`` padded.

        ``D`` is the largest degree (at least 1). Cached: do not modify it.
        """
        cached = self._cache.get("neighbour_table")
        if cached is None:
            cached = torch.from_numpy(edge_arrays.neighbour_table(self._num_nodes, self._edges))
            self._cache["neighbour_table"] = cached
        return cached

    def balls(self, k: int) -> Tensor:
        """Long ``(n, W)`` tensor: row ``i`` holds the sorted ids of ``N_k(i)``, ``-1`` padded.

        ``N_k(i)`` is every node within ``k`` hops of ``i`` (``i`` included);
        ``W`` is the largest ball. Grown a hop at a time for all nodes at once
        (sort and drop repeats per row), so memory is ``O(n W D)``, never
        ``n^2`` bits. Cached per ``k``: do not modify it.
        """
        k = check_count(k, "k", minimum=0)
        key = ("balls", k)
        cached = self._cache.get(key)
        if cached is None:
            cached = dist.ball_table(self.neighbour_table(), self._num_nodes, k)
            self._cache[key] = cached
        return cached

    def ball(self, i: int, k: int) -> Tensor:
        """Long 1-D tensor of the sorted ids of ``N_k(i)`` (``i`` included)."""
        i = check_node(i, "i", self._num_nodes)
        row = self.balls(k)[i]
        return row[row >= 0]

    # -------------------------------------------------------- connected sets

    def connected_sets(
        self,
        roots: Tensor | Sequence[int],
        within: Tensor,
        max_size: int | None = None,
        max_count: int | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Every connected set containing ``roots[g]`` inside the node set ``within[g]``.

        Args:
            roots:
                ``(G,)`` node ids.
            within:
                ``(G, W)`` long, the allowed nodes of each group (``-1`` padded,
                e.g. a row of :meth:`balls`); it must contain the root.
            max_size:
                Only sets of at most this many nodes.
            max_count:
                Raise ``ValueError`` once more than ``max_count`` sets are found
                (over all groups).

        Returns:
            ``(group, members, offsets)``: set ``m`` belongs to group ``group[m]``
            and its sorted node ids are ``members[offsets[m]:offsets[m + 1]]``.
            Each set is enumerated once per group, in the group's local
            coordinates (bit ``p`` = the ``p``-th allowed node), so the work per
            set is a few operations on ``W``-bit integers, never ``n`` bits.
        """
        root_list = [int(r) for r in (roots.tolist() if isinstance(roots, Tensor) else roots)]
        within = torch.as_tensor(within, dtype=torch.long).reshape(len(root_list), -1)
        limit = -1 if max_count is None else check_count(max_count, "max_count", minimum=0)
        size_cap = -1 if max_size is None else check_count(max_size, "max_size", minimum=0)
        return sets.connected_sets_within(self._neighbour_lists, root_list, within, limit, size_cap)

    def all_connected_sets(self, max_count: int | None = None) -> tuple[Tensor, Tensor]:
        """Every non-empty connected node set, as sorted member ids: ``(members, offsets)``.

        Set ``m`` is ``members[offsets[m]:offsets[m + 1]]``; the order is that
        of the enumeration (by smallest node). Memory is one id per member.
        Raises ``ValueError`` beyond ``max_count`` sets.
        """
        limit = check_limit(max_count)
        return sets.all_connected_sets(self._neighbour_masks, self._num_nodes, limit)

    def boundaries(self, members: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor]:
        """The nodes adjacent to each set and outside it: ``(set_index, node)`` pairs.

        Sets are CSR member ids (``members[offsets[m]:offsets[m + 1]]``).
        Pairs come sorted by set, then node; vectorised, in chunks of sets.
        """
        return sets.boundaries(self.neighbour_table(), members, offsets, self._num_nodes)

    def boundary_sizes(self, members: Tensor, offsets: Tensor) -> Tensor:
        """``(M,)`` number of nodes adjacent to each CSR set and outside it."""
        which, _ = self.boundaries(members, offsets)
        return torch.bincount(which, minlength=offsets.shape[0] - 1)

    def _connected_masks(
        self, root: int, allowed: int, max_count: int | None = None, out: list[int] | None = None
    ) -> list[int]:
        """Bitmasks of every connected set containing ``root`` inside ``allowed``.

        See :func:`~captum_graphshap.graphs.connected_sets.connected_masks`.
        """
        return sets.connected_masks(self._neighbour_masks, root, allowed, max_count, out)

    def connected_subsets(self, i: int, k: int, max_count: int | None = None) -> Tensor:
        """Every connected node set containing ``i`` within its ``k``-hop neighbourhood.

        Returns a boolean ``(m, n)`` tensor, one set per row, each exactly
        once, sorted by size and then lexicographically by sorted node ids.
        Cached per ``(i, k)``: the returned tensor is shared, do not modify it.

        Args:
            i:
                The node every set contains.
            k:
                Radius of the neighbourhood the sets must lie in.
            max_count:
                Raise ``ValueError`` (after at most ``max_count + 1`` sets) when
                there are more than ``max_count`` sets. None: no limit.
        """
        i = check_node(i, "i", self._num_nodes)
        k = check_count(k, "k", minimum=0)
        limit = check_limit(max_count)
        key = ("connected_subsets", i, k)
        cached = self._cache.get(key)
        if cached is None:
            try:
                masks = self._connected_masks(i, self._ball_mask(i, k), limit)
            except sets.TooManySets:
                masks = None
            if masks is not None:
                cached = sorted_rows(masks, self._num_nodes)
                self._cache[key] = cached
        if cached is None or (limit is not None and cached.shape[0] > limit):
            raise ValueError(
                f"more than {limit:,} connected subsets contain node {i} within its {k}-hop "
                "neighbourhood; use a smaller k or a coarser graph (group features with "
                "feature_mask)."
            )
        return cached

    def all_connected_subsets(self, max_count: int | None = None) -> Tensor:
        """Every non-empty connected node set of the graph.

        Returns a boolean ``(m, n)`` tensor, one set per row, each exactly
        once, sorted by size and then lexicographically by sorted node ids.
        Cached: the returned tensor is shared, do not modify it.

        Args:
            max_count:
                Raise ``ValueError`` (after at most ``max_count + 1`` sets) when
                there are more than ``max_count`` sets. None: no limit, which can
                take forever on dense graphs or large grids.
        """
        limit = check_limit(max_count)
        cached = self._cache.get("all_connected_subsets")
        if cached is None:
            try:
                masks = sets.all_connected_masks(self._neighbour_masks, self._num_nodes, limit)
            except sets.TooManySets:
                pass
            else:
                cached = sorted_rows(masks, self._num_nodes)
                self._cache["all_connected_subsets"] = cached
        if cached is None or (limit is not None and cached.shape[0] > limit):
            raise ValueError(
                f"the graph has more than {limit:,} connected subsets; use a coarser graph "
                "(group features with feature_mask, e.g. patches or superpixels)."
            )
        return cached

    # ------------------------------------------------------------ node sets

    def _mask_of(self, nodes: NodesLike, name: str = "nodes") -> int:
        """Bitmask of a node set given as ids or as a boolean mask of length n."""
        return nodes_to_mask(nodes, self._num_nodes, name)

    def _components_of_mask(self, mask: int) -> list[int]:
        """Connected components of the subgraph induced by bitmask ``mask``.

        See :func:`~captum_graphshap.graphs.connected_sets.components_of_mask`.
        """
        return sets.components_of_mask(self._neighbour_masks, mask)

    def components(self, nodes: NodesLike) -> list[tuple[int, ...]]:
        """Connected components of the subgraph induced by ``nodes``.

        Args:
            nodes:
                Node ids, or a boolean mask of length ``num_nodes``.

        Returns:
            One sorted tuple of node ids per component, ordered by smallest node.
        """
        return [tuple(bits(part)) for part in self._components_of_mask(self._mask_of(nodes))]

    def boundary_size(self, nodes: NodesLike) -> int:
        """Number of nodes outside ``nodes`` with a neighbour in ``nodes``.

        Args:
            nodes:
                Node ids, or a boolean mask of length ``num_nodes``.
        """
        return sets.boundary_of_mask(self._neighbour_masks, self._mask_of(nodes)).bit_count()

    # -------------------------------------------------------------- helpers

    def hierarchy(self) -> Hierarchy:
        """A :class:`~captum_graphshap.Hierarchy` over the nodes: balanced halves of the ids.

        Right for graphs whose ids follow a sequence (words, segments);
        :class:`~captum_graphshap.GridGraph` and
        :class:`~captum_graphshap.SuperpixelGraph` split by geometry and colour.
        """
        return Hierarchy.balanced(self._num_nodes)

    def __copy__(self) -> FeatureGraph:
        # Immutable: a copy may share everything, caches included.
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FeatureGraph:
        return self
