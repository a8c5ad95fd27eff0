"""What every attribution adapter shares: graph arguments and output packing."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..game import CoalitionGame
from ..graphs import FeatureGraph, default_feature_mask, infer_graph


def default_graph_mask(inputs: Any, feature_mask: Any) -> Any:
    """The feature mask graph methods use when the user gives none.

    A single ``(N, L)`` input has one feature per position and an image
    ``(N, H, W)``/``(N, C, H, W)`` one per pixel with its channels grouped;
    anything else keeps Captum's default (one feature per element).
    """
    if feature_mask is None and isinstance(inputs, Tensor) and inputs.dim() in (2, 3, 4):
        return default_feature_mask(tuple(inputs.shape)).to(inputs.device)
    return feature_mask


def resolve_graphs(graph: Any, game: CoalitionGame) -> FeatureGraph | list[FeatureGraph]:
    """The graph of each example, checked against the features of the mask.

    Without ``graph`` it is inferred from the (validated) mask: a line for
    sequences, a grid for images, or more generally the adjacency of the
    mask's regions, so word masks over sub-word tokens and patch masks work
    as they are. Graph nodes must be the feature ids: ``num_nodes`` equals
    ``max id + 1`` (per example for a list of graphs). A list of equal graphs
    is one shared graph.
    """
    if graph is None:
        graph = _inferred_graph(game)
    if isinstance(graph, FeatureGraph):
        if graph.num_nodes != game.num_features:
            raise ValueError(
                f"graph has {graph.num_nodes} nodes but feature_mask defines "
                f"{game.num_features} features (ids 0..{game.num_features - 1}); graph nodes "
                "must be the feature ids."
            )
        return graph
    if not isinstance(graph, (list, tuple)):
        raise TypeError(
            f"graph must be a FeatureGraph or a list of them (one per example), got "
            f"{type(graph).__name__}."
        )
    graphs = list(graph)
    if len(graphs) != game.batch_size:
        raise ValueError(
            f"graph is a list of {len(graphs)} graphs but inputs has {game.batch_size} "
            "examples; pass one graph per example or a single graph."
        )
    counts = game.features.features_per_example().tolist()
    for position, item in enumerate(graphs):
        if not isinstance(item, FeatureGraph):
            raise TypeError(f"graph[{position}] must be a FeatureGraph, got {type(item).__name__}.")
        expected = counts[position] if len(counts) > 1 else counts[0]
        if item.num_nodes != expected:
            raise ValueError(
                f"graph[{position}] has {item.num_nodes} nodes but feature_mask of example "
                f"{position} has {expected} features (ids 0..{expected - 1}); graph nodes must "
                "be the feature ids."
            )
    if all(g == graphs[0] for g in graphs[1:]) and graphs[0].num_nodes == game.num_features:
        return graphs[0]
    return graphs


def _inferred_graph(game: CoalitionGame) -> FeatureGraph:
    first = game.inputs[0]
    if len(game.inputs) != 1 or first.dim() not in (2, 3, 4):
        raise ValueError(
            "cannot infer a graph for these inputs (a tuple, or a tensor that is not "
            "(N, L), (N, H, W) or (N, C, H, W)); pass graph=FeatureGraph.from_adjacency(...)."
        )
    mask = game.features.masks[0]
    if game.features.per_example:
        raise ValueError(
            "feature_mask differs per example, so no single graph can be inferred; "
            "pass graph= as a list with one FeatureGraph per example (e.g. "
            "SuperpixelGraph.from_segments of each label map)."
        )
    return infer_graph(tuple(first.shape), mask)


def pack_attributions(
    game: CoalitionGame, per_feature: Tensor, is_tuple: bool
) -> Tensor | tuple[Tensor, ...]:
    """Per-feature ``(N, d)`` values back to the inputs' shapes, dtypes and type."""
    attributions = game.features.scatter(per_feature, game.inputs, game.attribution_dtype())
    return attributions if is_tuple else attributions[0]
