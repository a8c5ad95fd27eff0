"""Winter values within a budget: SHAP's ``PartitionExplainer`` walk, batched.

:func:`budgeted_winter_values` is the walk SHAP's ``PartitionExplainer``
makes under ``max_evals``, batched: a (node, context) item costs
``2^k - 2`` evaluations to split into its children's items; each round
splits, per example, the items of largest ``|v(c + B) - v(c)| * weight``
(doubling the evaluations spent, so rounds are few and each is one engine
call over the batch); what is left unsplit at the budget goes down to the
leaves by the node's children's average gains where it was split (or in
equal shares, SHAP's ``lower_credit``, ``leftover="equal"``). Every split
keeps the sum, so the estimate is efficient, and run to the end it is the
exact Winter value. ``benchmarks/partition.py`` compares both with SHAP.

Values carry a trailing outputs dimension: a multi-output model's outputs
share one walk, whose splits go where ``|v(c + B) - v(c)|`` summed over
the outputs is largest, so every output is credited from the same
evaluations and the budget holds for all of them together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..graphs.hierarchy import Hierarchy
from .linear import popcount, shapley_weights
from .owen import Forest, NodeUnionCoalitions, bit_table

__all__ = ["LEFTOVER_SHARES", "budgeted_winter_values"]

#: ``leftover=`` choices of :func:`budgeted_winter_values`
LEFTOVER_SHARES = ("profile", "equal")

#: Nodes with more children than this are never split by the budgeted walk
#: (``2^k - 2`` evaluations); their items keep the equal share.
MAX_SPLIT_CHILDREN = 24

#: ``(example_index, coalitions) -> (rows, outputs)`` values: one engine call over the batch
Evaluate = Callable[[Tensor, NodeUnionCoalitions], Tensor]


@dataclass
class _Items:
    """(node, context) items of the walk: ``v(c)``, ``v(c + node)`` and the weight."""

    example: Tensor
    node: Tensor
    context: Tensor  # (E, W) member nodes of c, -1 padded
    low: Tensor  # (E, outputs)
    high: Tensor  # (E, outputs)
    weight: Tensor

    def gain(self) -> Tensor:
        """``(E, outputs)`` ``(v(c + node) - v(c)) * weight``."""
        return (self.high - self.low) * self.weight[:, None]

    def select(self, keep: Tensor) -> _Items:
        return _Items(*(t[keep] for t in self.fields()))

    def fields(self) -> tuple[Tensor, ...]:
        return (self.example, self.node, self.context, self.low, self.high, self.weight)

    @staticmethod
    def cat(parts: list[_Items]) -> _Items:
        width = max(p.context.shape[1] for p in parts)
        contexts = [
            torch.nn.functional.pad(p.context, (0, width - p.context.shape[1]), value=-1)
            for p in parts
        ]
        fields = [torch.cat([p.fields()[i] for p in parts]) for i in (0, 1, 3, 4, 5)]
        return _Items(fields[0], fields[1], torch.cat(contexts), *fields[2:])


def budgeted_winter_values(
    evaluate: Evaluate,
    hierarchies: Sequence[Hierarchy],
    budget: int,
    device: torch.device,
    leftover: str = "profile",
) -> tuple[Tensor, Tensor]:
    """Winter values within ``budget`` evaluations per example, one hierarchy per example.

    ``evaluate`` gives ``(rows, O)`` values, ``O`` outputs of the model that
    share the walk. Returns ``(N, d, O)`` float64 attributions and the
    ``(N,)`` evaluations spent (never above ``budget``, whatever ``O``).
    Exact when the budget covers every split.
    ``leftover`` shares what is left unsplit among a node's leaves:
    ``"equal"`` (SHAP's ``lower_credit``) or ``"profile"`` (each child's
    average gain per unit weight where the node was split, shifted to the
    unsplit total; equal shares where it never was); both efficient.
    """
    distinct = list(dict.fromkeys(hierarchies))
    d = max(h.num_features for h in hierarchies)
    forest = Forest.of(distinct, d, device)
    tree_of = torch.tensor([distinct.index(h) for h in hierarchies], device=device)
    batch = len(hierarchies)
    examples = torch.arange(batch, device=device)
    roots = forest.roots[tree_of]
    store = forest.coalitions(torch.stack([torch.full_like(roots, -1), roots], dim=1).view(-1, 1))
    values = evaluate(examples.repeat_interleave(2), store).double()
    values = values.view(batch, 2, values.shape[-1])
    spent = torch.full((batch,), 2, dtype=torch.long, device=device)
    credit = torch.zeros(batch, d, values.shape[-1], dtype=torch.float64, device=device)
    items = _Items(
        examples,
        roots,
        torch.full((batch, 0), -1, dtype=torch.long, device=device),
        values[:, 0],
        values[:, 1],
        torch.ones(batch, dtype=torch.float64, device=device),
    )
    items = _credit_leaves(items, forest, credit)
    profile = _Profile.empty(batch, forest, values.shape[-1])
    while items.example.numel():
        chosen = _choose(items, forest, spent, budget)
        if not bool(chosen.any()):
            break
        split = items.select(chosen)
        items = items.select(~chosen)
        children = _split(split, forest, evaluate, spent)
        profile.record(split, children)
        items = _Items.cat([items, _credit_leaves(children, forest, credit)])
    if leftover == "equal":
        _share_equally(items, forest, tree_of, credit)
    else:
        profile.share(items, forest, credit)
    return credit, spent


@dataclass
class _Profile:
    """Per (example, node): weight of the node's splits, and gain its items received."""

    split_weight: Tensor  # (N, nodes)
    received: Tensor  # (N, nodes, outputs)

    @classmethod
    def empty(cls, batch: int, forest: Forest, outputs: int) -> _Profile:
        shape = (batch, forest.parent.shape[0])
        device = forest.parent.device
        zeros = torch.zeros(shape, dtype=torch.float64, device=device)
        return cls(zeros, torch.zeros(*shape, outputs, dtype=torch.float64, device=device))

    def record(self, split: _Items, children: _Items) -> None:
        self.split_weight.index_put_((split.example, split.node), split.weight, accumulate=True)
        index = (children.example, children.node)
        self.received.index_put_(index, children.gain(), accumulate=True)

    def share(self, items: _Items, forest: Forest, credit: Tensor) -> None:
        """Push unsplit totals down the tree, level by level, to the leaves.

        A node B's unsplit total g (weight w) gives child C
        ``g |C| / |B| + w (r_C - |C| / |B| sum_C' r_C')``, with ``r_C`` the
        gain C's items received per unit of B's split weight: the children's
        average split, shifted so the shares add up to g.
        """
        total = torch.zeros_like(self.received)
        weight = torch.zeros_like(self.split_weight)
        total.index_put_((items.example, items.node), items.gain(), accumulate=True)
        weight.index_put_((items.example, items.node), items.weight, accumulate=True)
        inner = forest.parent >= 0
        parent = forest.parent.clamp(min=0)
        received_by_children = torch.zeros_like(self.received).index_add_(
            1, parent[inner], self.received[:, inner]
        )
        for level in range(1, int(forest.level.max()) + 1 if forest.level.numel() else 1):
            nodes = torch.nonzero(forest.level == level)[:, 0]
            up = parent[nodes]
            fraction = (forest.size[nodes].double() / forest.size[up].double())[:, None]
            split = self.split_weight[:, up, None]
            safe = split.clamp(min=torch.finfo(torch.float64).tiny)
            shift = torch.where(
                split > 0,
                self.received[:, nodes] / safe - fraction * received_by_children[:, up] / safe,
                0.0,
            )
            total[:, nodes] += total[:, up] * fraction + weight[:, up, None] * shift
            weight[:, nodes] += weight[:, up]
        leaves = torch.nonzero(forest.leaf_id >= 0)[:, 0]
        credit.index_add_(1, forest.leaf_id[leaves], total[:, leaves])


