"""Feature graphs: which features may cooperate, for graph-structured methods.

Modules, each importing only those above it in this list:
``_validation`` (argument checks),
:mod:`~captum_graphshap.graphs.bitsets` (node sets as int bitmasks),
:mod:`~captum_graphshap.graphs.edges` (parsing, edge arrays, adjacency lists),
:mod:`~captum_graphshap.graphs.distances` (hop distances and balls),
:mod:`~captum_graphshap.graphs.connected_sets` (enumeration, components,
boundaries), :mod:`~captum_graphshap.graphs.caches` (bounded per-graph caches,
:func:`clear_caches`), ``hierarchy`` (feature trees, :class:`Hierarchy`), ``feature_graph`` (the
:class:`FeatureGraph` class) and ``standard``
(line, grid and superpixel graphs, the default graph of an input).
"""

from __future__ import annotations

from .caches import clear_caches
from .feature_graph import FeatureGraph
from .hierarchy import Hierarchy
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
    "Hierarchy",
    "LineGraph",
    "SuperpixelGraph",
    "clear_caches",
    "default_feature_mask",
    "graph_from_feature_mask",
    "infer_graph",
]
