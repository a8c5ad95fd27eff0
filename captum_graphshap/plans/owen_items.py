"""Items of the budgeted Owen walk and the ways to resolve them.

An item ``(B, c, w)`` of the walk holds ``v(c)`` and ``v(c + B)`` for a node
B and a context c (a union of nodes), with weight w: its gain
``(v(c + B) - v(c)) w`` is what B's leaves share in that context. An item
is resolved by an exact split (every proper subset of B's children,
:func:`split_exactly`), by sampled orderings of the children
(:func:`split_by_orderings`), or left whole and shared among B's leaves at
the end (:class:`Profile` or :func:`share_equally`). Every way keeps the
item's gain, so the walk is efficient whatever it chose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .linear import popcount, shapley_weights
from .owen import Forest, NodeUnionCoalitions, bit_table
from .owen_sampling import distinct_rows, item_keys, orderings_within

__all__ = [
    "Evaluate",
    "Items",
    "Profile",
    "SampledSplit",
    "Tails",
    "credit_leaves",
    "share_equally",
    "split_by_orderings",
    "split_exactly",
]

#: ``(example_index, coalitions) -> (rows, outputs)`` values: one engine call over the batch
Evaluate = Callable[[Tensor, NodeUnionCoalitions], Tensor]


@dataclass
class Items:
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

    def select(self, keep: Tensor) -> Items:
        # one nonzero (one host sync on a GPU) for all six fields, not one per field
        index = torch.nonzero(keep)[:, 0] if keep.dtype == torch.bool else keep
        return Items(*(t.index_select(0, index) for t in self.fields()))

    def fields(self) -> tuple[Tensor, ...]:
        return (self.example, self.node, self.context, self.low, self.high, self.weight)

    @staticmethod
    def cat(parts: list[Items]) -> Items:
        width = max(p.context.shape[1] for p in parts)
        contexts = [
            torch.nn.functional.pad(p.context, (0, width - p.context.shape[1]), value=-1)
            for p in parts
        ]
        fields = [torch.cat([p.fields()[i] for p in parts]) for i in (0, 1, 3, 4, 5)]
        return Items(fields[0], fields[1], torch.cat(contexts), *fields[2:])


@dataclass
class Profile:
    """Per (example, node): weight of the node's splits, and gain its items received."""

    split_weight: Tensor  # (N, nodes)
    received: Tensor  # (N, nodes, outputs)

    @classmethod
    def empty(cls, batch: int, forest: Forest, outputs: int) -> Profile:
        shape = (batch, forest.parent.shape[0])
        device = forest.parent.device
        zeros = torch.zeros(shape, dtype=torch.float64, device=device)
        return cls(zeros, torch.zeros(*shape, outputs, dtype=torch.float64, device=device))

    def record(self, split: Items, children: Items) -> None:
        self.split_weight.index_put_((split.example, split.node), split.weight, accumulate=True)
        index = (children.example, children.node)
        self.received.index_put_(index, children.gain(), accumulate=True)

    def share(self, items: Items, forest: Forest, credit: Tensor) -> None:
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


def split_exactly(split: Items, forest: Forest, evaluate: Evaluate, spent: Tensor) -> Items:
    """Evaluate every proper subset of each item's children; the children's items."""
    ks = forest.num_children[split.node]
    parts: list[Items] = []
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
    return Items.cat(parts)


def _children_items(group: Items, child: Tensor, table: Tensor, k: int) -> Items:
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
    return Items(
        group.example[:, None, None].expand(shape).reshape(-1),
        child[:, :, None].expand(shape).reshape(-1),
        torch.cat([context, added], dim=3).reshape(-1, group.context.shape[1] + k),
        table[:, without.reshape(-1)].reshape(-1, table.shape[-1]),
        table[:, with_p.reshape(-1)].reshape(-1, table.shape[-1]),
        (group.weight[:, None, None] * weight[None]).reshape(-1),
    )


def credit_leaves(items: Items, forest: Forest, credit: Tensor) -> Items:
    """Credit the items on leaves to their feature; return the others."""
    leaf = forest.leaf_id[items.node]
    on_leaf = leaf >= 0
    gain = items.gain()
    credit.index_put_((items.example[on_leaf], leaf[on_leaf]), gain[on_leaf], accumulate=True)
    return items.select(~on_leaf)


