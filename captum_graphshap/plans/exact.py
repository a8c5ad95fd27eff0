"""Plans of the exact methods: every coalition (Shapley), every connected one (Myerson).

Plans that depend only on ``d`` or on a graph are cached: the same graph
explained twice costs its enumeration once.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from ..graphs import FeatureGraph, LineGraph
from ..graphs.feature_graph import _bits, _masks_to_rows
from .limits import MAX_COALITIONS, check_plan_size
from .linear import SparseLinearMap, myerson_weight


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


class _PlanBuilder:
    """Collects coalitions (Python-int bitmasks) and estimator coefficients.

    Each distinct coalition gets one column, so a coalition shared by many
    features (or by the two terms of different features) is evaluated once.
    """

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self.column: dict[int, int] = {}
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.coeffs: list[float] = []

    def add(self, feature: int, coalition: int, coeff: float) -> None:
        col = self.column.setdefault(coalition, len(self.column))
        self.rows.append(feature)
        self.cols.append(col)
        self.coeffs.append(coeff)

    def marginal(self, feature: int, with_feature: int, weight: float) -> None:
        """``weight * (v(S) - v(S - feature))`` for ``S = with_feature``."""
        self.add(feature, with_feature, weight)
        self.add(feature, with_feature & ~(1 << feature), -weight)

    def build(self) -> Plan:
        masks = list(self.column)  # insertion order = column order
        coalitions = torch.from_numpy(_masks_to_rows(masks, self.num_nodes).copy())
        linear = SparseLinearMap(
            torch.tensor(self.rows, dtype=torch.long),
            torch.tensor(self.cols, dtype=torch.long),
            torch.tensor(self.coeffs, dtype=torch.float64),
            self.num_nodes,
        )
        return Plan(DenseCoalitions(coalitions), linear, distinct=True)


def myerson_plan(graph: FeatureGraph, limit: int = MAX_COALITIONS) -> Plan:
    """Coalitions and linear estimator of the Myerson value on ``graph``.

    The plan is the empty set and every connected set. For a player i and a
    connected U containing it, every coalition whose component around i
    (after adding i) is U has the same marginal contribution
    ``v0(U) - sum_{T in components(U - i)} v0(T)`` with ``v0 = v - v(empty)``,
    and these coalitions together carry the weight :func:`myerson_weight`.
    """
    if isinstance(graph, LineGraph):
        n = graph.num_nodes
        count = n * (n + 1) // 2
        if count > limit - 1:
            raise ValueError(
                f"MyersonValue: the graph has more than {limit - 1:,} connected subsets "
                f"({count:,} intervals of {n} nodes). The Myerson value needs every connected "
                "coalition; use a coarser feature_mask or C-Shapley with a small k."
            )
        return _line_myerson_plan(n)
    return _myerson_plan_cached(graph, limit)


@functools.lru_cache(maxsize=16)
def _line_myerson_plan(n: int) -> Plan:
    from .stencils import line_myerson_plan

    return line_myerson_plan(n)


@functools.lru_cache(maxsize=64)
def _myerson_plan_cached(graph: FeatureGraph, limit: int) -> Plan:
    try:
        connected = graph.all_connected_subsets(max_count=limit - 1)
    except ValueError as error:
        raise ValueError(
            f"MyersonValue: {error} The Myerson value needs every connected coalition; "
            "on dense graphs or large grids use a coarser feature_mask (patches, "
            "superpixels) or C-Shapley with a small k."
        ) from None
    plan = _PlanBuilder(graph.num_nodes)
    plan.add(0, 0, 0.0)  # the empty coalition, column 0
    for mask in _bitmasks(connected):
        members = _bits(mask)
        weight = myerson_weight(len(members), graph._boundary_of_mask(mask).bit_count())
        for node in members:
            parts = graph._components_of_mask(mask & ~(1 << node))
            plan.add(node, mask, weight)
            for part in parts:
                plan.add(node, part, -weight)
            # v0 = v - v(empty): +1 for U, -1 for each component.
            plan.add(node, 0, -weight * (1 - len(parts)))
    return plan.build()


def _bitmasks(rows: Tensor) -> list[int]:
    packed = np.packbits(rows.cpu().numpy().astype(np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]
