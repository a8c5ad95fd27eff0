"""The graph plans (L-/C-Shapley, Myerson, regression) against brute-force formulas.

Each plan is applied to the values of a random table game over every
coalition, which pins both the coalitions and the coefficients; the
references are the textbook formulas of tests/reference.py.
"""

from __future__ import annotations

import pytest
import torch

from captum_graphshap.engine.plan import MemberCoalitions
from captum_graphshap.graphs import FeatureGraph, GridGraph, LineGraph
from captum_graphshap.plans.exact import _myerson_plan_cached, myerson_plan
from captum_graphshap.plans.l_c_shapley import (
    _c_shapley_plan_cached,
    _l_shapley_plan_cached,
    ball_subsets,
    c_shapley_plan,
    c_shapley_regression_plan,
    l_shapley_plan,
)

from .reference import brute_c_shapley, brute_l_shapley, brute_myerson

GRAPHS = {
    "line6": LineGraph(6),
    "grid3x4": GridGraph(3, 4),
    "grid1x1": GridGraph(1, 1),
    "cycles": FeatureGraph.from_edges(
        7, [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 6), (6, 3), (1, 5)]
    ),
    "star": FeatureGraph.from_edges(5, [(0, 1), (0, 2), (0, 3), (0, 4)]),
    "disconnected": FeatureGraph.from_edges(6, [(0, 1), (2, 3), (3, 4)]),
}