def share_equally(items: Items, forest: Forest, tree_of: Tensor, credit: Tensor) -> None:
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


class SampledSplit(NamedTuple):
    """What :func:`split_by_orderings` made of its items.

    ``children``: the children's items (those of one item's orderings that
    coincide merged, their weights summed); ``tails``: terminal items of
    partial orderings' tails (shared at the end, never split); what the
    profile may learn from, the whole orderings alone (a partial one is no
    unbiased split): ``profile_split``, the items weighed by their whole
    orderings' share, and ``profile_children``; ``orderings`` per item.
    """

    children: Items
    tails: Tails
    profile_split: Items
    profile_children: Items
    orderings: Tensor


def split_by_orderings(
    split: Items, rows: Tensor, forest: Forest, evaluate: Evaluate, spent: Tensor, seed: int
) -> SampledSplit:
    """Resolve items by sampled orderings of their children, ``rows[i]`` distinct prefixes each.

    Each item's distinct prefixes are evaluated once, all items' in one
    engine call.
    """
    ks = forest.num_children[split.node]
    pending = []
    requests, owners = [], []
    for k in sorted(set(ks.tolist())):
        picked = torch.nonzero(ks == k)[:, 0]
        group = split.select(ks == k)
        local = forest.roots[forest.tree[group.node]]
        context = torch.where(group.context >= 0, group.context - local[:, None], -1)
        draw = orderings_within(item_keys(group.node - local, context), rows[picked], k, seed)
        member = draw.membership()  # (O, k - 1, k)
        valid = torch.arange(k - 1, device=member.device)[None, :] < draw.prefixes[:, None]
        owner = draw.owner[:, None].expand(-1, k - 1)[valid]
        inverse, first = distinct_rows(owner, member[valid])
        child = forest.children[group.node, :k]
        item = owner[first]
        chosen = torch.where(member[valid][first], child[item], -1)
        requests.append(torch.cat([group.context[item], chosen], dim=1))
        owners.append(group.example[item])
        pending.append((picked, group, child, draw, valid, inverse, first.shape[0]))
    width = max(r.shape[1] for r in requests)
    padded = torch.cat(
        [torch.nn.functional.pad(r, (0, width - r.shape[1]), value=-1) for r in requests]
    )
    example_index = torch.cat(owners)
    values = evaluate(example_index, forest.coalitions(padded)).double()
    spent.index_add_(0, example_index, torch.ones_like(example_index))
    parts: list[list[Items]] = [[], [], []]
    tails = []
    orderings = torch.zeros_like(ks)
    cursor = 0
    for picked, group, child, draw, valid, inverse, count in pending:
        table = _prefix_table(group, draw, valid, values[cursor : cursor + count][inverse])
        cursor += count
        whole = draw.prefixes == child.shape[1] - 1
        learned = _ordered_children(group, draw, child, table, whole)
        fraction = torch.zeros_like(group.weight).index_add_(
            0, draw.owner[whole], draw.weight[whole]
        )
        parts[0] += [learned, _ordered_children(group, draw, child, table, ~whole)]
        tails.append(_tail_items(group, draw, child, table, forest))
        parts[1].append(dataclasses.replace(group, weight=group.weight * fraction))
        parts[2].append(learned)
        orderings.index_add_(0, picked[draw.owner], torch.ones_like(draw.owner))
    children, profile_split, profile_children = (Items.cat(p) for p in parts)
    return SampledSplit(children, Tails.cat(tails), profile_split, profile_children, orderings)


def _prefix_table(group: Items, draw: Any, valid: Tensor, values: Tensor) -> Tensor:
    """``(O, k + 1, outputs)``: ``v(c + first j children)`` of each ordering, j = 0..k.

    Prefixes past a partial ordering's last are left at zero (never read).
    """
    count, per = valid.shape
    outputs = values.shape[-1]
    table = values.new_zeros(count, per + 2, outputs)
    table[:, 0] = group.low[draw.owner]
    table[:, -1] = group.high[draw.owner]
    middle = values.new_zeros(count, per, outputs)
    middle[valid] = values
    table[:, 1:-1] = middle
    return table


