"""Winter (hierarchical Owen) values: the exact plan and its estimator.

The Winter value of feature i averages its marginal contribution over the
orderings in which every node of a hierarchy comes contiguously, each node
ordering its children uniformly. Summed over a node B with parent A it is

    phi_B = sum_{c in C(A)} w_A(c) * Shapley_B(R -> v(c + union(R)), R over children(A))

where a context c of A picks, at every strict ancestor P of A, a subset of
the siblings of the path's child (``k_P - 1`` bits each) and weighs it by the
product of the Shapley weights ``|Q|! (k_P - |Q| - 1)! / k_P!``. So the exact
plan is, for every inner node A, every context and every subset of its
children, which are distinct when the subset is proper and non-empty
(the other two repeat a coalition of A's parent): ``2 + sum_A 2^(s_A) (2^(k_A) - 2)``
coalitions, 172 at d = 16 on a balanced binary tree, ``2^d`` when flat. The
estimator is the Shapley value of each node's children per context (one
``2^k``-column matmul) weighed over the contexts: no ``d x M`` matrix.

Coalitions are unions of nodes, and a node is one interval of the tree's
leaf order, so :class:`NodeUnionCoalitions` stores the member *nodes* (a few
per coalition) and expands rows a chunk at a time from interval marks.

The budgeted walk is in ``plans/owen_budgeted.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..engine.plan import CoalitionSet, Plan
from ..graphs.hierarchy import Hierarchy
from .linear import popcount, shapley_from_all_coalitions, shapley_weights

__all__ = [
    "NodeUnionCoalitions",
    "winter_coalition_count",
    "winter_value_plan",
]


def winter_coalition_count(hierarchy: Hierarchy) -> int:
    """Distinct coalitions of the exact Winter value (a Python int, computed before any plan)."""
    kids = hierarchy.num_children.tolist()
    bits = context_bits(hierarchy)
    return 2 + sum(2**s * (2**k - 2) for s, k in zip(bits, kids) if k > 0)


def context_bits(hierarchy: Hierarchy) -> list[int]:
    """``s`` per node: sibling choices of its strict ancestors' path children."""
    kids = hierarchy.num_children.tolist()
    parent = hierarchy.parent.tolist()
    bits = [0] * len(parent)
    for node in range(1, len(parent)):
        bits[node] = bits[parent[node]] + kids[parent[node]] - 1
    return bits


# --------------------------------------------------------------------- storage


class NodeUnionCoalitions(CoalitionSet):
    """Coalitions that are unions of hierarchy nodes, stored by their member nodes.

    Node ``m`` covers positions ``[node_start[m], node_end[m])`` of its tree's
    leaf order ``orders[node_tree[m]]`` (``(T, d)``, padded with ``d``);
    coalition ``r`` is the union of ``members[offsets[r]:offsets[r + 1]]``.
    Memory is a few node ids per coalition, whatever ``d``.
    """

    def __init__(
        self,
        members: Tensor,
        offsets: Tensor,
        node_start: Tensor,
        node_end: Tensor,
        node_tree: Tensor,
        orders: Tensor,
    ) -> None:
        self.members = members
        self.offsets = offsets
        self.node_start = node_start
        self.node_end = node_end
        self.node_tree = node_tree
        self.orders = orders
        self.num_features = orders.shape[1]
        lengths = offsets[1:] - offsets[:-1]
        self.width = int(lengths.max()) if lengths.numel() else 0

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def device(self) -> torch.device:
        return self.members.device

    def to(self, device: torch.device) -> NodeUnionCoalitions:
        if self.device == device:
            return self
        moved = [
            t.to(device)
            for t in (
                self.members,
                self.offsets,
                self.node_start,
                self.node_end,
                self.node_tree,
                self.orders,
            )
        ]
        return NodeUnionCoalitions(*moved)

    @functools.cached_property
    def _positions(self) -> Tensor:
        """``(T, d + 1)``: the position of each feature in each tree's order (d if absent)."""
        trees, d = self.orders.shape
        out = torch.full((trees, d + 1), d, dtype=torch.long, device=self.device)
        rows = torch.arange(trees, device=self.device)[:, None].expand(trees, d)
        out[rows, self.orders] = torch.arange(d, device=self.device).expand(trees, d)
        return out[:, :d]

    def _padded(self, index: Tensor) -> Tensor:
        """``(len(index), width)`` member node ids, ``-1`` where a coalition has fewer."""
        starts = self.offsets[index]
        lengths = self.offsets[index + 1] - starts
        slot = torch.arange(self.width, device=self.device)
        position = (starts[:, None] + slot).clamp_(max=max(self.members.numel() - 1, 0))
        if self.members.numel() == 0:
            return torch.full((index.shape[0], self.width), -1, device=self.device)
        return torch.where(slot < lengths[:, None], self.members[position], -1)

    def take(self, index: Tensor) -> Tensor:
        index = index.to(self.device)
        count, d = index.shape[0], self.num_features
        marks = torch.zeros((count, d + 1), dtype=torch.int8, device=self.device)
        if self.width:
            nodes = self._padded(index)
            present = nodes >= 0
            safe = nodes.clamp(min=0)
            one = present.to(torch.int8)
            marks.scatter_add_(1, torch.where(present, self.node_start[safe], d), one)
            marks.scatter_add_(1, torch.where(present, self.node_end[safe], d), -one)
        # column d is never inside: every node's -1 lands at its end <= d
        inside = torch.cumsum(marks, dim=1, dtype=torch.int8) > 0  # (count, d + 1), positions
        if self.orders.shape[0] == 1:
            return torch.gather(inside, 1, self._positions.expand(count, d))
        return torch.gather(inside, 1, self._positions[self._row_tree(index)])

    def _row_tree(self, index: Tensor) -> Tensor:
        """The tree of each coalition: that of its first member (0 for the empty coalition)."""
        if self.orders.shape[0] == 1 or self.width == 0:
            return torch.zeros_like(index)
        first = self._padded(index)[:, 0]
        return torch.where(first >= 0, self.node_tree[first.clamp(min=0)], 0)

    def weighted_sums(self, weights: Tensor) -> Tensor:
        weights = weights.to(self.device)
        padded = torch.cat([weights, torch.zeros_like(weights[:1])])
        ordered = padded[self.orders]  # (T, d, L)
        cumulative = torch.cat([torch.zeros_like(ordered[:, :1]), ordered.cumsum(dim=1)], dim=1)
        node_sum = (
            cumulative[self.node_tree, self.node_end] - cumulative[self.node_tree, self.node_start]
        )
        count = len(self)
        row = torch.repeat_interleave(
            torch.arange(count, device=self.device), self.offsets[1:] - self.offsets[:-1]
        )
        out = torch.zeros((count, weights.shape[1]), dtype=torch.long, device=self.device)
        return out.index_add_(0, row, node_sum[self.members])


