"""Feature graphs: undirected simple graphs whose nodes are feature ids.

The nodes of a :class:`FeatureGraph` are the ids ``0..n-1`` of a Captum
``feature_mask``. Graph-structured attribution methods (Myerson, L-/C-Shapley)
only ever ask the graph for a few things: hop distances, k-hop neighbourhoods,
connected node sets and the connected components of a node set. All of them
are cached on the graph, and graphs compare and hash by structure, so the same
graph explained twice costs its enumeration once.

Node sets are handled internally as Python ``int`` bitmasks (bit ``i`` is node
``i``): union, intersection and "lowest member" are single C-level operations
on arbitrarily many nodes, which is what makes the enumeration of connected
sets fast in pure Python.
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

__all__ = ["FeatureGraph"]

#: Anything :meth:`FeatureGraph.from_adjacency` accepts.
MatrixLike = np.ndarray | Tensor | Sequence[Sequence[Any]]
#: A node set: node ids, or a boolean membership mask of length ``num_nodes``.
NodesLike = Iterable[int] | np.ndarray | Tensor

_EdgeArray = npt.NDArray[np.int64]


class FeatureGraph:
    """An undirected simple graph on the feature ids ``0..num_nodes-1``.

    Build one with :meth:`from_adjacency`, :meth:`from_networkx`,
    :meth:`from_edges` or :meth:`from_feature_mask`, or use a ready-made
    :class:`~captum_graphshap.graphs.LineGraph`,
    :class:`~captum_graphshap.graphs.GridGraph` or
    :class:`~captum_graphshap.graphs.SuperpixelGraph`.

    Graphs are immutable: equality and hashing use ``(num_nodes, edge set)``
    only (not the class), so they can be cache keys. Every derived quantity
    is computed once and cached; the arrays and tensors returned by the
    cached methods are shared and must be treated as read-only.

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
        n = len(neighbours)
        pairs = [(u, int(v)) for u, row in enumerate(neighbours) for v in row]
        edges = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        _check_edge_range(edges, n, "neighbours")
        self._setup(n, edges)

    # ------------------------------------------------------------------ set-up

    def _setup(self, num_nodes: int, edges: _EdgeArray, *, canonical: bool = False) -> None:
        """Store the graph; ``edges`` is an ``(E, 2)`` array of in-range ids.

        With ``canonical=True`` the caller promises ``u < v`` in every row,
        rows unique and sorted, which lets the vectorised subclasses skip the
        ``O(E log E)`` canonicalisation.
        """
        if not canonical:
            edges = _canonical_edges(edges, num_nodes)
        edges.setflags(write=False)
        self._num_nodes = int(num_nodes)
        self._edges = edges
        self._cache: dict[Hashable, Any] = {}
        self._hash: int | None = None

    @classmethod
    def _from_edge_array(cls, num_nodes: int, edges: _EdgeArray) -> FeatureGraph:
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
        array = _as_numpy(matrix, "matrix")
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
        return cls._from_edge_array(array.shape[0], edges)

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
        return cls._from_edge_array(len(order), edges)

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
        n = _check_count(num_nodes, "num_nodes", minimum=0)
        if isinstance(edges, (Tensor, np.ndarray)):
            raw = _as_numpy(edges, "edges")
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
        _check_edge_range(array, n, "edges")
        return cls._from_edge_array(n, array)

    @classmethod
    def from_feature_mask(cls, mask: Tensor | np.ndarray) -> FeatureGraph:
        """Adjacency of the regions of a feature mask.

        See :func:`~captum_graphshap.graphs.graph_from_feature_mask`.
        """
        from .standard import graph_from_feature_mask

        return graph_from_feature_mask(mask)

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
        n = self._num_nodes
        both = np.concatenate([self._edges, self._edges[:, ::-1]])
        both = both[np.lexsort((both[:, 1], both[:, 0]))]
        counts = np.bincount(both[:, 0], minlength=n)
        targets = both[:, 1].tolist()
        out = []
        start = 0
        for count in counts.tolist():
            out.append(tuple(targets[start : start + count]))
            start += count
        return tuple(out)

    @functools.cached_property
    def _neighbour_masks(self) -> tuple[int, ...]:
        """Bitmask of the neighbours of each node (bit ``j`` = node ``j``).

        The primitive the set algorithms (and other internal modules, e.g.
        the Myerson plan's boundary sizes) build on.
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
            if self._num_nodes == 0:
                cached = np.zeros((0, 0), dtype=np.int32)
            elif _has_scipy():
                cached = _distances_scipy(self)
            else:
                cached = _distances_bitsets(self)
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
            nbr = self._neighbour_masks
            ball = frontier = 1 << i
            for _ in range(k):
                reach = 0
                for node in _bits(frontier):
                    reach |= nbr[node]
                frontier = reach & ~ball
                if not frontier:
                    break
                ball |= frontier
            cached = ball
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
        i = self._check_node(i, "i")
        k = _check_count(k, "k", minimum=0)
        key = ("neighbourhood", i, k)
        cached = self._cache.get(key)
        if cached is None:
            cached = tuple(_bits(self._ball_mask(i, k)))
            self._cache[key] = cached
        return tuple(cached)

    def neighbourhoods(self, k: int) -> Tensor:
        """Boolean ``(n, n)`` tensor whose row ``i`` marks the nodes within ``k`` hops of ``i``.

        Cached per ``k``: the returned tensor is shared, do not modify it
        (``.clone()`` it first if you need to).
        """
        k = _check_count(k, "k", minimum=0)
        key = ("neighbourhoods", k)
        cached = self._cache.get(key)
        if cached is None:
            n = self._num_nodes
            if "distances" in self._cache or k >= n:
                d = self.distances()
                rows = (d >= 0) & (d <= k)
            else:
                # k rounds of "OR in your neighbours' balls" grow all n balls at
                # once without the O(n^2)-int distance matrix.
                balls = [1 << v for v in range(n)]
                lists = self._neighbour_lists
                for _ in range(k):
                    grown = [
                        functools.reduce(operator.or_, (balls[u] for u in lists[v]), balls[v])
                        for v in range(n)
                    ]
                    if grown == balls:
                        break
                    balls = grown
                rows = _masks_to_rows(balls, n)
            cached = torch.from_numpy(np.ascontiguousarray(rows))
            self._cache[key] = cached
        return cached

    def neighbour_table(self) -> Tensor:
        """Long ``(n, D)`` tensor: row ``i`` lists the neighbours of ``i`` sorted, ``-1`` padded.

        ``D`` is the largest degree (at least 1). Cached: do not modify it.
        """
        cached = self._cache.get("neighbour_table")
        if cached is None:
            n = self._num_nodes
            both = np.concatenate([self._edges, self._edges[:, ::-1]])
            both = both[np.lexsort((both[:, 1], both[:, 0]))]
            counts = np.bincount(both[:, 0], minlength=n) if n else np.zeros(0, np.int64)
            width = max(int(counts.max()) if n else 0, 1)
            table = np.full((n, width), -1, dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if n else counts
            slot = np.arange(both.shape[0]) - np.repeat(starts, counts)
            table[both[:, 0], slot] = both[:, 1]
            cached = torch.from_numpy(table)
            self._cache["neighbour_table"] = cached
        return cached

    def balls(self, k: int) -> Tensor:
        """Long ``(n, W)`` tensor: row ``i`` holds the sorted ids of ``N_k(i)``, ``-1`` padded.

        ``N_k(i)`` is every node within ``k`` hops of ``i`` (``i`` included);
        ``W`` is the largest ball. Grown a hop at a time for all nodes at once
        (sort and drop repeats per row), so memory is ``O(n W D)``, never
        ``n^2`` bits. Cached per ``k``: do not modify it.
        """
        k = _check_count(k, "k", minimum=0)
        key = ("balls", k)
        cached = self._cache.get(key)
        if cached is None:
            n = self._num_nodes
            table = self.neighbour_table()
            pad = n  # sorts after every id
            ball = torch.arange(n).reshape(n, 1)
            for _ in range(k):
                safe = ball.clamp(max=max(n - 1, 0))
                reach = torch.where((ball < pad)[:, :, None], table[safe], -1).reshape(n, -1)
                grown = torch.cat([ball, torch.where(reach >= 0, reach, pad)], dim=1)
                grown = _dedup_sorted_rows(grown, pad)
                if grown.shape == ball.shape and bool((grown == ball).all()):
                    break
                ball = grown
            cached = torch.where(ball < pad, ball, -1)
            self._cache[key] = cached
        return cached

    def ball(self, i: int, k: int) -> Tensor:
        """Long 1-D tensor of the sorted ids of ``N_k(i)`` (``i`` included)."""
        i = self._check_node(i, "i")
        row = self.balls(k)[i]
        return row[row >= 0]

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
        limit = -1 if max_count is None else _check_count(max_count, "max_count", minimum=0)
        size_cap = -1 if max_size is None else _check_count(max_size, "max_size", minimum=0)
        lists = self._neighbour_lists
        groups, members, lengths = [], [], []
        found = 0
        for g, (root, row) in enumerate(zip(root_list, within.tolist())):
            ids = [u for u in row if u >= 0]
            position = {u: p for p, u in enumerate(ids)}
            if root not in position:
                raise ValueError(f"within[{g}] must contain its root {root}.")
            local = [
                functools.reduce(
                    operator.or_, (1 << position[v] for v in lists[u] if v in position), 0
                )
                for u in ids
            ]
            masks: list[int] = []
            remaining = -1 if limit < 0 else limit - found
            try:
                _enumerate_connected(
                    local, position[root], (1 << len(ids)) - 1, masks, remaining, size_cap
                )
            except _TooManySets:
                raise ValueError(
                    f"more than {limit:,} connected subsets in the allowed node sets."
                ) from None
            found += len(masks)
            rows, local_ids = _mask_members(masks, len(ids))
            members.append(torch.tensor(ids, dtype=torch.long)[local_ids])
            lengths.append(torch.bincount(rows, minlength=len(masks)))
            groups.append(torch.full((len(masks),), g, dtype=torch.long))
        return _as_csr(groups, members, lengths)

    def all_connected_sets(self, max_count: int | None = None) -> tuple[Tensor, Tensor]:
        """Every non-empty connected node set, as sorted member ids: ``(members, offsets)``.

        Set ``m`` is ``members[offsets[m]:offsets[m + 1]]``; the order is that
        of the enumeration (by smallest node). Memory is one id per member.
        Raises ``ValueError`` beyond ``max_count`` sets.
        """
        limit = _check_limit(max_count)
        n = self._num_nodes
        full = (1 << n) - 1
        nbr = self._neighbour_masks
        members, lengths = [], []
        found = 0
        for root in range(n):
            masks: list[int] = []
            remaining = -1 if limit is None else limit - found
            try:
                _enumerate_connected(nbr, root, full & ~((1 << root) - 1), masks, remaining)
            except _TooManySets:
                raise ValueError(
                    f"the graph has more than {limit:,} connected subsets; use a coarser graph "
                    "(group features with feature_mask, e.g. patches or superpixels)."
                ) from None
            found += len(masks)
            rows, ids = _mask_members(masks, n)
            members.append(ids)
            lengths.append(torch.bincount(rows, minlength=len(masks)))
        _, flat, offsets = _as_csr([], members, lengths)
        return flat, offsets

    def boundaries(self, members: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor]:
        """The nodes adjacent to each set and outside it: ``(set_index, node)`` pairs.

        Sets are CSR member ids (``members[offsets[m]:offsets[m + 1]]``).
        Pairs come sorted by set, then node; vectorised, in chunks of sets.
        """
        n = max(self._num_nodes, 1)
        table = self.neighbour_table()
        count = offsets.shape[0] - 1
        lengths = offsets[1:] - offsets[:-1]
        set_out, node_out = [], []
        step_members = max(1, 2**22 // table.shape[1])
        start = 0
        while start < count:
            stop = int(torch.searchsorted(offsets, offsets[start] + step_members, right=True))
            stop = min(max(stop - 1, start + 1), count)
            lo, hi = int(offsets[start]), int(offsets[stop])
            chunk = members[lo:hi]
            row = torch.repeat_interleave(torch.arange(start, stop), lengths[start:stop])
            reach = table[chunk]  # (P, D)
            # keys set * n + node, doubled: the members' odd, their
            # neighbours' even, so after sorting a key is a boundary node
            # exactly when its run has no odd entry (odd sorts last)
            keys = (row[:, None] * n + reach)[reach >= 0].numpy() * 2
            inside = (row * n + chunk).numpy() * 2 + 1
            ordered = np.sort(np.concatenate([keys, inside]))
            last = np.ones(ordered.shape[0], dtype=bool)
            last[:-1] = (ordered[1:] >> 1) != (ordered[:-1] >> 1)
            found = torch.from_numpy(ordered[last & (ordered % 2 == 0)] >> 1)
            set_out.append(found // n)
            node_out.append(found % n)
            start = stop
        if not set_out:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        return torch.cat(set_out), torch.cat(node_out)

    def boundary_sizes(self, members: Tensor, offsets: Tensor) -> Tensor:
        """``(M,)`` number of nodes adjacent to each CSR set and outside it."""
        which, _ = self.boundaries(members, offsets)
        return torch.bincount(which, minlength=offsets.shape[0] - 1)

    # -------------------------------------------------------- connected sets

    def _connected_masks(
        self, root: int, allowed: int, max_count: int | None = None, out: list[int] | None = None
    ) -> list[int]:
        """Bitmasks of every connected set containing ``root`` inside ``allowed``.

        Each set is produced once, in no particular order, appended to
        ``out`` (a new list by default), which is returned. When ``out``
        would grow beyond ``max_count`` entries the enumeration stops and
        raises :class:`_TooManySets`, a ``ValueError``.
        """
        out = [] if out is None else out
        limit = max_count if max_count is not None else -1
        _enumerate_connected(self._neighbour_masks, root, allowed, out, limit)
        return out

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
        i = self._check_node(i, "i")
        k = _check_count(k, "k", minimum=0)
        limit = _check_limit(max_count)
        key = ("connected_subsets", i, k)
        cached = self._cache.get(key)
        if cached is None:
            try:
                masks = self._connected_masks(i, self._ball_mask(i, k), limit)
            except _TooManySets:
                masks = None
            if masks is not None:
                cached = _sorted_rows(masks, self._num_nodes)
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
        limit = _check_limit(max_count)
        cached = self._cache.get("all_connected_subsets")
        if cached is None:
            n = self._num_nodes
            full = (1 << n) - 1
            masks: list[int] = []
            try:
                for root in range(n):
                    # Sets whose smallest node is root: each set counted once.
                    above = full & ~((1 << root) - 1)
                    self._connected_masks(root, above, limit, masks)
            except _TooManySets:
                pass
            else:
                cached = _sorted_rows(masks, n)
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
        if isinstance(nodes, (Tensor, np.ndarray)):
            array = _as_numpy(nodes, name)
        else:
            array = np.asarray(list(nodes))
        n = self._num_nodes
        if array.dtype == np.bool_:
            if array.shape != (n,):
                raise ValueError(
                    f"{name} as a boolean mask must have shape ({n},), got {tuple(array.shape)}."
                )
            packed = np.packbits(array, bitorder="little")
            return int.from_bytes(packed.tobytes(), "little")
        if array.size == 0:
            return 0
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise TypeError(
                f"{name} must be node ids (ints) or a boolean mask of length {n}, got an array "
                f"of dtype {array.dtype} and shape {tuple(array.shape)}."
            )
        if array.min() < 0 or array.max() >= n:
            bad = array[(array < 0) | (array >= n)][:5].tolist()
            raise ValueError(f"{name} must be node ids in 0..{n - 1}, got e.g. {bad}.")
        mask = 0
        for node in set(array.tolist()):
            mask |= 1 << node
        return mask

    def _components_of_mask(self, mask: int) -> list[int]:
        """Connected components of the subgraph induced by bitmask ``mask``.

        Returns one bitmask per component, ordered by smallest node. Each
        node is expanded once, so the cost is linear in the set's size.
        """
        nbr = self._neighbour_masks
        out = []
        while mask:
            component = frontier = mask & -mask
            while frontier:
                reach = 0
                while frontier:
                    low = frontier & -frontier
                    reach |= nbr[low.bit_length() - 1]
                    frontier ^= low
                frontier = reach & mask & ~component
                component |= frontier
            out.append(component)
            mask &= ~component
        return out

    def components(self, nodes: NodesLike) -> list[tuple[int, ...]]:
        """Connected components of the subgraph induced by ``nodes``.

        Args:
            nodes:
                Node ids, or a boolean mask of length ``num_nodes``.

        Returns:
            One sorted tuple of node ids per component, ordered by smallest node.
        """
        return [tuple(_bits(part)) for part in self._components_of_mask(self._mask_of(nodes))]

    def _boundary_of_mask(self, mask: int) -> int:
        """Bitmask of the nodes outside ``mask`` adjacent to it."""
        nbr = self._neighbour_masks
        frontier = 0
        for node in _bits(mask):
            frontier |= nbr[node]
        return frontier & ~mask

    def boundary_size(self, nodes: NodesLike) -> int:
        """Number of nodes outside ``nodes`` with a neighbour in ``nodes``.

        Args:
            nodes:
                Node ids, or a boolean mask of length ``num_nodes``.
        """
        return self._boundary_of_mask(self._mask_of(nodes)).bit_count()

    # -------------------------------------------------------------- helpers

    def _check_node(self, i: Any, name: str) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{name} must be a node id (an int), got {type(i).__name__}.")
        if not 0 <= i < self._num_nodes:
            raise ValueError(f"{name} must be a node id in 0..{self._num_nodes - 1}, got {int(i)}.")
        return int(i)

    def __copy__(self) -> FeatureGraph:
        # Immutable: a copy may share everything, caches included.
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FeatureGraph:
        return self


class _TooManySets(ValueError):
    """The enumeration of connected sets passed its ``max_count``."""


def _enumerate_connected(
    nbr: Sequence[int], root: int, allowed: int, out: list[int], limit: int, max_size: int = -1
) -> None:
    """Append every connected set containing ``root`` within ``allowed`` to ``out``.

    Iterative form of the reverse-search recursion ``rec(S, C, F)``: emit
    ``S``; for each candidate ``v`` of ``C`` (nodes adjacent to ``S``, allowed,
    not forbidden) recurse on ``S + v`` with ``v``'s new neighbours added to
    the candidates, then forbid ``v``, so that the sets containing ``v`` are
    produced only below that branch. Explicit stacks because a set (and so the
    recursion depth) can have as many nodes as the graph. ``limit < 0``: none.
    ``max_size >= 0``: only sets of at most that many nodes.
    """
    start = 1 << root
    append = out.append
    if max_size == 0:
        return
    append(start)
    if 0 <= limit < len(out):
        raise _TooManySets(f"more than {limit:,} connected subsets.")
    if max_size == 1:
        return
    sets = [start]
    candidates = [nbr[root] & allowed & ~start]
    forbidden = [0]
    if not candidates[0]:
        return
    check = limit >= 0
    while sets:
        c = candidates[-1]
        if not c:
            sets.pop()
            candidates.pop()
            forbidden.pop()
            continue
        v = c & -c
        c ^= v
        candidates[-1] = c
        s = sets[-1] | v
        f = forbidden[-1]
        forbidden[-1] = f | v
        append(s)
        if check and len(out) > limit:
            raise _TooManySets(f"more than {limit:,} connected subsets.")
        child = (c | nbr[v.bit_length() - 1]) & allowed & ~s & ~f
        if child and (max_size < 0 or s.bit_count() < max_size):
            sets.append(s)
            candidates.append(child)
            forbidden.append(f)


def _dedup_sorted_rows(rows: Tensor, pad: int) -> Tensor:
    """Sort each row, replace repeats by ``pad``, and drop all-``pad`` columns."""
    rows, _ = torch.sort(rows, dim=1)
    repeat = torch.zeros_like(rows, dtype=torch.bool)
    repeat[:, 1:] = rows[:, 1:] == rows[:, :-1]
    rows = torch.where(repeat, pad, rows)
    rows, _ = torch.sort(rows, dim=1)
    width = max(int((rows < pad).sum(dim=1).max()) if rows.shape[0] else 1, 1)
    return rows[:, :width].contiguous()


#: Masks converted to member ids at once (bounds the bool buffer).
_MASK_CHUNK = 2**16


def _mask_members(masks: Sequence[int], width: int) -> tuple[Tensor, Tensor]:
    """``(row, bit)`` of every set bit of ``width``-bit masks, row-major (bits ascending)."""
    rows, bits = [], []
    for start in range(0, len(masks), _MASK_CHUNK):
        part = masks[start : start + _MASK_CHUNK]
        dense: np.ndarray
        if width <= 63:
            packed = np.asarray(part, dtype="<u8").view(np.uint8).reshape(len(part), 8)
            dense = np.unpackbits(packed, axis=1, count=max(width, 1), bitorder="little")
        else:
            dense = _unpack(_pack(part, width), width)
        row, bit = np.nonzero(dense)
        rows.append(torch.from_numpy(row.astype(np.int64) + start))
        bits.append(torch.from_numpy(bit.astype(np.int64)))
    if not rows:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(rows), torch.cat(bits)


def _as_csr(
    groups: list[Tensor], members: list[Tensor], lengths: list[Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """Concatenate per-group CSR pieces: ``(group, members, offsets)``."""
    empty = torch.zeros(0, dtype=torch.long)
    length = torch.cat(lengths) if lengths else empty
    offsets = torch.zeros(length.shape[0] + 1, dtype=torch.long)
    offsets[1:] = length.cumsum(0)
    return (
        torch.cat(groups) if groups else empty,
        torch.cat(members) if members else empty,
        offsets,
    )


def _bits(mask: int) -> list[int]:
    """Ids of the set bits of ``mask``, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _pack(masks: Sequence[int], n: int) -> npt.NDArray[np.uint8]:
    """Bitmasks as little-endian packed rows ``(len(masks), ceil(n / 8))``."""
    width = max((n + 7) // 8, 1)
    buffer = b"".join(mask.to_bytes(width, "little") for mask in masks)
    return np.frombuffer(buffer, dtype=np.uint8).reshape(len(masks), width)


def _unpack(packed: npt.NDArray[np.uint8], n: int) -> npt.NDArray[np.bool_]:
    # unpackbits yields 0/1 bytes, which are valid bools: view, don't copy.
    return np.unpackbits(packed, axis=1, count=n, bitorder="little").view(np.bool_)


def _masks_to_rows(masks: Sequence[int], n: int) -> npt.NDArray[np.bool_]:
    """Boolean ``(len(masks), n)`` rows of bitmasks, via one packed buffer."""
    return _unpack(_pack(masks, n), n)


_REVERSED_BYTE = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint8)
_POPCOUNT_BYTE = np.array([b.bit_count() for b in range(256)], dtype=np.int64)


