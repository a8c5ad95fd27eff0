"""L-Shapley and C-Shapley plans (Chen et al., ICLR 2019), and the regression variant.

Grids and lines of any size take the stencil builders (:mod:`.stencils`);
every other graph is enumerated node by node in the ball's local coordinates
(bit ``p`` = the ``p``-th node of the ball), and the coalitions are kept as
member ids (:class:`~captum_graphshap.engine.plan.MemberCoalitions`), never as
``d`` bits each. Coalitions shared by several features are merged by exact
keys (padded sorted member ids), so each is evaluated once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..engine.plan import MemberCoalitions, Plan
from ..graphs import FeatureGraph, GridGraph, LineGraph
from . import stencils
from .limits import (
    MAX_COALITIONS,
    MAX_GRAPH_COALITIONS,
    check_choice,
    check_neighbourhood_plan_size,
)
from .linear import SparseLinearMap, myerson_weight, shapley_weights

L_CONTEXTS = ("baseline", "input")
C_WEIGHTS = ("myerson", "paper")


# ------------------------------------------------------------ every subset of each ball


@dataclass(frozen=True)
class BallSubsets:
    """Every subset of each ball ``N_k(i)``, feature after feature.

    Row ``starts[i] + c`` is the subset of ``i``'s sorted ball selected by the
    bits of ``c`` (bit ``p`` = ``balls[i, p]``), ``c = 0 .. 2^sizes[i] - 1``;
    its sorted member ids are ``members[offsets[r]:offsets[r + 1]]``.
    """

    members: Tensor  # (P,) long
    offsets: Tensor  # (R + 1,) long
    feature: Tensor  # (R,) the feature whose ball row r is a subset of
    code: Tensor  # (R,) the subset's bits over that ball
    balls: Tensor  # (n, W) sorted ball members, -1 padded
    sizes: Tensor  # (n,) |N_k(i)|
    players: Tensor  # (n,) position of i in its ball
    starts: Tensor  # (n,) first row of each feature

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def lengths(self) -> Tensor:
        return self.offsets[1:] - self.offsets[:-1]


def ball_subsets(graph: FeatureGraph, k: int) -> BallSubsets:
    """All ``sum_i 2^|N_k(i)|`` subsets of the balls of ``graph`` (cached per graph).

    Callers refuse oversized plans first (:func:`~.limits.check_neighbourhood_plan_size`).
    Features with balls of one size are enumerated together by one tensor
    product, so there is no loop over features or subsets.
    """
    return _ball_subsets_cached(graph, k)


@functools.lru_cache(maxsize=32)
def _ball_subsets_cached(graph: FeatureGraph, k: int) -> BallSubsets:
    balls = graph.balls(k)
    n = graph.num_nodes
    sizes = (balls >= 0).sum(dim=1)
    nodes = torch.arange(n)
    players = (balls < nodes[:, None]).logical_and(balls >= 0).sum(dim=1)
    counts = torch.ones(n, dtype=torch.long) << sizes
    starts = torch.zeros(n, dtype=torch.long)
    starts[1:] = counts.cumsum(0)[:-1]
    total = int(counts.sum())
    row_feature = torch.repeat_interleave(nodes, counts)
    row_code = torch.arange(total) - starts[row_feature]
    groups = []
    lengths = torch.zeros(total, dtype=torch.long)
    for m in torch.unique(sizes).tolist():
        features = (sizes == m).nonzero()[:, 0]
        codes = torch.arange(1 << m)
        bits = ((codes[:, None] >> torch.arange(m)) & 1).bool()  # (2^m, m)
        rows = starts[features][:, None] + codes[None, :]  # (F, 2^m)
        lengths[rows] = bits.sum(dim=1)
        groups.append((features, bits, rows))
    offsets = torch.zeros(total + 1, dtype=torch.long)
    offsets[1:] = lengths.cumsum(0)
    members = torch.empty(int(offsets[-1]), dtype=torch.long)
    for features, bits, rows in groups:
        # member p of subset c goes after the members of c below p
        rank = bits.cumsum(dim=1) - 1  # (2^m, m)
        position = offsets[rows][:, :, None] + rank[None]  # (F, 2^m, m)
        chosen = bits.expand(features.numel(), -1, -1)
        ids = balls[features, : bits.shape[1]][:, None, :].expand_as(position)
        members[position[chosen]] = ids[chosen]
    return BallSubsets(members, offsets, row_feature, row_code, balls, sizes, players, starts)


# ------------------------------------------------------------ L-Shapley


def l_shapley_plan(
    graph: FeatureGraph, k: int, context: str = "baseline", limit: int | None = None
) -> Plan:
    """L-Shapley (Chen et al. 2019, Eq. 5): each feature's exact Shapley value
    in the game restricted to its neighbourhood ``N_k(i)``.

    ``phi_i = sum_{i in T subset N_k(i)} (|T|-1)! (m-|T|)! / m! (v(T) - v(T - i))``
    with ``m = |N_k(i)|``; features outside ``N_k(i)`` take the baseline
    (``context="baseline"``) or keep their input values (``"input"``).
    Refuses plans of more than ``limit`` coalitions before deduplication (None:
    :data:`~.limits.MAX_GRAPH_COALITIONS` on grids and lines, whose stencil
    plans count their coalitions before building them, and
    :data:`~.limits.MAX_COALITIONS` on other graphs, which are enumerated).
    """
    check_choice(context, L_CONTEXTS, "context")
    grid = _stencil_grid(graph, k)
    if grid is not None:
        return _grid_plan("L", *grid, k, context, "", limit or MAX_GRAPH_COALITIONS)
    limit = limit or MAX_COALITIONS
    check_neighbourhood_plan_size(graph, k, limit, f"LShapley with k={k}")
    return _l_shapley_plan_cached(graph, k, context)


def _stencil_grid(graph: FeatureGraph, k: int) -> tuple[int, int] | None:
    """The grid of a grid or line graph whose plans the stencil builder makes.

    It serves every size at ``k <= 2`` and large grids at any ``k`` whose
    stencil fits a bitmask; small grids with a large ``k`` (a ball covering
    most of the grid) keep the per-node enumeration, which is cheaper there.
    """
    shape = stencils.grid_shape(graph)
    if shape is None or not stencils.fits(k, *shape):
        return None
    return shape if k <= 2 or shape[0] * shape[1] >= STENCIL_MIN_NODES else None


#: Above this many nodes a grid's plans always come from the stencil.
STENCIL_MIN_NODES = 4096


@functools.lru_cache(maxsize=32)
def _grid_plan(
    kind: str, height: int, width: int, k: int, context: str, weights: str, limit: int
) -> Plan:
    if kind == "L":
        return stencils.l_shapley_grid_plan(height, width, k, context, limit)
    return stencils.c_shapley_grid_plan(height, width, k, context, weights, limit)


@functools.lru_cache(maxsize=64)
def _l_shapley_plan_cached(graph: FeatureGraph, k: int, context: str) -> Plan:
    subsets = ball_subsets(graph, k)
    n = graph.num_nodes
    player_bit = torch.ones(n, dtype=torch.long) << subsets.players
    feature, code = subsets.feature, subsets.code
    with_i = (code & player_bit[feature]) != 0
    size = subsets.lengths  # |T| for the rows with i
    m = subsets.sizes[feature]
    table = _shapley_weight_table(int(subsets.sizes.max()) if n else 1)
    rows_with = with_i.nonzero()[:, 0]
    owner = feature[rows_with]
    weight = table[m[rows_with], size[rows_with] - 1]
    # T - i is the row of the same feature with the player's bit cleared
    rows_without = rows_with - player_bit[feature[rows_with]]
    if context == "input":
        # D - (N_k(i) - T): the complement of the ball's absent members,
        # which is the subset with every other bit of the ball
        full = (torch.ones(n, dtype=torch.long) << subsets.sizes) - 1
        flip = full[feature] - 2 * code  # row offset of the complementary code
        complement_row = torch.arange(len(subsets)) + flip
        rows_with, rows_without = complement_row[rows_with], complement_row[rows_without]
    # every subset of every ball is used (with or without the player), so
    # all rows are deduplicated at once and the marginals index the result
    coalitions, inverse = _distinct_rows(
        subsets.members, subsets.offsets, None, n, complement=context == "input"
    )
    column = inverse[torch.cat([rows_with, rows_without])]
    estimator = SparseLinearMap(torch.cat([owner, owner]), column, torch.cat([weight, -weight]), n)
    return Plan(coalitions, estimator, distinct=True)


# ------------------------------------------------------------ C-Shapley


def c_shapley_plan(
    graph: FeatureGraph,
    k: int,
    context: str = "baseline",
    weights: str = "myerson",
    limit: int | None = None,
) -> Plan:
    """C-Shapley (Chen et al. 2019, Eq. 6): marginal contributions of each
    feature to the connected sets ``U`` of its neighbourhood that contain it.

    ``phi_i = sum_{U in C_k(i)} w(U) (v(U) - v(U - i))``; ``weights="myerson"``
    uses ``w(U) = (|U|-1)! b! / (|U|+b)!`` with ``b`` the boundary of U in the
    whole graph (exact for interior sets of a line, and the Myerson value once
    ``k`` reaches the diameter); ``"paper"`` uses Eq. (6)'s
    ``2 / ((|U|+2)(|U|+1)|U|)`` everywhere.
    """
    check_choice(context, L_CONTEXTS, "context")
    check_choice(weights, C_WEIGHTS, "weights")
    grid = _stencil_grid(graph, k)
    if grid is not None:
        return _grid_plan("C", *grid, k, context, weights, limit or MAX_GRAPH_COALITIONS)
    return _c_shapley_plan_cached(graph, k, context, weights, limit or MAX_COALITIONS)


@functools.lru_cache(maxsize=64)
def _c_shapley_plan_cached(
    graph: FeatureGraph, k: int, context: str, weights: str, limit: int
) -> Plan:
    n = graph.num_nodes
    balls = graph.balls(k)
    try:
        # (feature, set) pairs; each costs two coalitions before deduplication
        feature, members, offsets = graph.connected_sets(
            torch.arange(n), balls, max_count=limit // 2
        )
    except ValueError:
        raise ValueError(
            f"CShapley with k={k} would evaluate more than {limit:,} coalitions per "
            f"example (2^{limit.bit_length() - 1}); use a smaller k or group elements "
            "into fewer features (patches, superpixels) with feature_mask."
        ) from None
    count = offsets.shape[0] - 1
    size = offsets[1:] - offsets[:-1]
    if weights == "myerson":
        boundary = graph.boundary_sizes(members, offsets)
        weight = _myerson_weights(size, boundary)
    else:
        weight = 2.0 / ((size + 2) * (size + 1) * size).double()
    row = torch.repeat_interleave(torch.arange(count), size)
    if context == "input":
        # list the ball's absent members: N_k(i) - U, and N_k(i) - U + {i}
        ball = balls[feature]  # (C, W)
        ball_row = torch.arange(count)[:, None].expand_as(ball)
        present = ball >= 0
        in_set = torch.isin(ball_row * n + ball, row * n + members) & present
        absent = present & ~in_set
        absent_i = absent | (ball == feature[:, None])
        with_members, with_offsets = _csr_of_padded(ball, absent)
        without_members, without_offsets = _csr_of_padded(ball, absent_i)
    else:
        keep = members != feature[row]
        with_members, with_offsets = members, offsets
        without_members = members[keep]
        without_offsets = torch.zeros_like(offsets)
        without_offsets[1:] = torch.bincount(row[keep], minlength=count).cumsum(0)
    all_members = torch.cat([with_members, without_members])
    all_offsets = torch.cat([with_offsets, without_offsets[1:] + with_offsets[-1]])
    coalitions, column = _distinct_rows(
        all_members, all_offsets, None, n, complement=context == "input"
    )
    estimator = SparseLinearMap(
        torch.cat([feature, feature]), column, torch.cat([weight, -weight]), n
    )
    return Plan(coalitions, estimator, distinct=True)


# ------------------------------------------------------------ regression variant


def c_shapley_regression_plan(graph: FeatureGraph, k: int, limit: int = MAX_COALITIONS) -> Plan:
    """C-Shapley by regression (Chen et al. 2019, Sec. 4.3.2).

    KernelSHAP-weighted least squares of ``v(S) - v(empty)`` on the members
    of S, over the small connected sets: windows of at most ``k`` features on
    a line, squares of side at most ``k`` on a grid (n-grams and k x k
    patches in the paper), connected sets of at most ``k`` nodes elsewhere;
    efficiency ``sum phi = v(D) - v(empty)`` is enforced exactly. The
    solution is linear in the values, so it is precomputed as a ``d x M``
    map and cached. It solves a ``d x d`` system: for modest ``d`` only.
    """
    if k < 1:
        raise ValueError(f"the regression variant needs k >= 1, got k={k}.")
    grid = (graph.height, graph.width) if isinstance(graph, GridGraph) else None
    return _regression_plan_cached(graph, k, grid, limit)


@functools.lru_cache(maxsize=32)
def _regression_plan_cached(
    graph: FeatureGraph, k: int, grid: tuple[int, int] | None, limit: int
) -> Plan:
    n = graph.num_nodes
    members, offsets = _small_sets(graph, k, grid, limit)
    size = offsets[1:] - offsets[:-1]
    # distinct sets, neither empty nor everything
    keep = (size > 0) & (size < n)
    members, offsets = _take_rows(members, offsets, keep.nonzero()[:, 0])
    distinct, _ = _distinct_rows(members, offsets, None, n, complement=False)
    members, offsets = distinct.members, distinct.offsets
    count = offsets.shape[0] - 1
    sizes = (offsets[1:] - offsets[:-1]).to(torch.float64)
    rows = torch.zeros(count, n, dtype=torch.float64)
    rows[torch.repeat_interleave(torch.arange(count), offsets[1:] - offsets[:-1]), members] = 1.0
    # KernelSHAP weight (n-1) / (C(n,s) s (n-s)), in logs and rescaled: only
    # ratios matter and C(n, s) overflows for large n.
    log_w = (
        math.log(max(n - 1, 1))
        - (
            torch.lgamma(torch.tensor(n + 1.0, dtype=torch.float64))
            - torch.lgamma(sizes + 1)
            - torch.lgamma(n - sizes + 1)
        )
        - torch.log(sizes)
        - torch.log(n - sizes)
    )
    if count == 0:  # one feature: no set between the empty and the full one
        p_matrix = torch.zeros(n, 0, dtype=torch.float64)
        q_vector = torch.ones(n, dtype=torch.float64)  # phi = v(D) - v(empty)
    else:
        weight = torch.exp(log_w - log_w.max())
        gram = rows.T @ (weight[:, None] * rows)  # (n, n)
        cross = rows.T * weight  # (n, M)
        gram_inv_cross = torch.linalg.solve(gram, cross)
        gram_inv_ones = torch.linalg.solve(gram, torch.ones(n, dtype=torch.float64))
        total = gram_inv_ones.sum()
        # phi = P (v_S - v0) + q (v(D) - v0): the constrained WLS solution.
        p_matrix = gram_inv_cross - gram_inv_ones[:, None] * gram_inv_cross.sum(dim=0) / total
        q_vector = gram_inv_ones / total
    coeffs = torch.cat(
        [(-p_matrix.sum(dim=1) - q_vector)[:, None], p_matrix, q_vector[:, None]], dim=1
    )  # columns: empty, family..., full
    # the empty set (no members), the family, and the full set (the complement of none)
    all_offsets = torch.cat([torch.zeros(1, dtype=torch.long), offsets, offsets[-1:]])
    flags = torch.zeros(count + 2, dtype=torch.bool)
    flags[-1] = True
    coalitions = MemberCoalitions(members, all_offsets, n, flags)
    feature, column = torch.meshgrid(torch.arange(n), torch.arange(count + 2), indexing="ij")
    linear = SparseLinearMap(feature.reshape(-1), column.reshape(-1), coeffs.reshape(-1), n)
    return Plan(coalitions, linear, distinct=True)


def _small_sets(
    graph: FeatureGraph, k: int, grid: tuple[int, int] | None, limit: int
) -> tuple[Tensor, Tensor]:
    """CSR member ids of the regression family (may repeat; empty/full kept)."""
    if grid is not None:
        height, width = grid
        pieces = []
        for side in range(1, k + 1):
            if side > height or side > width:
                continue
            block = (torch.arange(side)[:, None] * width + torch.arange(side)[None, :]).reshape(-1)
            tops = torch.arange(height - side + 1)[:, None] * width
            anchor = (tops + torch.arange(width - side + 1)[None, :]).reshape(-1)
            pieces.append(torch.sort(anchor[:, None] + block[None, :], dim=1).values)
        return _csr_of_pieces(pieces)
    if isinstance(graph, LineGraph):
        n = graph.num_nodes
        pieces = []
        for size in range(1, min(k, n) + 1):
            starts = torch.arange(n - size + 1)
            pieces.append(starts[:, None] + torch.arange(size)[None, :])
        return _csr_of_pieces(pieces)
    n = graph.num_nodes
    # Sets whose smallest node is root lie within k - 1 hops of it.
    allowed = graph.balls(k - 1).clone()
    allowed[allowed < torch.arange(n)[:, None]] = -1
    try:
        _, members, offsets = graph.connected_sets(
            torch.arange(n), allowed, max_size=k, max_count=limit
        )
    except ValueError:
        raise ValueError(
            f"CShapley(estimator='kernel') with max_size={k} would fit more than {limit:,} "
            "coalitions; use a smaller k."
        ) from None
    return members, offsets


# ------------------------------------------------------------ helpers


def _csr_of_pieces(pieces: list[Tensor]) -> tuple[Tensor, Tensor]:
    """CSR of several ``(M_j, w_j)`` full matrices of member ids."""
    members = torch.cat([p.reshape(-1) for p in pieces]) if pieces else torch.zeros(0).long()
    lengths = (
        torch.cat([torch.full((p.shape[0],), p.shape[1], dtype=torch.long) for p in pieces])
        if pieces
        else torch.zeros(0, dtype=torch.long)
    )
    offsets = torch.zeros(lengths.shape[0] + 1, dtype=torch.long)
    offsets[1:] = lengths.cumsum(0)
    return members, offsets


def _csr_of_padded(ids: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """CSR of the entries ``ids[keep]`` row by row."""
    offsets = torch.zeros(ids.shape[0] + 1, dtype=torch.long)
    offsets[1:] = keep.sum(dim=1).cumsum(0)
    return ids[keep], offsets


def _take_rows(members: Tensor, offsets: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    """The CSR rows ``index``, in that order."""
    starts = offsets[index]
    lengths = offsets[index + 1] - starts
    new_offsets = torch.zeros(index.shape[0] + 1, dtype=torch.long)
    new_offsets[1:] = lengths.cumsum(0)
    row = torch.repeat_interleave(torch.arange(index.shape[0]), lengths)
    position = starts[row] + torch.arange(row.shape[0]) - new_offsets[row]
    return members[position], new_offsets


def _distinct_rows(
    members: Tensor, offsets: Tensor, index: Tensor | None, n: int, complement: bool
) -> tuple[MemberCoalitions, Tensor]:
    """The distinct CSR rows (``index``, or all) and the column of each input row.

    Rows must list sorted ids. Keys are the rows padded to the longest one
    (``n`` after the last member), so equal sets get equal keys exactly:
    one int64 code per row when ``width * bits(n)`` fits in 63 bits, else
    the padded rows sorted lexicographically.
    """
    if index is not None:
        members, offsets = _take_rows(members, offsets, index)
    count = offsets.shape[0] - 1
    lengths = offsets[1:] - offsets[:-1]
    width = max(int(lengths.max()) if count else 0, 1)
    padded = torch.full((count, width), n, dtype=torch.long)
    row = torch.repeat_interleave(torch.arange(count), lengths)
    padded[row, torch.arange(row.shape[0]) - offsets[row]] = members
    rows = padded.numpy()
    bits = max(n, 1).bit_length()
    if width * bits <= 63:
        code = np.zeros(count, dtype=np.int64)
        for j in range(width):
            code = (code << bits) | rows[:, j]
        order = np.argsort(code, kind="stable")
        ordered = code[order]
        new = np.ones(count, dtype=bool)
        new[1:] = ordered[1:] != ordered[:-1]
    else:
        order = np.lexsort(rows.T[::-1])
        ordered_rows = rows[order]
        new = np.ones(count, dtype=bool)
        new[1:] = (ordered_rows[1:] != ordered_rows[:-1]).any(axis=1)
    group = np.cumsum(new) - 1
    inverse = np.empty(count, dtype=np.int64)
    inverse[order] = group
    unique = torch.from_numpy(rows[order[new]].copy())
    unique[unique == n] = -1
    flags = torch.ones(unique.shape[0], dtype=torch.bool) if complement else None
    return MemberCoalitions.from_padded(unique, n, flags), torch.from_numpy(inverse)


def _myerson_weights(size: Tensor, boundary: Tensor) -> Tensor:
    """``myerson_weight(size, boundary)`` elementwise, from a table of the pairs that occur."""
    if size.numel() == 0:
        return torch.zeros(0, dtype=torch.float64)
    pairs, back = torch.unique(torch.stack([size, boundary], dim=1), dim=0, return_inverse=True)
    table = torch.tensor(
        [myerson_weight(int(s), int(b)) for s, b in pairs.tolist()], dtype=torch.float64
    )
    return table[back]


def _shapley_weight_table(largest: int) -> Tensor:
    """``table[m, s]`` = the Shapley weight of a size-s coalition in an m-player game."""
    table = torch.zeros(largest + 1, max(largest, 1), dtype=torch.float64)
    for m in range(1, largest + 1):
        table[m, :m] = torch.tensor(shapley_weights(m), dtype=torch.float64)
    return table
