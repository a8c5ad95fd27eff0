"""Shapley residuals: what each feature's Shapley value cannot express."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..graphs import FeatureGraph
from ..plans.exact import all_coalitions
from ..uncertainty.local_residuals import (
    NeighbourhoodGames,
    local_residual_norms,
    neighbourhood_games_plan,
    player_residual,
)
from ..uncertainty.residuals import (
    RESIDUAL_VECTORS_MAX_FEATURES,
    inessential_games,
    residual_norms,
    residual_vectors,
)
from ._common import check_order, default_graph_mask, pack_attributions, resolve_graphs


class ShapleyResidualsOutput(NamedTuple):
    """``attribute(..., return_residuals=True)`` of the global residuals.

    Attributes
    ----------
    norms:
        ``||r_i||`` in the inputs' shapes (what ``attribute`` returns alone).
    edge_residuals:
        ``(N, d, d, 2^(d-1))``: ``[n, i, j, e]`` is feature i's residual on
        the e-th edge ``(S, S + j)`` of direction j, S the e-th coalition
        without j in increasing code order
        (:func:`~captum_graphshap.uncertainty.hypercube_edges` lists them).
    inessential_games:
        ``(N, d, 2^d)``: ``v_i(S)`` for every coalition code S (bit j set =
        feature j present); ``v_i(D)`` is the Shapley value of feature i.
    """

    norms: Tensor | tuple[Tensor, ...]
    edge_residuals: Tensor
    inessential_games: Tensor


class LocalResidualsOutput(NamedTuple):
    """``attribute(..., k=..., return_residuals=True)``: one game per feature.

    Attributes
    ----------
    norms:
        Local ``||r_i||`` in the inputs' shapes.
    edge_residuals:
        Per feature i, ``(N, m_i, 2^(m_i - 1))``: its residual on the edges
        of its neighbourhood hypercube (``m_i = |N_k(i)|``; players are the
        neighbourhood's features in increasing order).
    inessential_games:
        Per feature i, ``(N, 2^(m_i))``: its inessential game in the
        neighbourhood game; the last entry is its L-Shapley value.
    neighbourhoods:
        Per feature, the sorted feature ids of ``N_k(i)``.
    """

    norms: Tensor | tuple[Tensor, ...]
    edge_residuals: list[Tensor]
    inessential_games: list[Tensor]
    neighbourhoods: list[tuple[int, ...]]


class ShapleyResiduals(PerturbationAttribution):
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
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        super().__init__(forward_func)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        return_residuals: bool = False,
        graph: FeatureGraph | Sequence[FeatureGraph] | None = None,
        k: int | None = None,
        context: str = "baseline",
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
    ) -> Tensor | tuple[Tensor, ...] | ShapleyResidualsOutput | LocalResidualsOutput:
        """Residual norm of each feature, in the inputs' shapes.

        Arguments shared with Captum mean what they mean in
        :meth:`~captum_graphshap.attr.exact.ExactShapley.attribute`.

        Args:
            return_residuals: also return the residual on every edge and the
                inessential games (a :class:`ShapleyResidualsOutput`, or a
                :class:`LocalResidualsOutput` with ``k``). Global residual
                vectors hold ``d * d * 2^(d-1)`` numbers per example and are
                refused above ``d = 16``.
            graph: the feature graph of local residuals (as in
                :class:`~captum_graphshap.attr.l_shapley.LShapley`; inferred
                from the input when None). Needs ``k``.
            k: None (global residuals) or the neighbourhood radius of local
                residuals. Local neighbourhoods may have at most 20 features.
            context: local residuals only: ``"baseline"`` (features outside
                :math:`N_k(i)` take the baseline, as L-Shapley's default) or
                ``"input"``.
            references: a background set replacing ``baselines``.
            value: ``"output"`` or ``"log_prob"``.

        Returns:
            The norms with the shape, dtype and type of ``inputs``; with
            ``return_residuals`` a named tuple whose first field they are.
        """
        if not isinstance(return_residuals, bool):
            raise TypeError(
                f"return_residuals must be True or False, got {type(return_residuals).__name__}."
            )
        if k is None and graph is not None:
            raise ValueError(
                "graph= is used by local residuals only; pass k= (the neighbourhood radius) "
                "as well, or leave graph=None for the global residuals."
            )
        if k is not None:
            return self._local(
                inputs,
                baselines,
                target,
                additional_forward_args,
                feature_mask,
                perturbations_per_eval,
                show_progress,
                return_residuals,
                graph,
                check_order(k),
                context,
                references,
                value,
            )
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            references=references,
            value=value,
        )
        d = game.num_features
        coalitions = all_coalitions(d, game.device, method="ShapleyResiduals")
        if return_residuals and d > RESIDUAL_VECTORS_MAX_FEATURES:
            raise ValueError(
                f"return_residuals=True would return {d * d * 2 ** (d - 1):,} edge values per "
                f"example at d = {d}; it is limited to d <= {RESIDUAL_VECTORS_MAX_FEATURES}. "
                "Ask for the norms only, or group features with feature_mask."
            )
        values = game.evaluate(
            coalitions, distinct=True, show_progress=show_progress, desc="ShapleyResiduals"
        )
        norms = pack_attributions(game, residual_norms(values), is_tuple)
        if not return_residuals:
            return norms
        games = inessential_games(values)
        return ShapleyResidualsOutput(norms, residual_vectors(values, games), games)

    def _local(
        self,
        inputs: Any,
        baselines: Any,
        target: Any,
        additional_forward_args: Any,
        feature_mask: Any,
        perturbations_per_eval: int | None,
        show_progress: bool,
        return_residuals: bool,
        graph: Any,
        k: int,
        context: str,
        references: Any,
        value: str,
    ) -> Tensor | tuple[Tensor, ...] | LocalResidualsOutput:
        game, is_tuple = prepare_game(
            self.forward_func,
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
        if isinstance(graphs, FeatureGraph):
            plan = neighbourhood_games_plan(graphs, k, context)
            values = game.evaluate(
                plan.coalitions.to(game.device),
                show_progress=show_progress,
                desc="ShapleyResiduals (local)",
            )
            norms = pack_attributions(game, local_residual_norms(values, plan), is_tuple)
            if not return_residuals:
                return norms
            return _local_output(norms, values, plan)
        if return_residuals:
            raise ValueError(
                "return_residuals=True with one graph per example is not supported (the "
                "neighbourhood games differ per example); ask for the norms only, or "
                "explain one example at a time."
            )
        plans = [
            neighbourhood_games_plan(g, k, context) for g in graphs
        ]  # refusals before any model call
        return pack_attributions(game, _per_example_norms(game, plans, show_progress), is_tuple)


def _local_output(
    norms: Tensor | tuple[Tensor, ...], values: Tensor, plan: NeighbourhoodGames
) -> LocalResidualsOutput:
    edges: list[Tensor] = []
    games: list[Tensor] = []
    for feature, (members, player) in enumerate(zip(plan.neighbourhoods, plan.players)):
        columns = plan.columns([feature], len(members), values.device)[0]
        edge, local_game = player_residual(values[:, columns], player)
        edges.append(edge)
        games.append(local_game)
    return LocalResidualsOutput(norms, edges, games, list(plan.neighbourhoods))


def _per_example_norms(
    game: CoalitionGame, plans: list[NeighbourhoodGames], show_progress: bool
) -> Tensor:
    """Local norms with one graph per example: every example's rows in one ragged batch."""
    d = game.num_features
    blocks = []
    for plan in plans:
        padded = torch.zeros(plan.coalitions.shape[0], d, dtype=torch.bool)
        padded[:, : plan.coalitions.shape[1]] = plan.coalitions
        blocks.append(padded)
    sizes = [block.shape[0] for block in blocks]
    example_index = torch.repeat_interleave(torch.arange(len(blocks)), torch.tensor(sizes))
    values = game.evaluate_rows(
        example_index.to(game.device),
        torch.cat(blocks).to(game.device),
        show_progress=show_progress,
        desc="ShapleyResiduals (local)",
    )
    norms = values.new_zeros(game.batch_size, d)
    for example, (chunk, plan) in enumerate(zip(values.split(sizes), plans)):
        norms[example, : len(plan.neighbourhoods)] = local_residual_norms(chunk[None], plan)[0]
    return norms
