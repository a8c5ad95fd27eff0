"""Connected node sets: enumeration, components and boundaries, on bitmasks.

The functions take plain adjacency data (``nbr[v]``: the bitmask of the
neighbours of ``v``; ``lists[v]``: their sorted ids; the padded neighbour
table) and node sets as bitmasks (:mod:`~captum_graphshap.graphs.bitsets`).
:class:`~captum_graphshap.graphs.FeatureGraph` validates the arguments,
caches and documents the public forms.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from .bitsets import bits, mask_members

__all__ = [
    "TooManySets",
    "all_connected_masks",
    "all_connected_sets",
    "as_csr",
    "boundaries",
    "boundary_of_mask",
    "components_of_mask",
    "connected_masks",
    "connected_sets_within",
    "enumerate_connected",
]


class TooManySets(ValueError):
    """The enumeration of connected sets passed its ``max_count``."""


def enumerate_connected(
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
        raise TooManySets(f"more than {limit:,} connected subsets.")
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
            raise TooManySets(f"more than {limit:,} connected subsets.")
        child = (c | nbr[v.bit_length() - 1]) & allowed & ~s & ~f
        if child and (max_size < 0 or s.bit_count() < max_size):
            sets.append(s)
            candidates.append(child)
            forbidden.append(f)


def connected_masks(
    nbr: Sequence[int],
    root: int,
    allowed: int,
    max_count: int | None = None,
    out: list[int] | None = None,
) -> list[int]:
    """Bitmasks of every connected set containing ``root`` inside ``allowed``.

    Each set is produced once, in no particular order, appended to
    ``out`` (a new list by default), which is returned. When ``out``
    would grow beyond ``max_count`` entries the enumeration stops and
    raises :class:`TooManySets`, a ``ValueError``.
    """
    out = [] if out is None else out
    limit = max_count if max_count is not None else -1
    enumerate_connected(nbr, root, allowed, out, limit)
    return out


def all_connected_masks(nbr: Sequence[int], n: int, max_count: int | None) -> list[int]:
    """Bitmasks of every non-empty connected set, each once (by smallest node).

    Raises :class:`TooManySets` beyond ``max_count`` sets (None: no limit).
    """
    full = (1 << n) - 1
    masks: list[int] = []
    for root in range(n):
        # Sets whose smallest node is root: each set counted once.
        above = full & ~((1 << root) - 1)
        connected_masks(nbr, root, above, max_count, masks)
    return masks


def components_of_mask(nbr: Sequence[int], mask: int) -> list[int]:
    """Connected components of the subgraph induced by bitmask ``mask``.

    Returns one bitmask per component, ordered by smallest node. Each
    node is expanded once, so the cost is linear in the set's size.
    """
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


def boundary_of_mask(nbr: Sequence[int], mask: int) -> int:
    """Bitmask of the nodes outside ``mask`` adjacent to it."""
    frontier = 0
    for node in bits(mask):
        frontier |= nbr[node]
    return frontier & ~mask


def as_csr(
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


def connected_sets_within(
    lists: Sequence[Sequence[int]],
    roots: list[int],
    within: Tensor,
    limit: int,
    size_cap: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """CSR ``(group, members, offsets)`` of the connected sets of each ``(root, within)``.

    The body of :meth:`FeatureGraph.connected_sets
    <captum_graphshap.graphs.FeatureGraph.connected_sets>`, with its arguments
    checked: ``lists`` the sorted neighbours of each node, ``within`` a long
    ``(G, W)`` tensor, ``limit`` and ``size_cap`` ints (``-1``: none).
    """
    groups, members, lengths = [], [], []
    found = 0
    for g, (root, row) in enumerate(zip(roots, within.tolist())):
        ids = [u for u in row if u >= 0]
        position = {u: p for p, u in enumerate(ids)}
        if root not in position:
            raise ValueError(f"within[{g}] must contain its root {root}.")
        local = [
            functools.reduce(operator.or_, (1 << position[v] for v in lists[u] if v in position), 0)
            for u in ids
        ]
        masks: list[int] = []
        remaining = -1 if limit < 0 else limit - found
        try:
            enumerate_connected(
                local, position[root], (1 << len(ids)) - 1, masks, remaining, size_cap
            )
        except TooManySets:
            raise ValueError(
                f"more than {limit:,} connected subsets in the allowed node sets."
            ) from None
        found += len(masks)
        rows, local_ids = mask_members(masks, len(ids))
        members.append(torch.tensor(ids, dtype=torch.long)[local_ids])
        lengths.append(torch.bincount(rows, minlength=len(masks)))
        groups.append(torch.full((len(masks),), g, dtype=torch.long))
    return as_csr(groups, members, lengths)


def all_connected_sets(nbr: Sequence[int], n: int, limit: int | None) -> tuple[Tensor, Tensor]:
    """``(members, offsets)`` of every non-empty connected set, by smallest node.

    Raises ``ValueError`` beyond ``limit`` sets (None: no limit).
    """
    full = (1 << n) - 1
    members, lengths = [], []
    found = 0
    for root in range(n):
        masks: list[int] = []
        remaining = -1 if limit is None else limit - found
        try:
            enumerate_connected(nbr, root, full & ~((1 << root) - 1), masks, remaining)
        except TooManySets:
            raise ValueError(
                f"the graph has more than {limit:,} connected subsets; use a coarser graph "
                "(group features with feature_mask, e.g. patches or superpixels)."
            ) from None
        found += len(masks)
        rows, ids = mask_members(masks, n)
        members.append(ids)
        lengths.append(torch.bincount(rows, minlength=len(masks)))
    _, flat, offsets = as_csr([], members, lengths)
    return flat, offsets


def boundaries(
    table: Tensor, members: Tensor, offsets: Tensor, num_nodes: int
) -> tuple[Tensor, Tensor]:
    """``(set_index, node)`` pairs: the nodes adjacent to each CSR set and outside it.

    ``table`` is the ``-1`` padded neighbour table. Pairs come sorted by set,
    then node; vectorised, in chunks of sets.
    """
    n = max(num_nodes, 1)
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
