"""Feature graphs: which features may cooperate, for graph-structured methods."""

from __future__ import annotations

from .feature_graph import FeatureGraph
from .standard import (
    GridGraph,
    LineGraph,
    SuperpixelGraph,
    default_feature_mask,
    graph_from_feature_mask,
    infer_graph,
)

__all__ = [
    "FeatureGraph",
    "GridGraph",
    "LineGraph",
    "SuperpixelGraph",
    "default_feature_mask",
    "graph_from_feature_mask",
    "infer_graph",
]
