"""Shapley residuals: what each feature's Shapley value cannot express."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..graphs import FeatureGraph
from ..plans.exact import all_coalitions
from ..uncertainty.local_residuals import (
    NeighbourhoodGames,
    local_residual_plan,
    neighbourhood_games_plan,
    player_residual,
)
from ..uncertainty.residuals import (
    RESIDUAL_VECTORS_MAX_FEATURES,
    inessential_games,
    residual_norms,
    residual_vectors,
)
from .base import GameAttribution, Options, Outcome
from .graph_family import GraphArgument, check_order, evaluate_plans, resolve_graphs


@dataclasses.dataclass(frozen=True)
class ResidualOptions(Options):
    """Options of :class:`ShapleyResiduals`.

    Args:
        return_residuals: also return ``edge_residuals`` and
            ``inessential_games`` (and ``neighbourhoods`` with ``k``). Global:
            ``edge_residuals[n, i, j, e]`` is feature i's residual on the e-th
            edge ``(S, S + j)`` of direction j (``(N, d, d, 2^(d-1))``,
            refused above ``d = 16``), ``inessential_games[n, i, S]`` is
            ``v_i(S)`` (``(N, d, 2^d)``); local: one tensor per feature, over
            its neighbourhood's hypercube.
        graph: the feature graph of local residuals (as in
            :class:`~captum_graphshap.LShapley`; inferred from the input when
            None). Needs ``k``.
        k: None (global residuals) or the neighbourhood radius of local
            residuals. Local neighbourhoods may have at most 20 features.
        context: local residuals only: ``"baseline"`` or ``"input"``.
    """

    return_residuals: bool = False
    graph: GraphArgument = None
    k: int | None = None
    context: str = "baseline"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k is None and self.graph is not None:
            raise ValueError(
                "graph= is used by local residuals only; pass k= (the neighbourhood radius) "
                "as well, or leave graph=None for the global residuals."
            )
        if self.k is not None:
            check_order(self.k)


class ShapleyResiduals(GameAttribution):
    r"""Shapley residuals (Kumar et al., NeurIPS 2021): per-feature warnings.

    The model's game lives on the hypercube of coalitions. Feature i's
    Shapley value is ``v_i(D)`` of its *inessential game* ``v_i``, the game
    whose gradient is the least-squares fit to the i-direction part of the
    game's gradient; the residual :math:`r_i = \nabla_i v - \nabla v_i` is
    what that fit misses, i.e. what the single number :math:`\phi_i` cannot
    say about how feature i acts (interactions). ``attribute`` returns
    :math:`\lVert r_i \rVert`, the Euclidean norm over all :math:`d 2^{d-1}`
    hypercube edges, each counted once (``f = x1 + 2 x2 x3`` at ``x = 1``,
    ``b = 0`` gives ``(0, sqrt 2, sqrt 2)``); additive models give 0.

    Exact, from all :math:`2^d` coalitions (refused above ``d = 20`` with
    the count, before any model call); the least squares diagonalises in the
    Walsh-Hadamard basis, so the maths costs :math:`O(d 2^d)` per feature.

    With ``k`` the residuals are *local*: feature i's residual in its
    L-Shapley neighbourhood game (:math:`N_k(i)` on ``graph``), at the cost
    of L-Shapley. Where they are small, i acts additively within its
    neighbourhood and its L-Shapley value tells the whole local story.

    Example:
        >>> import torch
        >>> from captum_graphshap import ShapleyResiduals
        >>> model = torch.nn.Linear(3, 1)  # additive: no residual
        >>> float(ShapleyResiduals(model).attribute(torch.ones(1, 3), target=0).abs().max()) < 1e-6
        True
    """

    Options = ResidualOptions

    def uses_graph_mask(self, options: ResidualOptions) -> bool:
        return options.k is not None

    def explain(
        self, game: CoalitionGame, options: ResidualOptions, show_progress: bool
    ) -> Outcome:
        if options.k is not None:
            return _local(game, options, show_progress)
        d = game.num_features
        coalitions = all_coalitions(d, game.device, method="ShapleyResiduals")
        if options.return_residuals and d > RESIDUAL_VECTORS_MAX_FEATURES:
            raise ValueError(
                f"return_residuals=True would return {d * d * 2 ** (d - 1):,} edge values per "
                f"example at d = {d}; it is limited to d <= {RESIDUAL_VECTORS_MAX_FEATURES}. "
                "Ask for the norms only, or group features with feature_mask."
            )
        values = game.evaluate(
            coalitions, distinct=True, show_progress=show_progress, desc=self.progress_desc
        )
        norms = residual_norms(values)
        if not options.return_residuals:
            return Outcome(norms)
        games = inessential_games(values)
        return _with_residuals(norms, residual_vectors(values, games), games)


def _with_residuals(norms: Tensor, edges: Any, games: Any, **more: Any) -> Outcome:
    extras = {"edge_residuals": edges, "inessential_games": games, **more}
    return Outcome(norms, extras)


def _local(game: CoalitionGame, options: ResidualOptions, show_progress: bool) -> Outcome:
    assert options.k is not None  # local residuals: explain() checked
    graphs = resolve_graphs(options.graph, game)
    k = int(options.k)
    if not isinstance(graphs, FeatureGraph) and options.return_residuals:
        raise ValueError(
            "return_residuals=True with one graph per example is not supported (the "
            "neighbourhood games differ per example); ask for the norms only, or "
            "explain one example at a time."
        )
    games = [
        neighbourhood_games_plan(g, k, options.context)
        for g in ([graphs] if isinstance(graphs, FeatureGraph) else graphs)
    ]  # every plan (and refusal) before any model call
    plans = [
        local_residual_plan(g, k, options.context)
        for g in ([graphs] if isinstance(graphs, FeatureGraph) else graphs)
    ]
    values = evaluate_plans(game, plans, show_progress, ShapleyResiduals.progress_desc)
    if len(plans) == 1:
        norms = plans[0].estimator(values[0])
        if not options.return_residuals:
            return Outcome(norms)
        return _local_output(norms, values[0], games[0])
    norms = values[0].new_zeros(game.batch_size, game.num_features)
    for example, (chunk, plan) in enumerate(zip(values, plans)):
        per_example = plan.estimator(chunk)[0]
        norms[example, : per_example.shape[0]] = per_example
    return Outcome(norms)


def _local_output(norms: Tensor, values: Tensor, plan: NeighbourhoodGames) -> Outcome:
    edges: list[Tensor] = []
    games: list[Tensor] = []
    for feature, (members, player) in enumerate(zip(plan.neighbourhoods, plan.players)):
        columns = plan.columns([feature], len(members), values.device)[0]
        edge, local_game = player_residual(values[:, columns], player)
        edges.append(edge)
        games.append(local_game)
    return _with_residuals(norms, edges, games, neighbourhoods=list(plan.neighbourhoods))
