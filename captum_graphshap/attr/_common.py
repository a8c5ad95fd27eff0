"""What every attribution adapter shares: graph arguments and output packing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame, prepare_game
from ..engine.plan import Plan
from ..graphs import FeatureGraph, default_feature_mask, infer_graph
from ..uncertainty.intervals import check_confidence, interval_over_references
from ._options import check_flag


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
    shape = tuple(first.shape)
    default = default_feature_mask(shape).to(mask.device)
    if mask.shape == default.shape and bool((mask == default).all()):
        # The plain position/pixel mask: keep the LineGraph/GridGraph type, which
        # methods use (regression C-Shapley fits squares on grids).
        return infer_graph(shape)
    return infer_graph(shape, mask)


PlanBuilder = Callable[[FeatureGraph], Plan]


def explain_on_graphs(
    game: CoalitionGame,
    graphs: FeatureGraph | list[FeatureGraph],
    plan: PlanBuilder,
    show_progress: bool,
    desc: str,
    per_reference: bool = False,
) -> Tensor:
    """Per-feature ``(N, d)`` attributions of a graph plan and its linear estimator.

    One graph: one plan shared by the batch. One graph per example
    (superpixels): every plan is built first (so a refusal comes before any
    model call), then all examples' rows go through the engine together.
    With ``per_reference`` the attributions of each reference's
    single-reference game are kept apart: ``(N, d, B)``.
    """
    if isinstance(graphs, FeatureGraph):
        built = plan(graphs)
        linear = built.estimator
        values = game.evaluate(
            built.coalitions,
            distinct=True,
            per_reference=per_reference,
            show_progress=show_progress,
            desc=desc,
        )
        if not per_reference:
            return linear(values)
        batch, count, refs = values.shape
        per_row = linear(values.permute(0, 2, 1).reshape(batch * refs, count))
        return per_row.view(batch, refs, -1).permute(0, 2, 1)
    d = game.num_features
    refs = game.num_references if per_reference else 1
    plans = [plan(g) for g in graphs]
    blocks = []
    for built in plans:
        coalitions = built.coalitions.dense()
        padded = torch.zeros(coalitions.shape[0], d, dtype=torch.bool)
        padded[:, : coalitions.shape[1]] = coalitions
        blocks.append(padded)
    sizes = [block.shape[0] for block in blocks]
    example_index = torch.repeat_interleave(torch.arange(len(blocks)), torch.tensor(sizes))
    rows = torch.cat(blocks)
    reference_index = None
    if per_reference:
        # Every row once per reference, reference-major: values[b * R + r].
        reference_index = torch.arange(refs).repeat_interleave(rows.shape[0]).to(game.device)
        example_index = example_index.repeat(refs)
        rows = rows.repeat(refs, 1)
    values = game.evaluate_rows(
        example_index.to(game.device),
        rows.to(game.device),
        distinct=True,
        reference_index=reference_index,
        show_progress=show_progress,
        desc=desc,
    ).view(refs, -1)
    per_feature = values.new_zeros(game.batch_size, d, refs)
    for example, (chunk, built) in enumerate(zip(values.split(sizes, dim=1), plans)):
        per_example = built.estimator(chunk).T
        per_feature[example, : per_example.shape[0]] = per_example
    return per_feature if per_reference else per_feature[..., 0]


def attribute_on_graphs(
    forward_func: Callable[..., Any],
    plan: PlanBuilder,
    desc: str,
    inputs: Any,
    baselines: Any,
    target: Any,
    additional_forward_args: Any,
    feature_mask: Any,
    perturbations_per_eval: int | None,
    show_progress: bool,
    graph: Any,
    references: Any,
    value: str,
    return_uncertainty: bool = False,
    confidence: float = 0.95,
) -> Any:
    """The whole ``attribute`` of a graph method, given its plan.

    Default graph mask, argument checks, graphs checked against the mask,
    one engine call, per-feature values back to the inputs' shapes. With
    ``return_uncertainty`` (linear estimators only) the pair
    ``(attributions, half_width)`` of the interval over ``references``.
    """
    check_flag(return_uncertainty, "return_uncertainty")
    if return_uncertainty:
        confidence = check_confidence(confidence)
        if references is None:
            raise ValueError(
                "return_uncertainty=True gives the interval over references: pass "
                "references= (a background set of at least 2 rows) instead of baselines."
            )
    game, is_tuple = prepare_game(
        forward_func,
        inputs,
        baselines,
        target,
        additional_forward_args,
        default_graph_mask(inputs, feature_mask),
        perturbations_per_eval,
        references=references,
        value=value,
    )
    graphs = resolve_graphs(graph, game)
    if not return_uncertainty:
        per_feature = explain_on_graphs(game, graphs, plan, show_progress, desc)
        return pack_attributions(game, per_feature, is_tuple)
    if game.num_references < 2:
        raise ValueError(
            f"return_uncertainty=True needs at least 2 references, got {game.num_references}; "
            "pass a larger background set."
        )
    per_reference = explain_on_graphs(game, graphs, plan, show_progress, desc, per_reference=True)
    mean, half_width = interval_over_references(per_reference, confidence)
    return pack_attributions(game, mean, is_tuple), pack_attributions(game, half_width, is_tuple)


def check_order(k: Any) -> int:
    """The neighbourhood order ``k``: an int >= 0."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int (the neighbourhood radius), got {type(k).__name__}.")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}.")
    return k


def pack_attributions(
    game: CoalitionGame, per_feature: Tensor, is_tuple: bool
) -> Tensor | tuple[Tensor, ...]:
    """Per-feature ``(N, d)`` values back to the inputs' shapes, dtypes and type."""
    attributions = game.features.scatter(per_feature, game.inputs, game.attribution_dtype())
    return attributions if is_tuple else attributions[0]