def _split_cost(items: _Items, forest: Forest) -> Tensor:
    k = forest.num_children[items.node]
    return torch.where(k > MAX_SPLIT_CHILDREN, 2**40, (1 << k.clamp(max=MAX_SPLIT_CHILDREN)) - 2)


def _choose(items: _Items, forest: Forest, spent: Tensor, budget: int) -> Tensor:
    """Per example, the largest items whose splits fit this round's share of the budget.

    A round may spend as much as was spent before (at least the cost of the
    largest item that still fits): evaluations double per round, so a budget
    of B needs about ``log2 B`` rounds, each one engine call. An item too
    costly for what is left is passed over, not waited for.
    """
    cost = _split_cost(items, forest).clamp(max=budget + 1)
    priority = (items.high - items.low).abs().sum(dim=1) * items.weight  # over the outputs
    order = torch.argsort(-priority, stable=True)
    order = order[torch.argsort(items.example[order], stable=True)]
    example = items.example[order]
    remaining = budget - spent[example]
    fits = cost[order] <= remaining
    ordered_cost = torch.where(fits, cost[order], 0)
    running = ordered_cost.cumsum(0)
    first = torch.ones_like(fits)
    first[1:] = example[1:] != example[:-1]
    positions = torch.arange(len(example), device=example.device)
    start = torch.cummax(torch.where(first, positions, 0), 0).values
    within = running - running[start] + ordered_cost[start]
    # the cost of each example's first item that fits: the round's least share
    leading = torch.where(fits, ordered_cost, budget + 1)
    least = torch.full_like(spent, budget + 1).scatter_reduce(0, example, leading, reduce="amin")
    cap = torch.minimum(remaining, torch.maximum(spent[example], least[example]))
    chosen = torch.zeros_like(fits)
    chosen[order] = fits & (within <= cap)
    return chosen