def table_game(n: int, seed: int):
    table = torch.randn(2**n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    weights = 1 << torch.arange(n)

    def apply(plan):
        rows = plan.coalitions.dense()
        return plan.estimator(table[(rows.long() * weights).sum(dim=1)][None])[0]

    def v(subset: frozenset[int]) -> float:
        return float(table[sum(1 << i for i in subset)])

    return apply, v


def _distinct(plan) -> bool:
    rows = plan.coalitions.dense()
    return torch.unique(rows, dim=0).shape[0] == rows.shape[0]


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("context", ["baseline", "input"])
def test_l_shapley_plans_equal_the_formula(name, k, context):
    graph = GRAPHS[name]
    apply, v = table_game(graph.num_nodes, seed=k + 7 * len(name))
    want = torch.tensor(brute_l_shapley(v, graph.to_networkx(), k, context), dtype=torch.float64)
    for plan in (_l_shapley_plan_cached(graph, k, context), l_shapley_plan(graph, k, context)):
        assert isinstance(plan.coalitions, MemberCoalitions)
        assert _distinct(plan)
        torch.testing.assert_close(apply(plan), want, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("context", ["baseline", "input"])
@pytest.mark.parametrize("weights", ["myerson", "paper"])
def test_c_shapley_plans_equal_the_formula(name, k, context, weights):
    graph = GRAPHS[name]
    apply, v = table_game(graph.num_nodes, seed=k + 5 * len(name))
    want = torch.tensor(
        brute_c_shapley(v, graph.to_networkx(), k, context, weights), dtype=torch.float64
    )
    general = _c_shapley_plan_cached(graph, k, context, weights, 2**20)
    for plan in (general, c_shapley_plan(graph, k, context, weights)):
        assert isinstance(plan.coalitions, MemberCoalitions)
        assert _distinct(plan)
        assert len(plan) == len(general)
        torch.testing.assert_close(apply(plan), want, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", [*GRAPHS, "path9", "complete5"])
def test_myerson_plan_on_any_graph_equals_the_formula(name):
    graph = {
        "path9": FeatureGraph.from_edges(9, [(i, i + 1) for i in range(8)]),
        "complete5": FeatureGraph.from_edges(5, [(i, j) for i in range(5) for j in range(i)]),
    }.get(name) or GRAPHS[name]
    apply, v = table_game(graph.num_nodes, seed=len(name))
    want = torch.tensor(brute_myerson(v, graph.to_networkx()), dtype=torch.float64)
    general = _myerson_plan_cached(graph, 2**20)
    assert isinstance(general.coalitions, MemberCoalitions)
    assert _distinct(general)
    for plan in (general, myerson_plan(graph)):
        torch.testing.assert_close(apply(plan), want, atol=1e-10, rtol=0)


def test_ball_subsets_lists_every_subset_of_every_ball_in_code_order():
    graph = GRAPHS["cycles"]
    subsets = ball_subsets(graph, 1)
    assert len(subsets) == int((2**subsets.sizes).sum())
    for i in range(graph.num_nodes):
        ball = graph.neighbourhood(i, 1)
        assert subsets.sizes[i] == len(ball)
        assert ball[int(subsets.players[i])] == i
        for code in range(2 ** len(ball)):
            row = int(subsets.starts[i]) + code
            assert int(subsets.feature[row]) == i and int(subsets.code[row]) == code
            got = subsets.members[subsets.offsets[row] : subsets.offsets[row + 1]].tolist()
            assert got == [ball[p] for p in range(len(ball)) if code >> p & 1]


@pytest.mark.parametrize(
    "graph",
    [LineGraph(8), GridGraph(3, 4), GRAPHS["cycles"]],
    ids=["line", "grid", "general"],
)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_regression_plan_is_stored_by_members_and_efficient(graph, k):
    plan = c_shapley_regression_plan(graph, k)
    assert isinstance(plan.coalitions, MemberCoalitions)
    rows = plan.coalitions.dense()
    assert not rows[0].any() and rows[-1].all()
    assert _distinct(plan)
    apply, _ = table_game(graph.num_nodes, seed=k)
    phi = apply(plan)
    # efficiency: sum phi = v(D) - v(empty), read off the table through the plan
    values = torch.randn(1, len(plan), dtype=torch.float64)
    got = plan.estimator(values)[0]
    torch.testing.assert_close(got.sum(), values[0, -1] - values[0, 0])
    assert torch.isfinite(phi).all()


def test_large_grid_plans_have_members_linear_in_pixels():
    # 128 x 128 pixels, k = 1: balls of at most 5 pixels, O(pixels) coalitions
    pixels = 128 * 128
    for build in (l_shapley_plan, c_shapley_plan):
        plan = build(GridGraph(128, 128), 1)
        assert isinstance(plan.coalitions, MemberCoalitions)
        assert len(plan) <= 32 * pixels
        assert plan.coalitions.members.numel() <= 5 * len(plan)


def test_large_grid_plans_refuse_with_the_count():
    # k=1 at 224 x 224 (1,141,983 coalitions) is built under the default limit of
    # 2^22 for graph plans (tests/test_batching.py); a lower limit refuses it, and
    # k=2 is refused by the default one
    for build, name in ((c_shapley_plan, "CShapley"), (l_shapley_plan, "LShapley")):
        with pytest.raises(ValueError, match=f"{name} with k=1 would evaluate 1,141,983"):
            build(GridGraph(224, 224), 1, limit=2**20)
        with pytest.raises(ValueError, match=f"{name} with k=2 would evaluate"):
            build(GridGraph(224, 224), 2)


def test_general_graphs_refuse_too_many_connected_sets():
    complete = FeatureGraph.from_edges(24, [(i, j) for i in range(24) for j in range(i)])
    with pytest.raises(ValueError, match="CShapley with k=1 would evaluate more than"):
        c_shapley_plan(complete, 1)
    with pytest.raises(ValueError, match="LShapley with k=1 would evaluate"):
        l_shapley_plan(complete, 1)
    with pytest.raises(ValueError, match="MyersonValue: the graph has more than"):
        myerson_plan(complete)


def test_long_lines_and_general_paths_build():
    plan = myerson_plan(LineGraph(500))
    assert len(plan) == 500 * 501 // 2 + 1
    path = FeatureGraph.from_edges(200, [(i, i + 1) for i in range(199)])
    general = myerson_plan(path)
    assert isinstance(general.coalitions, MemberCoalitions)
    assert len(general) == 200 * 201 // 2 + 1
    # on a path, the Myerson value of an additive game is the game's own terms
    weights = torch.randn(200, dtype=torch.float64)
    rows = general.coalitions.dense().to(torch.float64)
    torch.testing.assert_close(general.estimator((rows @ weights)[None])[0], weights)
