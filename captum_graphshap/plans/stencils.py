"""L-Shapley and C-Shapley plans on grids and lines, built from one stencil.

On a ``height x width`` grid (a line is a ``1 x n`` grid) the k-ball of a pixel
is the translated Manhattan stencil ``|dr| + |dc| <= k`` cut at the border,
and grid distance is Manhattan distance. So the subsets of a ball (L-Shapley)
and its connected subsets containing the centre (C-Shapley) are enumerated
once, as bitmasks over the stencil's offsets, and translated to every pixel
with tensor operations: a translated set is used at pixel i exactly when all
its members fall inside the grid (connectivity is kept, since adjacency inside
the grid is adjacency of offsets).

Coalitions are deduplicated with exact int64 keys: every set of offsets is
normalised to a *shape* (its members relative to its first member in
row-major order) and an *anchor* pixel, and two coalitions are equal exactly
when shape and anchor are. Memory grows with the members of the distinct
coalitions (a :class:`~captum_graphshap.engine.plan.MemberCoalitions`), never
with ``d`` per coalition, and no Python loop runs per pixel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..engine.plan import IntervalCoalitions, MemberCoalitions, Plan
from ..graphs import FeatureGraph, GridGraph, LineGraph
from .limits import check_plan_size
from .linear import SparseLinearMap, myerson_weight, popcount, shapley_weights

#: Above this many (feature, set) pairs a plan is refused before it is built,
#: whatever deduplication would leave: the build itself would be too large.
MAX_PAIRS = 2**25
#: Stencils of more offsets do not fit an int64 bitmask.
MAX_STENCIL = 62


def grid_shape(graph: FeatureGraph) -> tuple[int, int] | None:
    """``(height, width)`` of a grid or line graph, None for other graphs."""
    if isinstance(graph, GridGraph):
        return graph.height, graph.width
    if isinstance(graph, LineGraph):
        return 1, graph.num_nodes
    return None


def stencil(k: int, height: int, width: int) -> Tensor:
    """``(S, 2)`` offsets ``(dr, dc)`` with ``|dr| + |dc| <= k``, the centre first.

    Offsets farther than the grid's size never fall inside it and are left
    out (a line has a one-dimensional stencil).
    """
    reach_r, reach_c = min(k, height - 1), min(k, width - 1)
    rows = range(-reach_r, reach_r + 1)
    cols = range(-reach_c, reach_c + 1)
    others = [(r, c) for r in rows for c in cols if 0 < abs(r) + abs(c) <= k]
    return torch.tensor([(0, 0), *others], dtype=torch.long)


def fits(k: int, height: int, width: int) -> bool:
    """Whether the stencil plan applies: its offsets fit an int64 bitmask."""
    return stencil(k, height, width).shape[0] <= MAX_STENCIL


# ------------------------------------------------------------------ L-Shapley


def l_shapley_grid_plan(height: int, width: int, k: int, context: str, limit: int) -> Plan:
    """L-Shapley's plan (Eq. 5) on a grid, as the bitmask builder defines it."""
    who = f"LShapley with k={k}"
    grid = _placed(k, height, width)
    others = grid.inside[:, 1:]
    ball_sizes = grid.inside.sum(dim=1)
    pairs = int((2 ** (ball_sizes - 1).double()).sum())
    if pairs > MAX_PAIRS:
        _refuse(who, 2 * pairs, limit, ball_sizes)
    pixel, subset = _submask_pairs(_codes(others), grid.offsets.shape[0] - 1)
    size = popcount(subset, grid.offsets.shape[0] - 1)
    m = ball_sizes[pixel]
    weight = _shapley_weight_table(int(m.max()))[m, size]
    with_i = (subset << 1) | 1
    without = subset << 1
    return _assemble(grid, pixel, with_i, without, weight, context, limit, who)


# ------------------------------------------------------------------ C-Shapley


def c_shapley_grid_plan(
    height: int, width: int, k: int, context: str, weights: str, limit: int
) -> Plan:
    """C-Shapley's plan (Eq. 6) on a grid, as the bitmask builder defines it."""
    who = f"CShapley with k={k}"
    grid = _placed(k, height, width)
    sets = _connected_sets(grid.offsets, k, limit)  # (C,) bitmasks containing the centre
    inside_code = _codes(grid.inside)  # (P,) bitmask of the stencil offsets inside the grid
    valid = (sets[None, :] & ~inside_code[:, None]) == 0  # (P, C)
    count = int(valid.sum())
    if 2 * count > MAX_PAIRS:
        raise ValueError(_more_than(who, limit))
    pixel, which = valid.nonzero(as_tuple=True)
    chosen = sets[which]
    size = popcount(chosen, grid.offsets.shape[0])
    if weights == "myerson":
        boundary = _boundary_counts(grid.offsets, sets, height, width)[pixel, which]
        weight = _myerson_weight_table(int(size.max()), int(boundary.max()))[size, boundary]
    else:
        weight = 2.0 / ((size + 2) * (size + 1) * size).double()
    return _assemble(grid, pixel, chosen, chosen & ~1, weight, context, limit, who)


