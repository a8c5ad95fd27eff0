"""MyersonValue against brute force, and against Shapley where they must agree."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from captum_graphshap import ExactShapley, FeatureGraph, GridGraph, LineGraph, MyersonValue
from captum_graphshap.plans.exact import myerson_plan

from .reference import ChainSumModel, TableGame, brute_myerson, brute_shapley, mlp, model_game


def test_equals_shapley_on_model_that_decomposes_over_chain_components():
    model = ChainSumModel(7)
    x = torch.randn(3, 7, dtype=torch.float64) + 2.0  # nonzero: present means present
    myerson = MyersonValue(model).attribute(x, graph=LineGraph(7))
    shapley = ExactShapley(model).attribute(x)
    torch.testing.assert_close(myerson, shapley, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "graph",
    [
        LineGraph(6),
        GridGraph(2, 3),
        FeatureGraph.from_networkx(nx.star_graph(4)),
        FeatureGraph.from_networkx(nx.gnp_random_graph(6, 0.5, seed=3)),
    ],
    ids=["line", "grid", "star", "random"],
)
def test_matches_brute_force_myerson_on_arbitrary_games(graph):
    d = graph.num_nodes
    table = torch.randn(2**d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    game = TableGame(table)
    got = MyersonValue(game).attribute(torch.ones(1, d, dtype=torch.float64), graph=graph)[0]
    want = brute_myerson(game.value, graph.to_networkx())
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-10)


def test_efficiency_on_connected_graph_and_complete_graph_is_shapley():
    model = mlp(5, dtype=torch.float64)
    x = torch.randn(2, 5, dtype=torch.float64)
    line = MyersonValue(model).attribute(x, target=2, graph=LineGraph(5))
    gain = model(x)[:, 2] - model(torch.zeros(1, 5, dtype=torch.float64))[0, 2]
    torch.testing.assert_close(line.sum(dim=1), gain, rtol=0, atol=1e-10)
    complete = FeatureGraph.from_networkx(nx.complete_graph(5))
    torch.testing.assert_close(
        MyersonValue(model).attribute(x, target=2, graph=complete),
        ExactShapley(model).attribute(x, target=2),
        rtol=0,
        atol=1e-10,
    )


def test_plan_size_on_a_line_is_quadratic():
    coalitions = myerson_plan(LineGraph(30)).coalitions.dense()
    assert coalitions.shape == (30 * 31 // 2 + 1, 30)


def test_counts_rows_on_a_line():
    rows = []
    model = mlp(12, dtype=torch.float64)

    def counting(x):
        rows.append(x.shape[0])
        return model(x)

    MyersonValue(counting).attribute(torch.randn(2, 12, dtype=torch.float64), target=0)
    assert sum(rows) == 2 * (12 * 13 // 2 + 1)


def test_image_default_graph_groups_channels():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2 * 2 * 3, 2)).double()
    image = torch.randn(2, 2, 2, 3, dtype=torch.float64)  # N, C, H, W
    got = MyersonValue(model).attribute(image, target=1)
    assert got.shape == image.shape
    torch.testing.assert_close(got[:, 0], got[:, 1])  # one value per pixel
    grid = GridGraph(2, 3)
    for n in range(2):
        v = model_game(
            model,
            image[n],
            torch.zeros(2, 2, 3, dtype=torch.float64),
            torch.arange(6).reshape(1, 2, 3),
            target=1,
        )
        want = torch.tensor(brute_myerson(v, grid.to_networkx()), dtype=torch.float64)
        torch.testing.assert_close(got[n, 0].reshape(-1), want, rtol=0, atol=1e-10)


def test_per_example_graphs():
    model = mlp(5, dtype=torch.float64)
    x = torch.randn(2, 5, dtype=torch.float64)
    masks = torch.tensor([[0, 0, 1, 2, 3], [0, 1, 1, 2, 2]])
    graphs = [LineGraph(4), LineGraph(3)]
    got = MyersonValue(model).attribute(x, target=0, feature_mask=masks, graph=graphs)
    for n in range(2):
        v = model_game(model, x[n], torch.zeros(5, dtype=torch.float64), masks[n], target=0)
        want = torch.tensor(brute_myerson(v, graphs[n].to_networkx()), dtype=torch.float64)
        torch.testing.assert_close(got[n], want[masks[n]], rtol=0, atol=1e-10)


def test_word_graph_inferred_from_feature_mask():
    model = mlp(6, dtype=torch.float64)
    x = torch.randn(1, 6, dtype=torch.float64)
    words = torch.tensor([[0, 0, 1, 2, 2, 3]])
    got = MyersonValue(model).attribute(x, target=1, feature_mask=words)
    v = model_game(model, x[0], torch.zeros(6, dtype=torch.float64), words[0], target=1)
    want = torch.tensor(brute_myerson(v, nx.path_graph(4)), dtype=torch.float64)
    torch.testing.assert_close(got[0], want[words[0]], rtol=0, atol=1e-10)


def test_brute_shapley_reference_itself_on_a_closed_form():
    # v(S) = |S|^2 on 3 players: symmetric, so each gets v(D)/3 = 3.
    assert brute_shapley(lambda s: float(len(s) ** 2), 3) == pytest.approx([3.0, 3.0, 3.0])