def _sorted_rows(masks: Sequence[int], n: int) -> Tensor:
    """Bitmasks as a bool ``(m, n)`` tensor, sorted by size then lexicographically.

    Among sets of one size, the lexicographically smaller sorted id list is
    the one holding the lowest node where the two differ. With the bits of
    each byte reversed, the packed rows read big-endian (node 0 most
    significant), so that order is "descending 64-bit words", i.e. ascending
    ``~word``. The sort keys only cover the bytes of nodes that occur, which
    keeps the neighbourhoods of big graphs cheap, and rows are unpacked once,
    already sorted.
    """
    packed = _pack(masks, n)
    if packed.shape[0] > 1:
        used = np.flatnonzero(packed.any(axis=0))
        span = packed[:, used[0] : used[-1] + 1]
        sizes = _POPCOUNT_BYTE[span].sum(axis=1)
        big = _REVERSED_BYTE[span]
        big = np.pad(big, ((0, 0), (0, -big.shape[1] % 8)))
        words = np.ascontiguousarray(big).view(">u8")
        keys = [~words[:, j] for j in range(words.shape[1] - 1, -1, -1)]
        keys.append(sizes)
        packed = packed[np.lexsort(keys)]
    return torch.from_numpy(_unpack(packed, n))


def _canonical_edges(edges: _EdgeArray, n: int) -> _EdgeArray:
    """Rows ``u < v``, no self loops, unique, sorted."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    low = np.minimum(edges[:, 0], edges[:, 1])
    high = np.maximum(edges[:, 0], edges[:, 1])
    codes = np.unique(low * max(n, 1) + high)
    return np.stack([codes // max(n, 1), codes % max(n, 1)], axis=1).astype(np.int64)


def _check_edge_range(edges: _EdgeArray, n: int, name: str) -> None:
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        bad = edges[((edges < 0) | (edges >= n)).any(axis=1)][0].tolist()
        raise ValueError(
            f"{name} must only use node ids in 0..{n - 1} (num_nodes = {n}), got {tuple(bad)}."
        )


def _check_count(value: Any, name: str, minimum: int) -> int:
    """An int ``>= minimum`` (numpy ints accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {int(value)}.")
    return int(value)


def _check_limit(max_count: Any) -> int | None:
    return None if max_count is None else _check_count(max_count, "max_count", minimum=0)


def _as_numpy(value: Any, name: str) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a rectangular array (numpy array, torch tensor or nested list)."
        ) from None