def _split(split: _Items, forest: Forest, evaluate: Evaluate, spent: Tensor) -> _Items:
    """Evaluate every proper subset of each item's children; the children's items."""
    ks = forest.num_children[split.node]
    parts: list[_Items] = []
    rows, owners, tables = [], [], []
    for k in sorted(set(ks.tolist())):
        group = split.select(ks == k)
        count = group.example.shape[0]
        child = forest.children[group.node, :k]
        subsets = torch.where(bit_table(2**k, k)[1:-1].to(child.device), child[:, None, :], -1)
        context = group.context[:, None, :].expand(count, 2**k - 2, group.context.shape[1])
        rows.append(torch.cat([context, subsets], dim=2).reshape(count * (2**k - 2), -1))
        owners.append(group.example.repeat_interleave(2**k - 2))
        tables.append((k, group, child))
    width = max(r.shape[1] for r in rows)
    padded = torch.cat(
        [torch.nn.functional.pad(r, (0, width - r.shape[1]), value=-1) for r in rows]
    )
    example_index = torch.cat(owners)
    values = evaluate(example_index, forest.coalitions(padded)).double()  # (rows, outputs)
    spent.index_add_(0, example_index, torch.ones_like(example_index))
    cursor = 0
    for k, group, child in tables:
        count = group.example.shape[0]
        middle = values[cursor : cursor + count * (2**k - 2)].view(count, 2**k - 2, -1)
        cursor += count * (2**k - 2)
        table = torch.cat([group.low[:, None], middle, group.high[:, None]], dim=1)  # (n, 2^k, O)
        parts.append(_children_items(group, child, table, k))
    return _Items.cat(parts)


def _children_items(group: _Items, child: Tensor, table: Tensor, k: int) -> _Items:
    """Item (child p, context + Q) for every child p and subset Q of its siblings."""
    device = child.device
    count = group.example.shape[0]
    position = torch.arange(k, device=device)[:, None]  # (k, 1)
    q = torch.arange(2 ** (k - 1), device=device)[None, :]  # (1, 2^(k-1))
    without = (q & ((1 << position) - 1)) | ((q >> position) << (position + 1))  # (k, Q)
    with_p = without | (1 << position)
    shapley = torch.tensor(shapley_weights(k), dtype=torch.float64, device=device)
    weight = shapley[popcount(q.expand(k, -1), k - 1)]  # (k, Q)
    # siblings of child p chosen by q: the bits of `without` over the children
    chosen = ((without[:, :, None] >> torch.arange(k, device=device)) & 1).bool()  # (k, Q, k)
    added = torch.where(chosen[None], child[:, None, None, :], -1)  # (n, k, Q, k)
    shape = (count, k, 2 ** (k - 1))
    context = group.context[:, None, None, :].expand(*shape, group.context.shape[1])
    return _Items(
        group.example[:, None, None].expand(shape).reshape(-1),
        child[:, :, None].expand(shape).reshape(-1),
        torch.cat([context, added], dim=3).reshape(-1, group.context.shape[1] + k),
        table[:, without.reshape(-1)].reshape(-1, table.shape[-1]),
        table[:, with_p.reshape(-1)].reshape(-1, table.shape[-1]),
        (group.weight[:, None, None] * weight[None]).reshape(-1),
    )


def _credit_leaves(items: _Items, forest: Forest, credit: Tensor) -> _Items:
    """Credit the items on leaves to their feature; return the others."""
    leaf = forest.leaf_id[items.node]
    on_leaf = leaf >= 0
    gain = items.gain()
    credit.index_put_((items.example[on_leaf], leaf[on_leaf]), gain[on_leaf], accumulate=True)
    return items.select(~on_leaf)


def _share_equally(items: _Items, forest: Forest, tree_of: Tensor, credit: Tensor) -> None:
    """Unsplit items: each leaf of the node gets an equal share of ``(v(c + B) - v(c)) w``."""
    if not items.example.numel():
        return
    batch, d, outputs = credit.shape
    share = items.gain() / forest.size[items.node][:, None]
    marks = torch.zeros(batch, d + 1, outputs, dtype=torch.float64, device=credit.device)
    marks.index_put_((items.example, forest.start[items.node]), share, accumulate=True)
    marks.index_put_((items.example, forest.end[items.node]), -share, accumulate=True)
    per_position = marks.cumsum(dim=1)[:, :d]
    orders = forest.orders[tree_of]  # (N, d): feature at each position
    valid = orders < d
    credit.index_put_(
        (torch.arange(batch, device=credit.device)[:, None].expand(batch, d)[valid], orders[valid]),
        per_position[valid],
        accumulate=True,
    )