# ------------------------------------------------------------------ assembly


class _Placed(NamedTuple):
    """A stencil on a ``height x width`` grid: its ``(S, 2)`` offsets and ``(P, S)``
    which of them fall inside the grid around each pixel."""

    height: int
    width: int
    offsets: Tensor
    inside: Tensor


def _placed(k: int, height: int, width: int) -> _Placed:
    offsets = stencil(k, height, width)
    return _Placed(height, width, offsets, _inside(offsets, height, width))


def _assemble(
    grid: _Placed,
    pixel: Tensor,
    with_i: Tensor,
    without: Tensor,
    weight: Tensor,
    context: str,
    limit: int,
    who: str,
) -> Plan:
    """Distinct coalitions and the map ``phi_i += w (v(with_i) - v(without))``.

    With ``context="input"`` every coalition is stored as the complement of
    the ball's absent members, so the rest of the input stays present.
    ``who`` names the method in a refusal.
    """
    height, width, offsets, inside = grid
    if context == "input":
        ball = _codes(inside)[pixel]
        with_i, without = ball & ~with_i, ball & ~without
    masks = torch.cat([with_i, without])
    where = torch.cat([pixel, pixel])
    shape_of, anchor_of, members_of = _shapes(masks, offsets)
    anchor = _translate(where, anchor_of, width, offsets)
    anchor = torch.where(shape_of == 0, torch.zeros_like(anchor), anchor)  # one empty set
    d = height * width
    keys = shape_of * d + anchor
    unique, inverse = unique_small(keys)
    check_plan_size(
        unique.numel(),
        limit,
        who,
        "use a smaller k or group elements into fewer features (patches, superpixels) "
        "with feature_mask.",
    )
    first = torch.full((unique.numel(),), keys.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(keys.numel()), reduce="amin")
    coalitions = _members(
        shape_of[first], anchor[first], members_of, width, d, complement=context == "input"
    )
    estimator = SparseLinearMap(
        torch.cat([pixel, pixel]),
        inverse,
        torch.cat([weight, -weight]).to(torch.float64),
        d,
    )
    return Plan(coalitions, estimator, distinct=True)