@dataclass(frozen=True)
class Forest:
    """Several hierarchies over ``d`` features as one node table (global node ids)."""

    parent: Tensor  # -1 at roots
    num_children: Tensor
    children: Tensor  # (nodes, k_max), -1 padded
    child_position: Tensor
    start: Tensor
    end: Tensor
    size: Tensor
    leaf_id: Tensor
    tree: Tensor
    level: Tensor
    roots: Tensor  # (T,)
    orders: Tensor  # (T, d), padded with d

    @classmethod
    def of(cls, hierarchies: Sequence[Hierarchy], d: int, device: torch.device) -> Forest:
        parts: dict[str, list[Tensor]] = {
            k: [] for k in ("parent", "kids", "start", "size", "level")
        }
        parts.update(leaf=[], tree=[], pos=[], children=[])
        roots, orders, base = [], [], 0
        k_max = max(max(int(h.num_children.max()), 1) for h in hierarchies)
        for t, h in enumerate(hierarchies):
            arrays = h.tensors()
            n = h.num_nodes
            parent = arrays["parent"]
            parts["parent"].append(torch.where(parent >= 0, parent + base, -1))
            parts["kids"].append(arrays["num_children"])
            parts["start"].append(arrays["start"])
            parts["size"].append(arrays["size"])
            parts["level"].append(arrays["level"])
            parts["leaf"].append(arrays["leaf_id"])
            parts["tree"].append(torch.full((n,), t, dtype=torch.long))
            # pre-order numbers siblings left to right: a child's position is its
            # rank among the nodes of the same parent
            by_parent = torch.argsort(parent[1:], stable=True) + 1
            first = torch.zeros(n + 1, dtype=torch.long)
            first[1:] = torch.bincount(parent[1:], minlength=n).cumsum(0)
            position = torch.zeros(n, dtype=torch.long)
            position[by_parent] = torch.arange(n - 1) - first[parent[by_parent]]
            table = torch.full((n, k_max), -1, dtype=torch.long)
            table[parent[by_parent], position[by_parent]] = by_parent + base
            parts["children"].append(table)
            parts["pos"].append(position)
            order = torch.full((d,), d, dtype=torch.long)
            order[: h.num_features] = arrays["order"]
            orders.append(order)
            roots.append(base)
            base += n

        def cat(name: str) -> Tensor:
            return torch.cat(parts[name]).to(device)

        start, size = cat("start"), cat("size")
        return cls(
            parent=cat("parent"),
            num_children=cat("kids"),
            children=cat("children"),
            child_position=cat("pos"),
            start=start,
            end=start + size,
            size=size,
            leaf_id=cat("leaf"),
            tree=cat("tree"),
            level=cat("level"),
            roots=torch.tensor(roots, dtype=torch.long, device=device),
            orders=torch.stack(orders).to(device),
        )

    def coalitions(self, padded_members: Tensor) -> NodeUnionCoalitions:
        """The coalitions of a ``(M, w)`` member-node matrix (``-1`` for none)."""
        valid = padded_members >= 0
        offsets = torch.zeros(valid.shape[0] + 1, dtype=torch.long, device=valid.device)
        offsets[1:] = valid.sum(dim=1).cumsum(0)
        return NodeUnionCoalitions(
            padded_members[valid], offsets, self.start, self.end, self.tree, self.orders
        )


