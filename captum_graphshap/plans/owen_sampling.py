"""Sampled splits of the budgeted Owen walk: orderings of a node's children.

A walk item ``(B, c, w)`` holds ``v(c)`` and ``v(c + B)``; splitting it
exactly evaluates every proper subset of B's ``k`` children (``2^k - 2``
rows). When that is more than the item's share of the budget, the walk
draws orderings of the children instead (Owen sampling, one level): each
ordering costs its ``k - 1`` proper prefixes, and child ``p`` at position
``j`` gets the item ``(p, c + first j children, w / m)``, whose gain is its
marginal contribution there. Over uniform orderings this is an unbiased
estimate of the exact split's child items, and every ordering's
contributions add up to the item's gain, so the walk stays efficient.
Orderings come in antithetic pairs (an ordering, then its reverse).

The orderings are a function of a seed, the item's node and its context
(a counter-based hash), not of the example's place in the batch, so an
example explained alone gets the same orderings as in a batch.

A *partial* ordering (its first ``t < k - 1`` prefixes) spends a remainder
too small for a whole one: its first ``t`` children get their marginal
contributions, and the rest of the gain (its tail) goes to the remaining
children at the end of the walk, by the parent's profile or their sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "OrderingDraw",
    "distinct_prefixes_added",
    "distinct_rows",
    "draw_orderings",
    "item_keys",
    "mix",
    "orderings_within",
    "segment_cumsum",
    "segment_starts",
]

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_MUL1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MUL2 = -7723592293110705685  # 0x94D049BB133111EB


def _shift_right(x: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: Tensor) -> Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping arithmetic): a bijective hash."""
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MUL1
    x = (x ^ _shift_right(x, 27)) * _MUL2
    return x ^ _shift_right(x, 31)


def item_keys(local_node: Tensor, local_context: Tensor) -> Tensor:
    """``(E,)`` a key per (node, context) item, independent of the order of the context's members.

    ``local_context`` is ``(E, W)`` node ids within their tree, -1 padded.
    """
    members = torch.where(local_context >= 0, mix(local_context + 1), 0).sum(dim=1)
    return mix(mix(local_node) ^ members)


@dataclass(frozen=True)
class OrderingDraw:
    """``O`` orderings of the children of their items.

    ``owner`` is the item of each ordering, ``order[o, j]`` the child
    position (0..k-1) at place ``j``, ``prefixes[o]`` how many proper
    prefixes are evaluated (``k - 1`` for a whole ordering) and
    ``weight[o]`` the share of its item's weight (``1 / orderings``).
    """

    owner: Tensor
    order: Tensor
    prefixes: Tensor
    weight: Tensor

    def ranks(self) -> Tensor:
        """``(O, k)``: the place of child position c in each ordering (the inverse of ``order``)."""
        count, k = self.order.shape
        places = torch.arange(k, device=self.order.device).expand(count, k)
        return torch.empty_like(self.order).scatter_(1, self.order, places)

    def membership(self) -> Tensor:
        """``(O, k - 1, k)`` bool: whether child position c is in prefix ``j + 1``."""
        places = torch.arange(self.order.shape[1] - 1, device=self.order.device)
        return self.ranks()[:, None, :] <= places[None, :, None]


def draw_orderings(keys: Tensor, orderings: Tensor, k: int, seed: int) -> OrderingDraw:
    """``orderings[i]`` whole orderings of ``k`` children for the item with ``keys[i]``.

    Antithetic pairs: ordering ``2j + 1`` of an item is the reverse of ordering
    ``2j``. Every ordering weighs ``1 / orderings[i]`` of its item.
    """
    device = keys.device
    owner = torch.repeat_interleave(torch.arange(keys.shape[0], device=device), orderings)
    first = torch.cumsum(orderings, 0) - orderings
    index = torch.arange(owner.shape[0], device=device) - first[owner]
    pair = index // 2
    positions = torch.arange(k, device=device)
    salted = mix(keys[owner] ^ mix(torch.full_like(pair, seed) + pair))
    order = torch.argsort(mix(salted[:, None] ^ mix(positions + 7919)[None, :]), dim=1)
    order = torch.where((index % 2 == 1)[:, None], order.flip(1), order)
    prefixes = torch.full_like(owner, k - 1)
    weight = 1.0 / orderings[owner].to(torch.float64)
    return OrderingDraw(owner, order, prefixes, weight)