def _ordered_children(
    group: Items, draw: Any, child: Tensor, table: Tensor, chosen: Tensor
) -> Items:
    """Items of the children placed within the ``chosen`` orderings' evaluated prefixes.

    Child at place j gets ``(v(first j + 1) - v(first j))``: the places below
    the ordering's prefixes, and the last place too when the ordering is
    whole. Items of one group item that coincide are merged.
    """
    k = draw.order.shape[1]
    place = torch.arange(k, device=child.device)
    whole = draw.prefixes == k - 1
    real = ((place[None, :] < draw.prefixes[:, None]) | whole[:, None]) & chosen[:, None]
    before = draw.ranks()[:, None, :] < place[None, :, None]  # (O, place, child position)
    ordering, at = torch.nonzero(real, as_tuple=True)
    position = draw.order[ordering, at]
    owner = draw.owner[ordering]
    inverse, first = distinct_rows(owner * k + position, before[ordering, at])
    share = group.weight[owner] * draw.weight[ordering]
    weight = share.new_zeros(first.shape[0]).index_add_(0, inverse, share)
    o, w = ordering[first], at[first]
    item = owner[first]
    preceding = torch.where(before[o, w], child[item], -1)
    return Items(
        group.example[item],
        child[item, position[first]],
        torch.cat([group.context[item], preceding], dim=1),
        table[o, w],
        table[o, w + 1],
        weight,
    )


def _tail_items(group: Items, draw: Any, child: Tensor, table: Tensor, forest: Forest) -> Tails:
    """The tails of partial orderings: the rest of the gain, by the children's sizes."""
    count, k = draw.order.shape
    place = torch.arange(k, device=child.device)
    tail = (place[None, :] >= draw.prefixes[:, None]) & (draw.prefixes < k - 1)[:, None]
    ordering, where = torch.nonzero(tail, as_tuple=True)
    item = draw.owner[ordering]
    node = child[item, draw.order[ordering, where]]
    size = forest.size[node].double()
    total = torch.zeros(count, dtype=torch.float64, device=child.device)
    total.index_add_(0, ordering, size)
    cut = draw.prefixes[ordering]
    fraction = size / total[ordering]
    items = Items(
        group.example[item],
        node,
        group.context[item],
        table[ordering, cut],
        table[ordering, -1],
        group.weight[item] * draw.weight[ordering] * fraction,
    )
    return Tails(items, ordering, group.node[item], fraction)


@dataclass
class Tails:
    """The tails of partial orderings: a child of the tail per item, by size for now.

    ``tail`` numbers the tails (items of one tail share it), ``parent`` is
    the node whose children they are and ``fraction`` each child's share of
    its tail's leaves.
    """

    items: Items
    tail: Tensor
    parent: Tensor
    fraction: Tensor

    @staticmethod
    def cat(parts: list[Tails]) -> Tails:
        offsets, tails, start = [], [], 0
        for part in parts:
            tails.append(part.tail + start)
            start += int(part.tail.max()) + 1 if part.tail.numel() else 0
            offsets.append(start)
        return Tails(
            Items.cat([p.items for p in parts]),
            torch.cat(tails),
            torch.cat([p.parent for p in parts]),
            torch.cat([p.fraction for p in parts]),
        )

    def by_profile(self, profile: Profile) -> Items:
        """The tails' items with each tail shared as its parent's profile says.

        As :meth:`Profile.share` shares a whole node among its children, here
        among the tail's: child C gets ``g |C| / |T| + w (r_C - |C| / |T|
        sum_T r)``, ``r_C`` the gain C's items received per unit of the
        parent's split weight (0 where it was never split: shares by size).
        """
        items = self.items
        if not items.example.numel():
            return items
        split = profile.split_weight[items.example, self.parent][:, None]
        received = profile.received[items.example, items.node]
        safe = split.clamp(min=torch.finfo(split.dtype).tiny)
        rate = torch.where(split > 0, received / safe, 0.0)
        count = int(self.tail.max()) + 1
        summed = rate.new_zeros(count, rate.shape[1]).index_add_(0, self.tail, rate)
        weight = (items.weight / self.fraction)[:, None]
        gain = items.gain() + weight * (rate - self.fraction[:, None] * summed[self.tail])
        high = gain / items.weight[:, None]
        return dataclasses.replace(items, low=torch.zeros_like(gain), high=high)
