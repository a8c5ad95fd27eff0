"""L-Shapley and C-Shapley plans (Chen et al., ICLR 2019), and the regression variant."""

from __future__ import annotations

import functools
import math

import torch

from ..engine.plan import DenseCoalitions, Plan
from ..graphs import FeatureGraph, GridGraph
from ..graphs.feature_graph import _bits, _masks_to_rows
from . import stencils
from .exact import _PlanBuilder
from .limits import MAX_COALITIONS, check_choice, check_neighbourhood_plan_size
from .linear import SparseLinearMap, myerson_weight, shapley_weights

L_CONTEXTS = ("baseline", "input")
C_WEIGHTS = ("myerson", "paper")


def l_shapley_plan(
    graph: FeatureGraph, k: int, context: str = "baseline", limit: int = MAX_COALITIONS
) -> Plan:
    """L-Shapley (Chen et al. 2019, Eq. 5): each feature's exact Shapley value
    in the game restricted to its neighbourhood ``N_k(i)``.

    ``phi_i = sum_{i in T subset N_k(i)} (|T|-1)! (m-|T|)! / m! (v(T) - v(T - i))``
    with ``m = |N_k(i)|``; features outside ``N_k(i)`` take the baseline
    (``context="baseline"``) or keep their input values (``"input"``).
    Refuses plans of more than ``limit`` coalitions before deduplication.
    """
    check_choice(context, L_CONTEXTS, "context")
    grid = _stencil_grid(graph, k)
    if grid is not None:
        return _grid_plan("L", *grid, k, context, "", limit)
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
    n = graph.num_nodes
    full = (1 << n) - 1
    plan = _PlanBuilder(n)
    for i in range(n):
        ball = graph._ball_mask(i, k)
        outside = full & ~ball if context == "input" else 0
        others = [node for node in _bits(ball) if node != i]
        m = len(others) + 1
        weights = shapley_weights(m)
        for subset in range(1 << len(others)):
            members = sum(1 << others[b] for b in range(len(others)) if subset >> b & 1)
            plan.marginal(i, members | (1 << i) | outside, weights[subset.bit_count()])
    return plan.build()


def c_shapley_plan(
    graph: FeatureGraph,
    k: int,
    context: str = "baseline",
    weights: str = "myerson",
    limit: int = MAX_COALITIONS,
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
        return _grid_plan("C", *grid, k, context, weights, limit)
    return _c_shapley_plan_cached(graph, k, context, weights, limit)


@functools.lru_cache(maxsize=64)
def _c_shapley_plan_cached(
    graph: FeatureGraph, k: int, context: str, weights: str, limit: int
) -> Plan:
    n = graph.num_nodes
    full = (1 << n) - 1
    plan = _PlanBuilder(n)
    pairs = 0  # (feature, set) pairs; each costs two coalitions before deduplication
    for i in range(n):
        ball = graph._ball_mask(i, k)
        outside = full & ~ball if context == "input" else 0
        try:
            sets = graph._connected_masks(i, ball, max_count=limit // 2 - pairs)
        except ValueError:
            raise ValueError(
                f"CShapley with k={k} would evaluate more than {limit:,} coalitions per "
                f"example (2^{limit.bit_length() - 1}); use a smaller k or group elements "
                "into fewer features (patches, superpixels) with feature_mask."
            ) from None
        pairs += len(sets)
        for mask in sets:
            size = mask.bit_count()
            if weights == "myerson":
                weight = myerson_weight(size, graph._boundary_of_mask(mask).bit_count())
            else:
                weight = 2.0 / ((size + 2) * (size + 1) * size)
            plan.marginal(i, mask | outside, weight)
    return plan.build()


def c_shapley_regression_plan(graph: FeatureGraph, k: int, limit: int = MAX_COALITIONS) -> Plan:
    """C-Shapley by regression (Chen et al. 2019, Sec. 4.3.2).

    KernelSHAP-weighted least squares of ``v(S) - v(empty)`` on the members
    of S, over the small connected sets: windows of at most ``k`` features on
    a line, squares of side at most ``k`` on a grid (n-grams and k x k
    patches in the paper), connected sets of at most ``k`` nodes elsewhere;
    efficiency ``sum phi = v(D) - v(empty)`` is enforced exactly. The
    solution is linear in the values, so it is precomputed as a ``d x M``
    map and cached.
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
    full = (1 << n) - 1
    family = _small_sets(graph, k, grid, limit)
    family = [mask for mask in dict.fromkeys(family) if 0 < mask.bit_count() < n]
    rows = torch.from_numpy(_masks_to_rows(family, n).copy()).to(torch.float64)
    sizes = rows.sum(dim=1)
    # KernelSHAP weight (n-1) / (C(n,s) s (n-s)), in logs and rescaled: only
    # ratios matter and C(n, s) overflows for large n.
    log_w = (
        math.log(max(n - 1, 1))
        - (
            torch.lgamma(torch.tensor(n + 1.0))
            - torch.lgamma(sizes + 1)
            - torch.lgamma(n - sizes + 1)
        )
        - torch.log(sizes)
        - torch.log(n - sizes)
    )
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
    masks = [0, *family, full]
    coalitions = torch.from_numpy(_masks_to_rows(masks, n).copy())
    feature, column = torch.meshgrid(torch.arange(n), torch.arange(len(masks)), indexing="ij")
    linear = SparseLinearMap(feature.reshape(-1), column.reshape(-1), coeffs.reshape(-1), n)
    return Plan(DenseCoalitions(coalitions), linear, distinct=True)


def _small_sets(graph: FeatureGraph, k: int, grid: tuple[int, int] | None, limit: int) -> list[int]:
    if grid is not None:
        height, width = grid
        squares = []
        for side in range(1, k + 1):
            block = sum(1 << (r * width + c) for r in range(side) for c in range(side))
            for top in range(height - side + 1):
                for left in range(width - side + 1):
                    squares.append(block << (top * width + left))
        return squares
    sets: list[int] = []
    n = graph.num_nodes
    for root in range(n):
        # Sets whose smallest node is root lie within k - 1 hops of it.
        allowed = graph._ball_mask(root, k - 1) & ~((1 << root) - 1)
        try:
            found = graph._connected_masks(root, allowed, max_count=limit - len(sets))
        except ValueError:
            raise ValueError(
                f"CShapley(method='regression') with k={k} would fit more than {limit:,} "
                "coalitions; use a smaller k."
            ) from None
        sets.extend(mask for mask in found if mask.bit_count() <= k)
    return sets