@functools.cache
def _has_scipy() -> bool:
    try:
        import scipy.sparse.csgraph  # noqa: F401
    except ImportError:
        return False
    return True


def _distances_scipy(graph: FeatureGraph) -> npt.NDArray[np.int32]:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = graph.num_nodes
    e = graph._edges
    matrix = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
    d: npt.NDArray[np.float64] = shortest_path(matrix, method="D", directed=False, unweighted=True)
    d[np.isinf(d)] = -1
    return d.astype(np.int32)


def _distances_bitsets(graph: FeatureGraph) -> npt.NDArray[np.int32]:
    """All-pairs BFS, one level for all sources at a time.

    ``balls[v]`` is the bitmask of the nodes within the current radius of
    ``v``; growing all balls by one hop is one big-int OR per edge, and the
    bits new at a level are written into row ``v`` of the result.
    """
    n = graph.num_nodes
    out = np.full((n, n), -1, dtype=np.int32)
    np.fill_diagonal(out, 0)
    lists = graph._neighbour_lists
    balls = [1 << v for v in range(n)]
    width = max((n + 7) // 8, 1)
    level = 0
    while True:
        level += 1
        grown = [
            functools.reduce(operator.or_, (balls[u] for u in lists[v]), balls[v]) for v in range(n)
        ]
        changed = False
        for v in range(n):
            new = grown[v] & ~balls[v]
            if new:
                changed = True
                bits = np.unpackbits(
                    np.frombuffer(new.to_bytes(width, "little"), dtype=np.uint8),
                    count=n,
                    bitorder="little",
                ).astype(bool)
                out[v, bits] = level
        if not changed:
            return out
        balls = grown