def orderings_within(keys: Tensor, rows: Tensor, k: int, seed: int) -> OrderingDraw:
    """Orderings per item whose distinct proper prefixes number at most ``rows[i]``.

    Orderings of few children repeat prefixes, which are evaluated once: an
    item takes whole orderings while its distinct prefixes stay within its
    rows, then one partial ordering of the prefixes left (fewer than
    ``k - 1``). A whole ordering weighs 1, a partial one ``t / (k - 1)`` for
    its ``t`` prefixes, normalised per item.
    """
    per = k - 1
    wanted = 3 * ((rows + per - 1) // per) + 2
    draw = draw_orderings(keys, wanted, k, seed)
    added = distinct_prefixes_added(draw)
    whole = segment_cumsum(added, draw.owner) <= rows[draw.owner]
    kept = torch.zeros_like(rows).index_add_(0, draw.owner, whole.long())
    spent_whole = torch.zeros_like(rows).index_add_(0, draw.owner, torch.where(whole, added, 0))
    # the first ordering past the whole ones, cut to the prefixes left
    first = torch.cumsum(wanted, 0) - wanted
    index = torch.arange(draw.owner.shape[0], device=keys.device) - first[draw.owner]
    left = rows - spent_whole
    partial = (index == kept[draw.owner]) & (left[draw.owner] > 0)
    keep = torch.nonzero(whole | partial)[:, 0]  # one host sync for the three selections
    owner = draw.owner[keep]
    prefixes = torch.where(partial[keep], left[owner].clamp(max=per), per)
    mass = prefixes.to(torch.float64)
    total = torch.zeros(rows.shape[0], dtype=torch.float64, device=keys.device)
    total.index_add_(0, owner, mass)
    return OrderingDraw(owner, draw.order[keep], prefixes, mass / total[owner])


def distinct_prefixes_added(draw: OrderingDraw) -> Tensor:
    """``(O,)`` the proper prefixes of each ordering not among its item's earlier orderings'."""
    count, k = draw.order.shape
    member = draw.membership().reshape(count * (k - 1), k)
    inverse, first = distinct_rows(draw.owner.repeat_interleave(k - 1), member)
    position = torch.arange(inverse.shape[0], device=inverse.device)
    new = (first[inverse] == position).long().view(count, k - 1)
    return new.sum(dim=1)


def distinct_rows(key: Tensor, bits: Tensor) -> tuple[Tensor, Tensor]:
    """Ids of equal ``(key, bits)`` rows: ``inverse`` per row and the first row of each id.

    ``key`` is a non-negative int64 per row, ``bits`` a ``(rows, k)`` bool.
    One flat sort of ``key << k | bits`` where that fits in int64, else a
    row sort.
    """
    k = bits.shape[1]
    top = int(key.max()) + 1 if key.numel() else 1
    if k <= 62 and top < 2 ** (62 - k):
        weights = torch.ones(1, dtype=torch.long, device=bits.device) << torch.arange(
            k, device=bits.device
        )
        codes = (key << k) | (bits.long() * weights).sum(dim=1)
        inverse = torch.unique(codes, return_inverse=True)[1]
    else:
        keyed = torch.cat([key[:, None], bits.long()], dim=1)
        inverse = torch.unique(keyed, dim=0, return_inverse=True)[1]
    position = torch.arange(inverse.shape[0], device=inverse.device)
    size = int(inverse.max()) + 1 if inverse.numel() else 0
    first = torch.full((size,), inverse.shape[0], dtype=torch.long, device=inverse.device)
    return inverse, first.scatter_reduce(0, inverse, position, reduce="amin")


def segment_starts(segment: Tensor) -> Tensor:
    """Bool: where a new value of ``segment`` (sorted) begins."""
    first = torch.ones_like(segment, dtype=torch.bool)
    first[1:] = segment[1:] != segment[:-1]
    return first


def segment_cumsum(values: Tensor, segment: Tensor) -> Tensor:
    """Running sums of ``values`` restarting at each new value of ``segment`` (sorted)."""
    running = values.cumsum(0)
    positions = torch.arange(segment.shape[0], device=segment.device)
    start = torch.cummax(torch.where(segment_starts(segment), positions, 0), 0).values
    return running - running[start] + values[start]
