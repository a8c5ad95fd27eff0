"""Feature hierarchies: rooted trees whose leaves are the feature ids, each once.

A :class:`Hierarchy` is the structure of the Owen and Winter values
(:class:`~captum_graphshap.OwenValue`): features cooperate first within
their node, nodes within their parent. Build one from nested lists
(:meth:`Hierarchy.from_nested`), a scipy linkage matrix
(:meth:`Hierarchy.from_linkage`), a background set (:meth:`Hierarchy.from_background`,
SHAP's ``maskers.Partition(clustering="correlation")``), balanced contiguous
splits (:meth:`Hierarchy.balanced`), or any graph's ``.hierarchy()``.

Nodes are numbered in pre-order (root 0); each node's leaves are one
contiguous run of :attr:`Hierarchy.leaves`, so a union of nodes is a union of
intervals of that order, which is how coalition plans store it. A node with
one child says nothing (the Winter value does not change) and is dropped.
Every constructor validates: a missing, repeated, negative or non-integer
id, or an empty node, is a ``ValueError``/``TypeError`` naming ``hierarchy``
and the ids, and trees deeper than :data:`MAX_DEPTH` are refused with their
depth.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ._validation import as_numpy, check_count

__all__ = ["MAX_DEPTH", "Hierarchy", "balanced_nested", "parse_nested"]

#: Deepest tree accepted: each coalition of a plan is a union of up to one node
#: set per level, so a chain thousands of levels deep (single linkage on
#: nearly collinear data) would make every coalition a long list; rebalance it.
MAX_DEPTH = 512

#: a leaf id, or a list/tuple of nested nodes
Nested = Any


class Hierarchy:
    """A rooted tree over the feature ids ``0..d-1`` (its leaves, each once).

    Args:
        nested: nested lists or tuples of feature ids, e.g.
            ``[[0, 1, 2], [[3, 4], [5, 6]]]``: each list is a node, each int a leaf.
        num_features: ``d``; by default one more than the largest id. Every id
            ``0..d-1`` must occur exactly once.

    Example:
        >>> from captum_graphshap import Hierarchy
        >>> h = Hierarchy.from_nested([[0, 1], [2, [3, 4]]])
        >>> h.leaves, h.depth, h.nodes[:3]
        ((0, 1, 2, 3, 4), 3, ((0, 1, 2, 3, 4), (0, 1), (0,)))
    """

    def __init__(self, nested: Nested, num_features: int | None = None) -> None:
        parent, leaf_id = parse_nested(nested)
        self._setup(parent, leaf_id, num_features)

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_nested(cls, nested: Nested, num_features: int | None = None) -> Hierarchy:
        """The hierarchy of nested lists or tuples of feature ids (see the class)."""
        if isinstance(nested, Hierarchy):
            if num_features is not None:
                nested.check_features(num_features)
            return nested
        return cls(nested, num_features)

    @classmethod
    def balanced(cls, ids: int | Sequence[int], arity: int = 2) -> Hierarchy:
        """Balanced contiguous splits of ``ids`` (or of ``range(ids)``) into ``arity`` parts."""
        arity = check_count(arity, "arity", minimum=2)
        order = list(range(ids)) if isinstance(ids, (int, np.integer)) else list(ids)
        if not order:
            raise ValueError("hierarchy: balanced() needs at least one feature id.")
        return cls(balanced_nested(order, arity))

    @classmethod
    def flat(cls, d: int) -> Hierarchy:
        """Every feature directly under the root: the Winter value is the Shapley value."""
        d = check_count(d, "d", minimum=1)
        return cls(list(range(d)))

    @classmethod
    def from_linkage(cls, linkage: Any) -> Hierarchy:
        """The binary tree of a scipy linkage matrix ``Z`` (``(d - 1, 4)``).

        Row ``t`` merges clusters ``Z[t, 0]`` and ``Z[t, 1]`` into cluster
        ``d + t``; clusters below ``d`` are the feature ids. This is the tree
        SHAP's ``PartitionExplainer`` walks for the same ``clustering=Z``.
        """
        z = as_numpy(linkage, "linkage")
        if z.ndim != 2 or z.shape[1] < 2:
            raise ValueError(
                f"hierarchy: a linkage matrix is (d - 1, 4) (scipy.cluster.hierarchy), got "
                f"shape {tuple(z.shape)}."
            )
        d = z.shape[0] + 1
        pairs = z[:, :2]
        if not np.all(np.isfinite(pairs)) or np.any(pairs != np.round(pairs)):
            raise ValueError("hierarchy: the first two columns of a linkage hold cluster ids.")
        pairs = pairs.astype(np.int64)
        if pairs.size and (
            pairs.min() < 0 or bool((pairs >= (d + np.arange(d - 1))[:, None]).any())
        ):
            raise ValueError(
                "hierarchy: linkage row t may only merge clusters below d + t (the features "
                f"0..{d - 1} and earlier merges)."
            )
        nested: dict[int, Any] = {}
        for t, (a, b) in enumerate(pairs.tolist()):
            nested[d + t] = [nested.pop(a, a), nested.pop(b, b)]
        root = nested.pop(2 * d - 2, 0) if d > 1 else 0
        return cls(root, num_features=d)

    @classmethod
    def from_background(cls, data: Any, metric: str = "correlation") -> Hierarchy:
        """Single-linkage clustering of the features of a background set ``(B, d)``.

        As SHAP's ``maskers.Partition(data, clustering="correlation")`` (its
        ``utils.hclust``): the distance of two features is ``1 - corr`` over
        the rows (``metric="correlation"``), or ``1 - |cos|``
        (``metric="cosine"``), and the tree is single linkage (the minimum
        spanning tree's edges merged shortest first). A constant feature is
        uncorrelated with every other (distance 1). SHAP adds unseeded noise of
        scale 1e-8 to the data first; this does not, so it is deterministic and
        equal distances may merge in another order than SHAP's.
        """
        x = as_numpy(data, "data").astype(np.float64)
        if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
            raise ValueError(
                f"data must be a (B, d) background set with B >= 2 rows, got shape "
                f"{tuple(x.shape)}."
            )
        bad = ~np.isfinite(x)
        if bad.any():
            rows, columns = np.nonzero(bad)
            raise ValueError(
                f"data has {int(bad.sum())} NaN or infinite entries (first at row "
                f"{int(rows[0])}, feature {int(columns[0])}); correlations of such data are "
                "undefined. Drop or impute those rows first."
            )
        if metric not in ("correlation", "cosine"):
            raise ValueError(f"metric must be 'correlation' or 'cosine', got {metric!r}.")
        if metric == "correlation":
            x = x - x.mean(axis=0)
        norm = np.linalg.norm(x, axis=0)
        unit = np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)
        distance = 1.0 - unit.T @ unit
        if metric == "cosine":
            distance = 1.0 - np.abs(unit.T @ unit)
        return cls.from_linkage(_single_linkage(np.clip(distance, 0.0, 2.0)))

    # ------------------------------------------------------------------ set-up

    def _setup(
        self, parent: npt.NDArray[np.int64], leaf_id: npt.NDArray[np.int64], d: int | None
    ) -> None:
        ids = leaf_id[leaf_id >= 0]
        d = int(ids.max()) + 1 if d is None else check_count(d, "num_features", minimum=1)
        _check_ids(ids, d)
        n = parent.shape[0]
        counts = np.bincount(parent[1:], minlength=n)
        level = np.zeros(n, dtype=np.int64)
        for node in range(1, n):  # pre-order: a parent comes before its children
            level[node] = level[parent[node]] + 1
        size = np.where(leaf_id >= 0, 1, 0)
        for node in range(n - 1, 0, -1):
            size[parent[node]] += size[node]
        start = np.zeros(n, dtype=np.int64)
        cursor = np.zeros(n, dtype=np.int64)
        for node in range(1, n):
            p = parent[node]
            start[node] = start[p] + cursor[p]
            cursor[p] += size[node]
        self.num_features = d
        self.parent = parent
        self.leaf_id = leaf_id
        self.num_children = counts
        self.level = level
        self.start = start
        self.size = size
        self.order = leaf_id[leaf_id >= 0]  # pre-order visits leaves left to right
        for array in (parent, leaf_id, counts, level, start, size, self.order):
            array.setflags(write=False)
        self._hash = hash((d, parent.tobytes(), leaf_id.tobytes()))

    def check_features(self, d: int, name: str = "hierarchy") -> None:
        """Refuse a hierarchy whose leaves are not exactly the ids ``0..d-1``."""
        if self.num_features > d:
            extra = sorted(set(range(d, self.num_features)))
            raise ValueError(
                f"{name} names feature ids {_ids(extra)} that do not exist: the inputs have "
                f"d = {d} features (ids 0..{d - 1}, from feature_mask)."
            )
        if self.num_features < d:
            raise ValueError(
                f"{name} misses feature ids {_ids(range(self.num_features, d))}: the inputs "
                f"have d = {d} features (ids 0..{d - 1}), and every id must be a leaf once."
            )

    # -------------------------------------------------------------- structure

    @property
    def num_nodes(self) -> int:
        """Nodes of the tree, leaves included."""
        return int(self.parent.shape[0])

    @property
    def leaves(self) -> tuple[int, ...]:
        """The feature ids in the tree's left-to-right order."""
        return tuple(int(i) for i in self.order)

    @property
    def depth(self) -> int:
        """Edges on the longest root-to-leaf path (0 for a single feature, 1 when flat)."""
        return int(self.level.max())

    @functools.cached_property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """The feature ids under each node, in pre-order (root first, leaves included)."""
        order = self.leaves
        return tuple(order[s : s + z] for s, z in zip(self.start.tolist(), self.size.tolist()))

    @functools.cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """The child node numbers of each node, left to right (empty for a leaf)."""
        out: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for node, p in enumerate(self.parent.tolist()[1:], start=1):
            out[p].append(node)
        return tuple(tuple(c) for c in out)

    def to_nested(self) -> Nested:
        """Nested lists of feature ids (a leaf as its id)."""
        built: list[Any] = [None] * self.num_nodes
        for node in range(self.num_nodes - 1, -1, -1):
            kids = self.children[node]
            built[node] = int(self.leaf_id[node]) if not kids else [built[c] for c in kids]
        return built[0]

    def to_linkage(self) -> npt.NDArray[np.float64]:
        """The scipy linkage matrix ``(d - 1, 4)`` of a binary hierarchy.

        Heights are the subtree heights (so the matrix is monotone); SHAP's
        ``maskers.Partition(data, clustering=h.to_linkage())`` then walks this tree.
        """
        kids = self.children
        if any(len(c) not in (0, 2) for c in kids):
            raise ValueError(
                "hierarchy: to_linkage needs a binary tree (every inner node with two "
                "children); balanced(ids, arity=2) and from_linkage give one."
            )
        d = self.num_features
        cluster = [0] * self.num_nodes
        height = [0] * self.num_nodes
        rows: list[list[float]] = []
        for node in range(self.num_nodes - 1, -1, -1):  # children come after their parent
            if not kids[node]:
                cluster[node] = int(self.leaf_id[node])
                continue
            a, b = kids[node]
            height[node] = max(height[a], height[b]) + 1
            rows.append([cluster[a], cluster[b], height[node], int(self.size[node])])
            cluster[node] = d + len(rows) - 1
        return np.asarray(rows, dtype=np.float64).reshape(-1, 4)

    def tensors(self, device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """``parent``, ``leaf_id``, ``num_children``, ``level``, ``start``, ``size``, ``order``."""
        names = ("parent", "leaf_id", "num_children", "level", "start", "size", "order")
        return {
            name: torch.as_tensor(np.array(getattr(self, name)), device=device) for name in names
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hierarchy):
            return NotImplemented
        return (
            self.num_features == other.num_features
            and np.array_equal(self.parent, other.parent)
            and np.array_equal(self.leaf_id, other.leaf_id)
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"Hierarchy(num_features={self.num_features}, num_nodes={self.num_nodes}, "
            f"depth={self.depth})"
        )


# ---------------------------------------------------------------- helpers


def balanced_nested(items: Sequence[Any], arity: int = 2) -> Nested:
    """``items`` split into ``arity`` contiguous near-equal parts, recursively."""
    if len(items) == 1:
        return items[0]
    parts = min(arity, len(items))
    bounds = [round(j * len(items) / parts) for j in range(parts + 1)]
    return [balanced_nested(items[a:b], arity) for a, b in itertools.pairwise(bounds)]


def parse_nested(nested: Nested) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Pre-order ``parent`` and ``leaf_id`` (-1 for inner nodes) arrays; iterative, no recursion."""
    parent: list[int] = []
    leaf_id: list[int] = []
    # path: positions for messages; depth: levels of nodes kept (one-child lists are not)
    stack: list[tuple[Any, int, tuple[int, ...], int]] = [(nested, -1, (), 0)]
    while stack:
        item, up, path, depth = stack.pop()
        if isinstance(item, np.ndarray):
            item = item.tolist()
        elif isinstance(item, Tensor):
            item = item.tolist()
        if isinstance(item, (list, tuple)):
            if len(item) == 0:
                where = f" at position {list(path)}" if path else ""
                raise ValueError(f"hierarchy has an empty node{where}; every node needs a leaf.")
            if len(item) == 1:  # a node with one child: the same value, dropped
                stack.append((item[0], up, (*path, 0), depth))
                continue
            if depth >= MAX_DEPTH:
                raise ValueError(
                    f"hierarchy is {nested_depth(nested)} levels deep; at most MAX_DEPTH = "
                    f"{MAX_DEPTH} are supported. Rebalance it, e.g. Hierarchy.balanced, or "
                    "average linkage instead of single linkage."
                )
            node = len(parent)
            parent.append(up)
            leaf_id.append(-1)
            stack.extend(
                (child, node, (*path, j), depth + 1) for j, child in reversed(list(enumerate(item)))
            )
            continue
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(
                f"hierarchy leaves must be int feature ids, got {item!r} "
                f"({type(item).__name__}) at position {list(path)}."
            )
        if item < 0:
            raise ValueError(
                f"hierarchy has negative feature ids [{int(item)}] at position {list(path)}; "
                "ids are 0..d-1."
            )
        parent.append(up)
        leaf_id.append(int(item))
    return np.asarray(parent, dtype=np.int64), np.asarray(leaf_id, dtype=np.int64)


def nested_depth(nested: Nested) -> int:
    """Edges on the longest root-to-leaf path of nested lists (one-child lists not counted)."""
    deepest = 0
    stack = [(nested, 0)]
    while stack:
        item, depth = stack.pop()
        while isinstance(item, (list, tuple)) and len(item) == 1:
            item = item[0]
        if isinstance(item, (list, tuple)) and item:
            stack.extend((child, depth + 1) for child in item)
        else:
            deepest = max(deepest, depth)
    return deepest


def _check_ids(ids: npt.NDArray[np.int64], d: int) -> None:
    negative = sorted(set(ids[ids < 0].tolist()))
    if negative:
        raise ValueError(f"hierarchy has negative feature ids {_ids(negative)}.")
    beyond = sorted(set(ids[ids >= d].tolist()))
    if beyond:
        raise ValueError(
            f"hierarchy names feature ids {_ids(beyond)} that do not exist (num_features = "
            f"{d}: ids 0..{d - 1})."
        )
    counts = np.bincount(ids, minlength=d)
    repeated = np.flatnonzero(counts > 1).tolist()
    if repeated:
        raise ValueError(
            f"hierarchy repeats feature ids {_ids(repeated)}; each must be a leaf once."
        )
    missing = np.flatnonzero(counts == 0).tolist()
    if missing:
        raise ValueError(
            f"hierarchy misses feature ids {_ids(missing)}: every id 0..{d - 1} must be a "
            "leaf once."
        )


def _ids(ids: Any) -> str:
    """Up to 10 ids, then a count."""
    listed = [int(i) for i in ids]
    shown = ", ".join(str(i) for i in listed[:10])
    more = f", ... ({len(listed)} in all)" if len(listed) > 10 else ""
    return f"[{shown}{more}]"


def _single_linkage(distance: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A scipy-style single-linkage matrix ``(d - 1, 4)``: Prim's tree, shortest edges first."""
    d = distance.shape[0]
    if d == 1:
        return np.zeros((0, 4))
    in_tree = np.zeros(d, dtype=bool)
    best = np.full(d, np.inf)
    link = np.zeros(d, dtype=np.int64)
    in_tree[0] = True
    best[1:] = distance[0, 1:]
    edges = []
    for _ in range(d - 1):
        candidate = np.where(in_tree, np.inf, best)
        j = int(np.argmin(candidate))
        edges.append((float(candidate[j]), int(link[j]), j))
        in_tree[j] = True
        closer = ~in_tree & (distance[j] < best)
        best[closer] = distance[j][closer]
        link[closer] = j
    edges.sort(key=lambda e: e[0])
    cluster = list(range(d))  # union-find over the features, with each root's cluster id

    def find(i: int) -> int:
        while cluster[i] != i:
            cluster[i] = cluster[cluster[i]]
            i = cluster[i]
        return i

    label = list(range(d))
    size = [1] * d
    rows = []
    for t, (dist, a, b) in enumerate(edges):
        ra, rb = find(a), find(b)
        rows.append([label[ra], label[rb], dist, size[ra] + size[rb]])
        cluster[rb] = ra
        label[ra] = d + t
        size[ra] += size[rb]
    return np.asarray(rows, dtype=np.float64)
