"""Local Shapley residuals: the residual of each L-Shapley neighbourhood game.

L-Shapley gives feature i the Shapley value of the game restricted to its
neighbourhood ``N_k(i)`` (features outside take the baseline, or keep the
input with ``context="input"``). The local residual is ``||r_i||`` of feature i
in that game (:mod:`.residuals`): the part of i's marginal contributions
within ``N_k(i)`` that its L-Shapley value cannot express. It is zero when i
enters its neighbourhood game additively, and it costs what L-Shapley costs:
the ``2^|N_k(i)|`` coalitions of each neighbourhood, shared and deduplicated.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from ..graphs import FeatureGraph
from ..plans.l_c_shapley import L_CONTEXTS
from ..plans.limits import MAX_COALITIONS, check_choice, check_neighbourhood_plan_size
from .residuals import (
    coalition_sizes,
    hypercube_gradient,
    single_residual_norm,
    walsh_coefficients,
    walsh_hadamard,
)


@dataclass(frozen=True)
class NeighbourhoodGames:
    """The plan of every feature's neighbourhood game on one graph.

    ``coalitions`` stacks, feature after feature, the ``2^m`` coalitions of
    each neighbourhood hypercube (row ``offsets[i] + c`` holds the members of
    ``neighbourhoods[i]`` selected by the bits of ``c``); ``players[i]`` is the
    position of i in its sorted neighbourhood.
    """

    coalitions: Tensor
    neighbourhoods: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    players: tuple[int, ...]

    def blocks(self) -> dict[tuple[int, int], list[int]]:
        """Features grouped by (neighbourhood size, player position)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for feature, (members, player) in enumerate(zip(self.neighbourhoods, self.players)):
            groups.setdefault((len(members), player), []).append(feature)
        return groups

    def columns(self, features: list[int], size: int, device: torch.device) -> Tensor:
        """``(len(features), 2^size)`` plan rows of those features' games."""
        starts = torch.tensor([self.offsets[f] for f in features], device=device)
        return starts[:, None] + torch.arange(1 << size, device=device)


def neighbourhood_games_plan(
    graph: FeatureGraph, k: int, context: str = "baseline", limit: int = MAX_COALITIONS
) -> NeighbourhoodGames:
    """Every neighbourhood hypercube of ``graph`` at radius ``k``.

    Refuses, before enumerating, plans above ``limit`` coalitions in total
    (before deduplication) with the count.
    """
    check_choice(context, L_CONTEXTS, "context")
    check_neighbourhood_plan_size(graph, k, limit, f"ShapleyResiduals (local, k={k})")
    return _plan_cached(graph, k, context)


@functools.lru_cache(maxsize=32)
def _plan_cached(graph: FeatureGraph, k: int, context: str) -> NeighbourhoodGames:
    n = graph.num_nodes
    neighbourhoods = tuple(tuple(sorted(graph.neighbourhood(i, k))) for i in range(n))
    blocks = []
    offsets = []
    offset = 0
    for members in neighbourhoods:
        m = len(members)
        codes = torch.arange(1 << m)
        bits = ((codes[:, None] >> torch.arange(m)) & 1).bool()
        block = torch.full((1 << m, n), context == "input", dtype=torch.bool)
        block[:, list(members)] = bits
        blocks.append(block)
        offsets.append(offset)
        offset += 1 << m
    players = tuple(members.index(i) for i, members in enumerate(neighbourhoods))
    coalitions = torch.cat(blocks) if blocks else torch.zeros(0, n, dtype=torch.bool)
    return NeighbourhoodGames(coalitions, neighbourhoods, tuple(offsets), players)


def local_residual_norms(values: Tensor, plan: NeighbourhoodGames) -> Tensor:
    """``(N, M)`` values of the plan's rows -> ``(N, d)`` local residual norms."""
    batch = values.shape[0]
    d = len(plan.neighbourhoods)
    norms = values.new_zeros(batch, d)
    for (size, player), features in plan.blocks().items():
        columns = plan.columns(features, size, values.device)  # (F, 2^m)
        games = values[:, columns].reshape(-1, 1 << size)  # (N * F, 2^m)
        norms[:, features] = single_residual_norm(games, player).view(batch, len(features))
    return norms


def player_residual(values: Tensor, player: int) -> tuple[Tensor, Tensor]:
    """One player's residual edges and inessential game in a batch of games.

    Args:
        values:
            ``(R, 2^m)`` values of games on m players.

    Returns:
        ``(edges, game)``: ``(R, m, 2^(m-1))`` residual on every edge (layout of
        :func:`~.residuals.hypercube_edges`) and ``(R, 2^m)`` the inessential game
        of ``player`` (zero at the empty coalition).
    """
    count = values.shape[-1]
    m = count.bit_length() - 1
    coefficients = walsh_coefficients(values)
    codes = torch.arange(count, device=values.device)
    sizes = coalition_sizes(m, values.device)
    selected = torch.where(
        (codes >> player) & 1 == 1,
        coefficients / sizes.clamp(min=1).to(values.dtype),
        torch.zeros_like(coefficients),
    )
    game = walsh_hadamard(selected)
    game = game - game[:, :1]
    edges = -hypercube_gradient(game)
    edges[:, player] += hypercube_gradient(values)[:, player]
    return edges, game


def local_residual_plan(graph: FeatureGraph, k: int, context: str = "baseline") -> Plan:
    """Local residuals as a plan: every subset of each ball, and the norms as estimator."""
    games = neighbourhood_games_plan(graph, k, context)
    return Plan(
        DenseCoalitions(games.coalitions), functools.partial(local_residual_norms, plan=games)
    )