def _shapes(masks: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Per mask: its shape id, the index of its anchor offset, and each shape's members.

    A shape is a mask's offsets relative to its first offset in row-major
    order; ``members_of[s]`` lists shape ``s``'s offsets as ``(dr, dc)``
    relative to the anchor. The empty set is shape 0, anchored at the centre.
    """
    distinct, back = unique_small(masks)
    order = torch.argsort(offsets[:, 0] * 4096 + offsets[:, 1])  # row-major
    shape_ids: dict[tuple[tuple[int, int], ...], int] = {(): 0}
    members_of: list[Tensor] = [torch.zeros((0, 2), dtype=torch.long)]
    shape_of_distinct, anchor_of_distinct = [], []
    for mask in distinct.tolist():
        present = [int(j) for j in order.tolist() if mask >> j & 1]
        if not present:
            shape_of_distinct.append(0)
            anchor_of_distinct.append(0)
            continue
        base = offsets[present[0]]
        relative = offsets[present] - base
        key = tuple((int(r), int(c)) for r, c in relative.tolist())
        if key not in shape_ids:
            shape_ids[key] = len(members_of)
            members_of.append(relative)
        shape_of_distinct.append(shape_ids[key])
        anchor_of_distinct.append(present[0])
    shape_of = torch.tensor(shape_of_distinct, dtype=torch.long)[back]
    anchor_of = torch.tensor(anchor_of_distinct, dtype=torch.long)[back]
    return shape_of, anchor_of, members_of


def _translate(pixel: Tensor, anchor_offset: Tensor, width: int, offsets: Tensor) -> Tensor:
    """The pixel id of each coalition's anchor (pixel + its anchor offset)."""
    delta = offsets[anchor_offset]
    return pixel + delta[:, 0] * width + delta[:, 1]


def _members(
    shape: Tensor,
    anchor: Tensor,
    members_of: list[Tensor],
    width: int,
    d: int,
    complement: bool,
) -> MemberCoalitions:
    """CSR member ids of the distinct coalitions: anchor + the shape's offsets."""
    lengths = torch.tensor([m.shape[0] for m in members_of], dtype=torch.long)
    longest = int(lengths.max()) if lengths.numel() else 0
    table = torch.full((len(members_of), max(longest, 1)), -1, dtype=torch.long)
    for index, relative in enumerate(members_of):
        if relative.numel():
            table[index, : relative.shape[0]] = relative[:, 0] * width + relative[:, 1]
    flat = table[shape]  # (U, longest)
    present = flat >= 0
    ids = torch.where(present, anchor[:, None] + flat, torch.full_like(flat, -1))
    flags = torch.ones(shape.shape[0], dtype=torch.bool) if complement else None
    return MemberCoalitions.from_padded(ids, d, flags)


# ------------------------------------------------------------------ helpers


def unique_small(values: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.unique(values, return_inverse=True)`` for non-negative int64 values.

    When the values span a range of at most a few times their count (the
    keys of stencil plans: shape ids times ``d`` plus an anchor pixel), one
    table over the range replaces the sort: linear time, the same result.
    """
    if values.numel() == 0:
        return torch.unique(values, return_inverse=True)
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    if low < 0 or span > 4 * values.numel() + 2**16:
        return torch.unique(values, return_inverse=True)
    shifted = values - low
    present = torch.zeros(span, dtype=torch.bool, device=values.device)
    present[shifted] = True
    distinct = present.nonzero()[:, 0]
    position = torch.cumsum(present, dim=0) - 1
    return distinct + low, position[shifted]


def _inside(offsets: Tensor, height: int, width: int) -> Tensor:
    """``(P, S)`` bool: whether offset s of pixel p falls inside the grid."""
    pixel = torch.arange(height * width)
    rows, cols = pixel // width, pixel % width
    r = rows[:, None] + offsets[None, :, 0]
    c = cols[:, None] + offsets[None, :, 1]
    return (r >= 0) & (r < height) & (c >= 0) & (c < width)


def _codes(bits: Tensor) -> Tensor:
    """Bitmask codes of the rows of a bool matrix (bit j = column j)."""
    weights = torch.ones(bits.shape[1], dtype=torch.long) << torch.arange(bits.shape[1])
    return (bits.long() * weights).sum(dim=1)


def _submask_pairs(codes: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """Every ``(pixel, submask)`` with submask a subset of ``codes[pixel]`` (``bits`` wide).

    Pixels are grouped by their code (an interior code and a few border
    ones), so the enumeration is one tensor product per group.
    """
    everything = torch.arange(2**bits, dtype=torch.long)
    pixels, subsets = [], []
    distinct, back = torch.unique(codes, return_inverse=True)
    for group, code in enumerate(distinct.tolist()):
        members = (back == group).nonzero()[:, 0]
        submasks = everything[(everything & ~code) == 0]
        pixels.append(members.repeat_interleave(submasks.numel()))
        subsets.append(submasks.repeat(members.numel()))
    return torch.cat(pixels), torch.cat(subsets)


def _shapley_weight_table(largest: int) -> Tensor:
    """``table[m, s]`` = the Shapley weight of a size-s coalition in an m-player game."""
    table = torch.zeros(largest + 1, max(largest, 1), dtype=torch.float64)
    for m in range(1, largest + 1):
        table[m, :m] = torch.tensor(shapley_weights(m), dtype=torch.float64)
    return table


def _myerson_weight_table(largest: int, boundary: int) -> Tensor:
    table = torch.zeros(largest + 1, boundary + 1, dtype=torch.float64)
    for size in range(1, largest + 1):
        for b in range(boundary + 1):
            table[size, b] = myerson_weight(size, b)
    return table


def _connected_sets(offsets: Tensor, k: int, limit: int) -> Tensor:
    """Bitmasks of the connected sets of stencil offsets that contain the centre."""
    index = {(int(r), int(c)): j for j, (r, c) in enumerate(offsets.tolist())}
    neighbours = [0] * len(index)
    for (r, c), j in index.items():
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            other = index.get((r + dr, c + dc))
            if other is not None:
                neighbours[j] |= 1 << other
    found: list[int] = []
    budget = limit // 2 + 1
    # Sets grow from the centre by adding neighbours above a frontier mark:
    # the classic enumeration of connected sets, each produced once.
    stack = [(1, neighbours[0], 1)]
    while stack:
        current, frontier, banned = stack.pop()
        found.append(current)
        if len(found) > budget:
            raise ValueError(_more_than(f"CShapley with k={k}", limit))
        candidates = frontier & ~banned
        while candidates:
            low = candidates & -candidates
            candidates ^= low
            j = low.bit_length() - 1
            banned |= low
            stack.append((current | low, (frontier | neighbours[j]) & ~(current | low), banned))
    return torch.tensor(found, dtype=torch.long)


def _boundary_counts(offsets: Tensor, sets: Tensor, height: int, width: int) -> Tensor:
    """``(P, C)``: how many grid nodes adjacent to set c (at pixel p) lie outside it."""
    index = {(int(r), int(c)): j for j, (r, c) in enumerate(offsets.tolist())}
    ring: dict[tuple[int, int], int] = {}
    boundary_lists = []
    for mask in sets.tolist():
        members = [offsets[j].tolist() for j in range(offsets.shape[0]) if mask >> j & 1]
        outside = set()
        for r, c in members:
            for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                spot = (r + dr, c + dc)
                if spot not in index or not mask >> index[spot] & 1:
                    outside.add(spot)
        boundary_lists.append(sorted(outside))
        for spot in outside:
            ring.setdefault(spot, len(ring))
    spots = torch.tensor(list(ring), dtype=torch.long).reshape(-1, 2)
    inside = _inside(spots, height, width).long()  # (P, R)
    incidence = torch.zeros(len(ring), sets.numel(), dtype=torch.long)
    for column, spots_of_set in enumerate(boundary_lists):
        for spot in spots_of_set:
            incidence[ring[spot], column] = 1
    return inside @ incidence


def _more_than(method: str, limit: int) -> str:
    return (
        f"{method} would evaluate more than {limit:,} coalitions per example "
        f"(2^{limit.bit_length() - 1}); use a smaller k or group elements into fewer "
        "features (patches, superpixels) with feature_mask."
    )


def _refuse(method: str, count: int, limit: int, ball_sizes: Tensor) -> None:
    check_plan_size(
        count,
        limit,
        method,
        f"its largest neighbourhood has {int(ball_sizes.max())} features. Use a smaller k "
        "or group elements into fewer features (patches, superpixels) with feature_mask.",
    )
    raise ValueError(_more_than(method, limit))


# ------------------------------------------------------------------ Myerson on a line


def line_myerson_plan(n: int) -> Plan:
    """The Myerson value on a line: the empty set and every interval, O(n^2) in all.

    With ``V[a, b] = v0([a, b])`` (``v0 = v - v(empty)``) and ``w(a, b)`` the
    Myerson weight of the interval (its size, and a boundary of 0, 1 or 2
    nodes), the components of ``[a, b]`` without ``i`` are ``[a, i-1]`` and
    ``[i+1, b]``, so

    ``phi_i = sum_{a<=i<=b} w(a,b) V[a,b] - sum_{a<i} V[a,i-1] W_after(a, i)
    - sum_{b>i} V[i+1,b] W_before(i, b)``

    with the weights summed over the free end: three masked sums over an
    ``n x n`` table, never a sparse map of the ``n^3/6`` (interval, member) pairs.
    """
    first, last = torch.triu_indices(n, n)
    starts = torch.cat([torch.ones(1, dtype=torch.long), first])  # [1, 0] is the empty set
    ends = torch.cat([torch.zeros(1, dtype=torch.long), last])
    weight = _line_weights(n)  # (n, n), zero below the diagonal
    after = torch.flip(torch.cumsum(torch.flip(weight, [1]), dim=1), [1])  # sum over b >= j
    before = torch.cumsum(weight, dim=0)  # sum over a <= i
    lower = torch.ones(n, n, dtype=torch.bool).tril()  # [a, i]: a <= i

    def estimate(values: Tensor) -> Tensor:
        # V is upper triangular (a <= b): terms with an empty part vanish by themselves
        table = values.new_zeros(values.shape[0], n, n)
        table[:, first, last] = values[:, 1:] - values[:, :1]
        w, w_after, w_before, mask = (
            t.to(values.device, values.dtype) for t in (weight, after, before, lower)
        )
        # sum_{a<=i} sum_{b>=i} w V: suffix sums over b, kept where a <= i
        suffix = torch.flip(torch.cumsum(torch.flip(w * table, [2]), dim=2), [2])
        phi = (suffix * mask.T[None]).sum(dim=1)
        # sum_{a<=i-1} V[a, i-1] W_after[a, i]
        phi[:, 1:] -= (table[:, :, :-1] * w_after[None, :, 1:]).sum(dim=1)
        # sum_{b>=i+1} V[i+1, b] W_before[i, b]
        phi[:, :-1] -= (table[:, 1:, :] * w_before[None, :-1, :]).sum(dim=2)
        return phi

    return Plan(IntervalCoalitions(starts, ends, n), estimate, distinct=True)


def _line_weights(n: int) -> Tensor:
    """``w[a, b]``: the Myerson weight of the interval ``[a, b]`` of a line of n nodes."""
    size = torch.arange(n)[None, :] - torch.arange(n)[:, None] + 1
    boundary = (torch.arange(n)[:, None] > 0).long() + (torch.arange(n)[None, :] < n - 1).long()
    table = _myerson_weight_table(n, 2)
    return torch.where(size > 0, table[size.clamp(min=0), boundary], torch.zeros(()).double())
