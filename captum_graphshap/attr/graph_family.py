"""Graph methods: the graph argument, per-graph plans, and the family's base class.

``graph=None`` means one thing everywhere: infer the graph from the input (a
line over positions, a pixel grid, or the adjacency of the mask's regions).
Bivariate Shapley's graph-local variant is chosen by ``k``, not by ``graph``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..engine.plan import Plan, stack_coalitions
from ..graphs import FeatureGraph, default_feature_mask, infer_graph
from ..uncertainty.intervals import check_confidence, interval_over_references
from .base import GameAttribution, Options, Outcome, evaluate_plan
from .budget import check_graph_budget, graph_plans_within
from .renames import Renames

#: the ``graph`` option: one graph, or one per example; None infers it from the inputs
GraphArgument = FeatureGraph | Sequence[FeatureGraph] | None


@dataclasses.dataclass(frozen=True)
class GraphOptions(Options):
    """Options of the graph methods.

    Args:
        graph: a :class:`~captum_graphshap.FeatureGraph` whose nodes are the
            feature ids, or a list with one graph per example. None infers a
            line for ``(N, L)`` inputs, a pixel grid for images (channels
            grouped), or the adjacency of the regions of ``feature_mask``.
        return_uncertainty: also return ``half_width``, the interval over
            ``references`` (needs ``B >= 2``): the estimator is linear, so the
            attribution is the mean of the single-reference attributions and
            the half-width ``z * SD / sqrt(B)`` over them (Merrick and Taly).
        confidence: the level of that interval, in (0, 1).
        budget: the most model evaluations per example (None: plans up to
            ``2^22`` coalitions on grids and lines, ``2^20`` on other graphs).
            A plan over it is refused with its count, before any model call,
            unless ``over_budget="kernel"``.
        over_budget: ``"refuse"`` (default) or ``"kernel"`` (``"regression"``
            before, still accepted for one release with a warning): over the
            budget, use C-Shapley's kernel variant (Sec. 4.3.2) over the
            connected sets of the largest size ``<= max(k, 1)`` that fits.
    """

    graph: GraphArgument = None
    return_uncertainty: bool = False
    confidence: float = 0.95
    budget: int | None = None
    over_budget: str = "refuse"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_confidence(self.confidence)
        check_graph_budget(self.budget, self.over_budget)
        if self.return_uncertainty and self.references is None:
            raise ValueError(
                "return_uncertainty=True gives the interval over references: pass "
                "references= (a background set of at least 2 rows) instead of baselines."
            )


PlanBuilder = Callable[[FeatureGraph], Plan]


#: the graph methods' renamed option values
GRAPH_RENAMES = Renames(values={"over_budget": {"regression": "kernel"}})


class GraphAttribution(GameAttribution):
    """Base of the methods defined by a plan on a feature graph (Myerson, L, C)."""

    Options = GraphOptions
    renames = GRAPH_RENAMES
    graph_mask = True
    budget_accounting = "own"  # budget.py: it counts references itself

    def graph_plan(self, options: Any) -> PlanBuilder:
        """The plan of one graph, for these options."""
        raise NotImplementedError

    def explain(self, game: CoalitionGame, options: Any, show_progress: bool) -> Outcome:
        graphs = resolve_graphs(options.graph, game)
        plans = graph_plans_within(
            self.graph_plan(options),
            [graphs] if isinstance(graphs, FeatureGraph) else graphs,
            budget=options.budget,
            over_budget=options.over_budget,
            per_plan_extra=int(game.value == "log_prob" and game.target is None),
            references=game.num_references,
            who=type(self).__name__ + (f" with k={options.k}" if hasattr(options, "k") else ""),
            order=getattr(options, "k", 2),
        )
        desc = self.progress_desc
        if not options.return_uncertainty:
            return Outcome(explain_on_graphs(game, plans, show_progress, desc))
        if game.num_references < 2:
            raise ValueError(
                f"return_uncertainty=True needs at least 2 references, got "
                f"{game.num_references}; pass a larger background set."
            )
        per_reference = explain_on_graphs(game, plans, show_progress, desc, per_reference=True)
        mean, half_width = interval_over_references(per_reference, options.confidence)
        return Outcome(mean, {"half_width": half_width}, per_feature=("half_width",))


def explain_on_graphs(
    game: CoalitionGame,
    plans: list[Plan],
    show_progress: bool,
    desc: str,
    per_reference: bool = False,
) -> Tensor:
    """Per-feature ``(N, d)`` attributions of graph plans and their linear estimators.

    With ``per_reference`` the attributions of each reference's
    single-reference game are kept apart: ``(N, d, B)``.
    """
    values = evaluate_plans(game, plans, show_progress, desc, per_reference=per_reference)
    if len(plans) == 1:
        plan, shared = plans[0], values[0]
        if not per_reference:
            return plan.estimator(shared)
        batch, count, refs = shared.shape
        per_row = plan.estimator(shared.permute(0, 2, 1).reshape(batch * refs, count))
        return per_row.view(batch, refs, -1).permute(0, 2, 1)
    refs = game.num_references if per_reference else 1
    per_feature = values[0].new_zeros(game.batch_size, game.num_features, refs)
    for example, (chunk, plan) in enumerate(zip(values, plans)):
        per_example = plan.estimator(chunk).T
        per_feature[example, : per_example.shape[0]] = per_example
    return per_feature if per_reference else per_feature[..., 0]


def evaluate_plans(
    game: CoalitionGame,
    plans: list[Plan],
    show_progress: bool,
    desc: str,
    per_reference: bool = False,
) -> list[Tensor]:
    """The values of one plan shared by the batch, or of one plan per example.

    One plan: ``[values]`` as :func:`~.base.evaluate_plan` gives them. One
    plan per example (per-example graphs): every plan was built first (so a
    refusal comes before any model call), then all examples' rows go through
    the engine together, expanded chunk by chunk, and example ``n``'s values
    come back as ``(B, M_n)`` (B = 1 without ``per_reference``), in the
    layout its estimator reads as a batch of B.
    """
    if len(plans) == 1:
        return [evaluate_plan(game, plans[0], show_progress, desc, per_reference=per_reference)]
    d = game.num_features
    refs = game.num_references if per_reference else 1
    sizes = [len(plan) for plan in plans]
    store = stack_coalitions([plan.coalitions for plan in plans], d)
    example_index = torch.repeat_interleave(
        torch.arange(len(plans), device=store.device), torch.tensor(sizes, device=store.device)
    )
    reference_index = None
    if per_reference:
        # Every row once per reference, reference-major: values[b * R + r].
        total = len(store)
        reference_index = torch.arange(refs, device=store.device).repeat_interleave(total)
        example_index = example_index.repeat(refs)
        store = stack_coalitions([store] * refs, d)
    values = game.evaluate_rows(
        example_index.to(game.device),
        store,
        distinct=all(plan.distinct for plan in plans),
        reference_index=reference_index,
        show_progress=show_progress,
        desc=desc,
    ).view(refs, -1)
    return list(values.split(sizes, dim=1))


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
    # the default mask numbers its elements 0, 1, ... in order: equal to it exactly
    # when of its shape and numbered so (known from the mask's checks, no sync)
    default_shape = default_feature_mask(shape).shape
    if mask.shape == default_shape and game.features.id_ranges[0] == (0, mask.numel()):
        # The plain position/pixel mask: keep the LineGraph/GridGraph type, which
        # methods use (regression C-Shapley fits squares on grids).
        return infer_graph(shape)
    return infer_graph(shape, mask)


def check_order(k: Any) -> int:
    """The neighbourhood order ``k``: an int >= 0."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int (the neighbourhood radius), got {type(k).__name__}.")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}.")
    return k
