"""Stage 1: coalition plans, each paired with the estimator that reads it.

A plan is a boolean ``(M, d)`` matrix, one row a coalition. Plans that depend
only on ``d`` or on a graph are cached: the same graph explained twice costs
its enumeration once.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from .estimators import SparseLinearMap, myerson_weight
from .game import check_plan_size
from .graphs import FeatureGraph
from .graphs.feature_graph import _bits

#: Largest plan a call may build, per example (DESIGN.md section 2).
MAX_COALITIONS = 2**20


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


def myerson_plan(
    graph: FeatureGraph, limit: int = MAX_COALITIONS
) -> tuple[Tensor, SparseLinearMap]:
    """Coalitions and linear estimator of the Myerson value on ``graph``.

    The plan is the empty set (row 0) and every connected set. For a player i
    and a connected U containing it, every coalition whose component around i
    (after adding i) is U has the same marginal contribution
    ``v0(U) - sum_{T in components(U - i)} v0(T)`` with ``v0 = v - v(empty)``,
    and these coalitions together carry the weight :func:`myerson_weight`.
    """
    return _myerson_plan_cached(graph, limit)


@functools.lru_cache(maxsize=64)
def _myerson_plan_cached(graph: FeatureGraph, limit: int) -> tuple[Tensor, SparseLinearMap]:
    try:
        connected = graph.all_connected_subsets(max_count=limit - 1)
    except ValueError as error:
        raise ValueError(
            f"MyersonValue: {error} The Myerson value needs every connected coalition; "
            "on dense graphs or large grids use a coarser feature_mask (patches, "
            "superpixels) or C-Shapley with a small k."
        ) from None
    n = graph.num_nodes
    masks = _bitmasks(connected)
    column = {mask: position + 1 for position, mask in enumerate(masks)}
    column[0] = 0
    neighbours = graph._neighbour_masks
    rows: list[int] = []
    cols: list[int] = []
    coeffs: list[float] = []
    for mask in masks:
        members = _bits(mask)
        frontier = 0
        for node in members:
            frontier |= neighbours[node]
        weight = myerson_weight(len(members), (frontier & ~mask).bit_count())
        for node in members:
            parts = graph._components_of_mask(mask & ~(1 << node))
            rows.append(node)
            cols.append(column[mask])
            coeffs.append(weight)
            for part in parts:
                rows.append(node)
                cols.append(column[part])
                coeffs.append(-weight)
            # v0 = v - v(empty): +1 for U, -1 for each component.
            rows.append(node)
            cols.append(0)
            coeffs.append(-weight * (1 - len(parts)))
    coalitions = torch.cat([torch.zeros(1, n, dtype=torch.bool), connected.bool().cpu()])
    linear = SparseLinearMap(
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(cols, dtype=torch.long),
        torch.tensor(coeffs, dtype=torch.float64),
        n,
    )
    return coalitions, linear


def _bitmasks(rows: Tensor) -> list[int]:
    packed = np.packbits(rows.cpu().numpy().astype(np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]
