"""Shapley residuals against a dense least-squares solve on the hypercube."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shapley_residuals import ShapleyResiduals
from captum_graphshap.graphs import FeatureGraph, LineGraph
from captum_graphshap.uncertainty.local_residuals import neighbourhood_games_plan
from captum_graphshap.uncertainty.residuals import (
    hypercube_edges,
    inessential_games,
    residual_norms,
    residual_vectors,
    walsh_hadamard,
)

from .reference import TableGame, brute_shapley, mlp
from .test_bad_input import CountingModel


# ------------------------------------------------------------------ brute force
def dense_residuals(table: list[float], d: int) -> tuple[list[list[float]], dict, list[float]]:
    """Kumar et al. by a dense least-squares solve, in plain float64.

    Returns the inessential games (per feature, per coalition code), the
    residual of each feature on each edge ``(i, lower, upper)``, and the norms.
    """
    edges = [
        (s, s | (1 << j)) for j in range(d) for s in range(2**d) if not s >> j & 1
    ]  # (lower, upper)
    incidence = torch.zeros(len(edges), 2**d, dtype=torch.float64)
    for row, (lower, upper) in enumerate(edges):
        incidence[row, upper] = 1.0
        incidence[row, lower] = -1.0
    games, residuals, norms = [], {}, []
    for i in range(d):
        partial = torch.tensor(
            [
                table[upper] - table[lower] if (upper ^ lower) == 1 << i else 0.0
                for lower, upper in edges
            ],
            dtype=torch.float64,
        )
        # u(empty) = 0: drop the empty coalition's column.
        solution = torch.linalg.lstsq(incidence[:, 1:], partial[:, None]).solution[:, 0]
        game = torch.cat([torch.zeros(1, dtype=torch.float64), solution])
        residual = partial - incidence @ game
        games.append(game.tolist())
        for (lower, upper), r in zip(edges, residual.tolist()):
            residuals[(i, lower, upper)] = r
        norms.append(float(residual.norm()))
    return games, residuals, norms


def table_of(v, d: int) -> list[float]:
    return [v(frozenset(j for j in range(d) if m >> j & 1)) for m in range(2**d)]


def random_table(d: int, seed: int) -> torch.Tensor:
    return torch.randn(2**d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ------------------------------------------------------------------ the paper's example
def test_kumar_example_residuals_are_0_sqrt2_sqrt2():
    def f(x):
        return x[:, 0] + 2 * x[:, 1] * x[:, 2]

    x = torch.ones(1, 3, dtype=torch.float64)
    norms = ShapleyResiduals(f).attribute(x, baselines=0.0)
    expected = torch.tensor([[0.0, math.sqrt(2), math.sqrt(2)]], dtype=torch.float64)
    torch.testing.assert_close(norms, expected, rtol=0, atol=1e-12)
    # The dense solve agrees: the norm is the plain Euclidean norm over all 12 edges.
    table = table_of(lambda s: (0 in s) + 2.0 * (1 in s and 2 in s), 3)
    assert dense_residuals(table, 3)[2] == pytest.approx(expected[0].tolist(), abs=1e-12)


# ------------------------------------------------------------------ fast path == dense solve
@pytest.mark.parametrize("d", [1, 2, 3, 5, 6])
def test_walsh_hadamard_path_equals_dense_least_squares(d):
    table = random_table(d, seed=d)
    games, residuals, norms = dense_residuals(table.tolist(), d)
    values = table[None]
    torch.testing.assert_close(
        residual_norms(values)[0], torch.tensor(norms, dtype=torch.float64), rtol=0, atol=1e-10
    )
    got_games = inessential_games(values)[0]
    torch.testing.assert_close(
        got_games, torch.tensor(games, dtype=torch.float64), rtol=0, atol=1e-10
    )
    vectors = residual_vectors(values)[0]  # (d, d, 2^(d-1))
    edges = hypercube_edges(d)
    for i in range(d):
        for j in range(d):
            for e in range(2 ** (d - 1)):
                lower, upper = edges[j, e].tolist()
                assert upper == lower | (1 << j) and not lower >> j & 1
                assert vectors[i, j, e].item() == pytest.approx(
                    residuals[(i, lower, upper)], abs=1e-10
                )


def test_walsh_hadamard_matches_the_dense_matrix_and_inverts():
    d = 4
    codes = torch.arange(2**d)
    parity = torch.zeros(2**d, 2**d, dtype=torch.long)
    for bit in range(d):
        parity += ((codes[:, None] & codes[None, :]) >> bit) & 1
    hadamard = (1 - 2 * (parity % 2)).to(torch.float64)
    values = torch.randn(3, 2**d, dtype=torch.float64)
    torch.testing.assert_close(walsh_hadamard(values), values @ hadamard.T)
    torch.testing.assert_close(walsh_hadamard(walsh_hadamard(values)) / 2**d, values)


# ------------------------------------------------------------------ axioms
@settings(max_examples=25, deadline=None)
@given(
    weights=st.lists(st.floats(-5, 5), min_size=1, max_size=7),
    constant=st.floats(-5, 5),
)
def test_additive_games_have_zero_residuals(weights, constant):
    d = len(weights)
    table = torch.tensor(
        table_of(lambda s: constant + sum(weights[j] for j in s), d), dtype=torch.float64
    )
    norms = residual_norms(table[None])[0]
    assert float(norms.abs().max()) < 1e-9
    assert float(residual_vectors(table[None]).abs().max()) < 1e-9


@settings(max_examples=20, deadline=None)
@given(d=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_inessential_games_end_at_the_shapley_value_and_sum_to_the_game(d, seed):
    table = random_table(d, seed)
    games = inessential_games(table[None])[0]
    want = brute_shapley(lambda s: float(table[sum(1 << j for j in s)]), d)
    torch.testing.assert_close(games[:, -1], torch.tensor(want, dtype=torch.float64))
    assert float(games[:, 0].abs().max()) == 0.0  # v_i(empty) = 0
    torch.testing.assert_close(games.sum(dim=0), table - table[0])


def test_inessential_games_of_a_model_match_exact_shapley():
    model = mlp(6, dtype=torch.float64)
    x = torch.randn(4, 6, dtype=torch.float64)
    out = ShapleyResiduals(model).attribute(x, target=1, return_residuals=True)
    exact = ExactShapley(model).attribute(x, target=1)
    torch.testing.assert_close(out.inessential_games[..., -1], exact)
    # The edge vectors' norms are the norms returned.
    torch.testing.assert_close(out.edge_residuals.square().sum(dim=(2, 3)).sqrt(), out.attributions)
    assert out.edge_residuals.shape == (4, 6, 6, 32)


def test_norms_come_back_in_the_inputs_shapes_per_feature():
    model = mlp(6, dtype=torch.float64)
    base = torch.randn(2, 3, dtype=torch.float64)
    x = base.repeat_interleave(2, dim=1)
    mask = torch.tensor([[0, 0, 1, 1, 2, 2]])
    norms = ShapleyResiduals(model).attribute(x, target=0, feature_mask=mask)
    assert norms.shape == x.shape
    torch.testing.assert_close(norms[:, 0], norms[:, 1])

    def grouped(z):
        return model(z.repeat_interleave(2, dim=1))[:, 0]

    want = ShapleyResiduals(grouped).attribute(base)
    torch.testing.assert_close(norms[:, ::2], want)


# ------------------------------------------------------------------ local residuals
def brute_local_norms(table: torch.Tensor, graph: nx.Graph, k: int, context: str) -> list[float]:
    d = graph.number_of_nodes()
    norms = []
    for i in range(d):
        ball = sorted(nx.single_source_shortest_path_length(graph, i, cutoff=k))
        outside = sum(1 << j for j in range(d) if j not in ball) if context == "input" else 0
        local = []
        for code in range(2 ** len(ball)):
            members = sum(1 << ball[b] for b in range(len(ball)) if code >> b & 1)
            local.append(float(table[members | outside]))
        norms.append(dense_residuals(local, len(ball))[2][ball.index(i)])
    return norms


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("context", ["baseline", "input"])
def test_local_residuals_match_the_dense_solve_of_each_neighbourhood_game(k, context):
    d = 6
    game = TableGame(random_table(d, seed=3 + k))
    ones = torch.ones(1, d, dtype=torch.float64)
    got = ShapleyResiduals(game).attribute(ones, graph=LineGraph(d), k=k, context=context)
    want = brute_local_norms(game.table, nx.path_graph(d), k, context)
    torch.testing.assert_close(got[0], torch.tensor(want, dtype=torch.float64), atol=1e-10, rtol=0)


def test_local_residuals_on_a_whole_neighbourhood_are_the_global_ones():
    d = 5
    game = TableGame(random_table(d, seed=7))
    ones = torch.ones(1, d, dtype=torch.float64)
    local = ShapleyResiduals(game).attribute(ones, graph=LineGraph(d), k=d)
    torch.testing.assert_close(local, ShapleyResiduals(game).attribute(ones))


def test_local_residuals_are_zero_where_the_interaction_stays_outside_the_neighbourhood():
    # f = x0 + 2 x1 x2 + x4: only features 1 and 2 interact.
    def f(x):
        return x[:, 0] + 2 * x[:, 1] * x[:, 2] + x[:, 4]

    ones = torch.ones(1, 5, dtype=torch.float64)
    out = ShapleyResiduals(f).attribute(ones, k=1, return_residuals=True)
    assert out.attributions[0, [0, 3, 4]].abs().max() < 1e-12
    torch.testing.assert_close(
        out.attributions[0, 1], torch.tensor(math.sqrt(2), dtype=torch.float64)
    )
    # The local inessential game ends at the L-Shapley value; edges give the norms.
    assert out.neighbourhoods[1] == (0, 1, 2)
    assert out.inessential_games[1][0, -1].item() == pytest.approx(1.0)
    for feature, edges in enumerate(out.edge_residuals):
        assert edges.norm().item() == pytest.approx(out.attributions[0, feature].item(), abs=1e-12)


def test_local_residuals_with_one_graph_per_example():
    d = 5
    tables = [random_table(d, seed=s) for s in (1, 2)]
    game = TableGame(tables[0])
    ones = torch.ones(2, d, dtype=torch.float64)
    star = FeatureGraph.from_edges(d, [(0, j) for j in range(1, d)])
    line = LineGraph(d)
    got = ShapleyResiduals(game).attribute(ones, graph=[star, line], k=1)
    for row, graph in enumerate([star, line]):
        want = ShapleyResiduals(game).attribute(ones[:1], graph=graph, k=1)
        torch.testing.assert_close(got[row], want[0])


# ------------------------------------------------------------------ refusals
def test_too_many_features_are_refused_with_the_count_before_any_model_call():
    model = CountingModel()
    with pytest.raises(
        ValueError, match=r"2,097,152 coalitions.*ShapleyResiduals|ShapleyResiduals.*2,097,152"
    ):
        ShapleyResiduals(model).attribute(torch.randn(1, 21), target=0)
    with pytest.raises(ValueError, match="return_residuals=True would return"):
        ShapleyResiduals(model).attribute(torch.randn(1, 17), target=0, return_residuals=True)
    with pytest.raises(ValueError, match="pass k="):
        ShapleyResiduals(model).attribute(torch.randn(1, 5), target=0, graph=LineGraph(5))
    with pytest.raises(ValueError, match=r"local, k=30.*coalitions"):
        ShapleyResiduals(model).attribute(torch.randn(1, 25), target=0, k=30)
    with pytest.raises(TypeError, match="return_residuals"):
        ShapleyResiduals(model).attribute(torch.randn(1, 5), target=0, return_residuals="yes")
    with pytest.raises(ValueError, match="k must be >= 0"):
        ShapleyResiduals(model).attribute(torch.randn(1, 5), target=0, k=-1)
    with pytest.raises(ValueError, match="context must be one of"):
        ShapleyResiduals(model).attribute(torch.randn(1, 5), target=0, k=1, context="x")
    assert model.calls == 0


def test_neighbourhood_plan_lists_every_subset_of_each_ball_once():
    plan = neighbourhood_games_plan(LineGraph(4), 1)
    assert plan.neighbourhoods == ((0, 1), (0, 1, 2), (1, 2, 3), (2, 3))
    assert plan.offsets == (0, 4, 12, 20)
    assert plan.coalitions.shape == (24, 4)
    block = plan.coalitions[4:12]
    assert {tuple(row.nonzero().flatten().tolist()) for row in block} == {
        s for r in range(4) for s in itertools.combinations((0, 1, 2), r)
    }