# --------------------------------------------------------------------- exact plan


@dataclass(frozen=True)
class _Group:
    """Inner nodes with the same context bits ``s`` and children ``k``, stacked."""

    nodes: Tensor  # (g,)
    candidates: Tensor  # (g, s): the node each context bit adds
    children: Tensor  # (g, k)
    weights: Tensor  # (g, 2^s) float64: the context weights
    columns: Tensor  # (g, 2^s, 2^k): the plan column of (context, subset of children)


def winter_value_plan(hierarchy: Hierarchy, device: torch.device | str = "cpu") -> Plan:
    """The exact Winter value of ``hierarchy``: its distinct coalitions and estimator.

    Callers check :func:`winter_coalition_count` against their limit first.
    Cached per hierarchy (hierarchies hash by structure).
    """
    return _winter_value_plan(hierarchy, torch.device(device))


@functools.lru_cache(maxsize=16)
def _winter_value_plan(hierarchy: Hierarchy, device: torch.device) -> Plan:
    h = hierarchy
    d = h.num_features
    forest = Forest.of([h], d, torch.device("cpu"))
    kids = h.num_children.tolist()
    bits = context_bits(h)
    candidates = _candidates(h)
    weights = _context_weights(h, bits)
    keys = sorted({(bits[a], kids[a]) for a in range(h.num_nodes) if kids[a] > 0})
    offset = torch.zeros(h.num_nodes, dtype=torch.long)
    rows = [torch.full((2, 1), -1, dtype=torch.long)]
    rows[0][1, 0] = 0  # row 0: the empty coalition; row 1: the root
    cursor = 2
    grouped = []
    for s, k in keys:
        nodes = [a for a in range(h.num_nodes) if kids[a] == k and bits[a] == s]
        block = 2**s * (2**k - 2)
        offset[nodes] = cursor + block * torch.arange(len(nodes))
        cursor += block * len(nodes)
        cand = torch.tensor([candidates[a] for a in nodes], dtype=torch.long).view(len(nodes), s)
        child = forest.children[nodes, :k]
        rows.append(_members(cand, child))
        grouped.append((nodes, cand, child, torch.stack([weights[a] for a in nodes])))
    width = max(r.shape[1] for r in rows)
    padded = torch.cat(
        [torch.nn.functional.pad(r, (0, width - r.shape[1]), value=-1) for r in rows]
    )
    groups = [
        _Group(
            torch.tensor(nodes),
            cand,
            child,
            w,
            _columns(forest, offset, torch.tensor(nodes), cand.shape[1], child.shape[1]),
        )
        for nodes, cand, child, w in grouped
    ]
    leaves = torch.nonzero(forest.leaf_id >= 0)[:, 0]
    estimator = WinterEstimator(tuple(groups), leaves, forest.leaf_id[leaves], h.num_nodes, d)
    coalitions = forest.coalitions(padded).to(device)
    return Plan(coalitions, estimator.to(device), distinct=True)


def _candidates(h: Hierarchy) -> list[list[int]]:
    """Per node, the node each context bit adds: its siblings, then its parent's candidates."""
    out: list[list[int]] = [[] for _ in range(h.num_nodes)]
    for node in range(1, h.num_nodes):
        p = int(h.parent[node])
        out[node] = [c for c in h.children[p] if c != node] + out[p]
    return out


def _context_weights(h: Hierarchy, bits: list[int]) -> dict[int, Tensor]:
    """``w_A(c)`` for every inner node A: products of Shapley weights along the path."""
    kids = h.num_children.tolist()
    out = {0: torch.ones(1, dtype=torch.float64)}
    for node in range(1, h.num_nodes):
        if kids[node] == 0:
            continue
        p = int(h.parent[node])
        k = kids[p]
        codes = torch.arange(2 ** bits[node])
        table = torch.tensor(shapley_weights(k), dtype=torch.float64)
        out[node] = out[p][codes >> (k - 1)] * table[popcount(codes & (2 ** (k - 1) - 1), k - 1)]
    return out


