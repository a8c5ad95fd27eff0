"""Plans of the exact methods: every coalition (Shapley), every connected one (Myerson).

Plans that depend only on ``d`` or on a graph are cached: the same graph
explained twice costs its enumeration once.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, MemberCoalitions, Plan
from ..graphs import FeatureGraph, LineGraph
from .limits import MAX_COALITIONS, MAX_GRAPH_COALITIONS, check_plan_size
from .linear import SparseLinearMap, myerson_weight, shapley_from_all_coalitions


def all_coalitions(
    d: int, device: torch.device | str = "cpu", *, method: str = "ExactShapley"
) -> Tensor:
    """All ``2^d`` coalitions; row m holds the bits of m (feature i = bit i).

    Refuses ``d`` above 20 (``MAX_COALITIONS``) with the count, naming
    ``method``. Cached per ``(d, device)``: treat the result as read-only.
    """
    check_plan_size(
        2**d,
        MAX_COALITIONS,
        method,
        f"there are d = {d} features. Group them with feature_mask to at most "
        f"{MAX_COALITIONS.bit_length() - 1} features, or use a sampling or graph method.",
    )
    return _all_coalitions_cached(d, torch.device(device))


@functools.lru_cache(maxsize=8)
def _all_coalitions_cached(d: int, device: torch.device) -> Tensor:
    codes = torch.arange(2**d, device=device)
    bits = torch.arange(d, device=device)
    return ((codes[:, None] >> bits) & 1).bool()


def exact_shapley_plan(
    d: int, device: torch.device | str = "cpu", *, method: str = "ExactShapley"
) -> Plan:
    """Exact Shapley values: every coalition (:func:`all_coalitions`) and the fixed linear map."""
    coalitions = all_coalitions(d, device, method=method)
    return Plan(DenseCoalitions(coalitions), shapley_from_all_coalitions, distinct=True)


def myerson_plan(graph: FeatureGraph, limit: int | None = None) -> Plan:
    """Coalitions and linear estimator of the Myerson value on ``graph``.

    The plan is the empty set and every connected set. For a player i and a
    connected U containing it, every coalition whose component around i
    (after adding i) is U has the same marginal contribution
    ``v0(U) - sum_{T in components(U - i)} v0(T)`` with ``v0 = v - v(empty)``,
    and these coalitions together carry the weight :func:`myerson_weight`.
    ``limit`` (None: :data:`~.limits.MAX_GRAPH_COALITIONS` on a line, whose
    count is known, :data:`~.limits.MAX_COALITIONS` on graphs enumerated set
    by set) bounds the plan.
    """
    if isinstance(graph, LineGraph):
        limit = limit or MAX_GRAPH_COALITIONS
        n = graph.num_nodes
        count = n * (n + 1) // 2
        if count > limit - 1:
            raise ValueError(
                f"MyersonValue: the graph has more than {limit - 1:,} connected subsets "
                f"({count:,} intervals of {n} nodes). The Myerson value needs every connected "
                "coalition; use a coarser feature_mask or C-Shapley with a small k."
            )
        return _line_myerson_plan(n)
    return _myerson_plan_cached(graph, limit or MAX_COALITIONS)


@functools.lru_cache(maxsize=16)
def _line_myerson_plan(n: int) -> Plan:
    from .stencils import line_myerson_plan

    return line_myerson_plan(n)


@functools.lru_cache(maxsize=64)
def _myerson_plan_cached(graph: FeatureGraph, limit: int) -> Plan:
    """The Myerson value on any graph, from the dividends of the restricted game.

    The Harsanyi dividend of ``v^G`` on a connected S is
    ``sum_{C connected, C <= S <= C + N(C)} (-1)^{|S - C|} v0(C)``, and
    ``phi_i = sum_{S connected, i in S} d(S) / |S|``. Summing over
    ``S = C + B`` (``B`` any part of the boundary ``N(C)``, ``b = |N(C)|``)
    gives each connected C two coefficients:

    * ``(|C|-1)! b! / (|C|+b)!`` (the Myerson weight) for ``i`` in C,
    * ``-|C|! (b-1)! / (|C|+b)!`` for ``i`` on its boundary,

    so the plan needs no components at all: one entry per member and per
    boundary node of each connected set, and ``v(empty)`` for the centring.
    """
    try:
        members, offsets = graph.all_connected_sets(max_count=limit - 1)
    except ValueError as error:
        raise ValueError(
            f"MyersonValue: {error} The Myerson value needs every connected coalition; "
            "on dense graphs or large grids use a coarser feature_mask (patches, "
            "superpixels) or C-Shapley with a small k."
        ) from None
    n = graph.num_nodes
    count = offsets.shape[0] - 1
    size = offsets[1:] - offsets[:-1]
    which, node = graph.boundaries(members, offsets)
    boundary = torch.bincount(which, minlength=count)
    inside = _weights(size, boundary)
    edge = _weights(size + 1, (boundary - 1).clamp(min=0))
    member_set = torch.repeat_interleave(torch.arange(count), size)
    rows = torch.cat([members, node])
    cols = torch.cat([member_set, which]) + 1  # column 0 is the empty set
    coeffs = torch.cat([inside[member_set], -edge[which]])
    # v0 = v - v(empty): each feature's coefficients, negated, on the empty set
    centring = torch.zeros(n, dtype=torch.float64).index_add_(0, rows, coeffs)
    linear = SparseLinearMap(
        torch.cat([rows, torch.arange(n)]),
        torch.cat([cols, torch.zeros(n, dtype=torch.long)]),
        torch.cat([coeffs, -centring]),
        n,
    )
    all_offsets = torch.cat([torch.zeros(1, dtype=torch.long), offsets])
    return Plan(MemberCoalitions(members, all_offsets, n), linear, distinct=True)


def _weights(size: Tensor, boundary: Tensor) -> Tensor:
    """``myerson_weight(size, boundary)`` elementwise, one exact value per distinct pair."""
    if size.numel() == 0:
        return torch.zeros(0, dtype=torch.float64)
    pairs, back = torch.unique(torch.stack([size, boundary], dim=1), dim=0, return_inverse=True)
    table = [myerson_weight(int(s), int(b)) for s, b in pairs.tolist()]
    return torch.tensor(table, dtype=torch.float64)[back]