def bit_table(count: int, bits: int) -> Tensor:
    codes = torch.arange(count)
    return ((codes[:, None] >> torch.arange(bits)) & 1).bool()


def _members(cand: Tensor, child: Tensor) -> Tensor:
    """``(g * 2^s * (2^k - 2), s + k)`` member nodes of (node, context, proper subset) rows."""
    g, s = cand.shape
    k = child.shape[1]
    contexts = torch.where(bit_table(2**s, s), cand[:, None, :], -1)  # (g, 2^s, s)
    subsets = torch.where(bit_table(2**k, k)[1:-1], child[:, None, :], -1)  # (g, 2^k - 2, k)
    shape = (g, 2**s, 2**k - 2)
    both = torch.cat(
        [contexts[:, :, None, :].expand(*shape, s), subsets[:, None, :, :].expand(*shape, k)], dim=3
    )
    return both.reshape(-1, s + k)


def _columns(forest: Forest, offset: Tensor, nodes: Tensor, s: int, k: int) -> Tensor:
    """The plan column of every (node, context, subset of its children), subsets all ``2^k``."""
    shape = (nodes.shape[0], 2**s, 2**k)
    node = nodes[:, None, None].expand(shape).reshape(-1)
    ctx = torch.arange(2**s)[None, :, None].expand(shape).reshape(-1)
    subset = torch.arange(2**k)[None, None, :].expand(shape).reshape(-1)
    return canonical_columns(forest, offset, node, ctx, subset).view(shape)


def canonical_columns(
    forest: Forest, offset: Tensor, node: Tensor, ctx: Tensor, subset: Tensor
) -> Tensor:
    """Column of coalition ``context(node, ctx) + union(subset of node's children)``.

    A proper non-empty subset is its own column; the empty and the full
    subset are coalitions of the parent (the context's own choice there,
    without or with the node), climbed until proper or at the root (columns
    0, the empty coalition, and 1, every feature).
    """
    out = torch.full_like(node, -1)
    pending = torch.ones_like(node, dtype=torch.bool)
    while True:
        full = (1 << forest.num_children[node]) - 1
        proper = pending & (subset != 0) & (subset != full)
        out = torch.where(proper, offset[node] + ctx * (full - 1) + subset - 1, out)
        root = forest.parent[node] < 0
        out = torch.where(pending & root & (subset == 0), 0, out)
        out = torch.where(pending & root & (subset == full), 1, out)
        pending = pending & ~proper & ~root
        if not bool(pending.any()):
            return out
        up = forest.parent[node].clamp(min=0)
        k_up = forest.num_children[up]
        j = forest.child_position[node]
        chosen = ctx & ((1 << (k_up - 1)) - 1)
        lifted = (chosen & ((1 << j) - 1)) | ((chosen >> j) << (j + 1))
        lifted = lifted | torch.where(subset == full, 1 << j, 0)
        node = torch.where(pending, up, node)
        subset = torch.where(pending, lifted, subset)
        ctx = torch.where(pending, ctx >> (k_up - 1), ctx)


@dataclass(frozen=True)
class WinterEstimator:
    """Values ``(N, M)`` of the exact plan -> Winter values ``(N, d)`` (and of every node)."""

    groups: tuple[_Group, ...]
    leaves: Tensor
    leaf_features: Tensor
    num_nodes: int
    num_features: int

    def to(self, device: torch.device) -> WinterEstimator:
        groups = tuple(
            _Group(
                *(t.to(device) for t in (g.nodes, g.candidates, g.children, g.weights, g.columns))
            )
            for g in self.groups
        )
        return WinterEstimator(
            groups,
            self.leaves.to(device),
            self.leaf_features.to(device),
            self.num_nodes,
            self.num_features,
        )

    def node_values(self, values: Tensor) -> Tensor:
        """``(N, nodes)``: each node's value, the sum of its leaves' Winter values."""
        out = values.new_zeros(values.shape[0], self.num_nodes)
        out[:, 0] = values[:, 1] - values[:, 0]
        for group in self.groups:
            g, contexts, subsets = group.columns.shape
            k = group.children.shape[1]
            table = values[:, group.columns.reshape(-1)].reshape(-1, subsets)
            per_context = shapley_from_all_coalitions(table).view(-1, g, contexts, k)
            weights = group.weights.to(values.dtype)
            out[:, group.children] = torch.einsum("ngck,gc->ngk", per_context, weights)
        return out

    def __call__(self, values: Tensor) -> Tensor:
        nodes = self.node_values(values)
        out = values.new_zeros(values.shape[0], self.num_features)
        out[:, self.leaf_features] = nodes[:, self.leaves]
        return out
