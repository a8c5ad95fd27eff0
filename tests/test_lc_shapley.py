"""LShapley and CShapley against the paper's formulas computed by brute force."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from torch import nn

from captum_graphshap import (
    CShapley,
    ExactShapley,
    FeatureGraph,
    GridGraph,
    LineGraph,
    LShapley,
    MyersonValue,
    SuperpixelGraph,
)
from captum_graphshap.plans.l_c_shapley import c_shapley_plan, l_shapley_plan

from .optional_deps import optional
from .reference import (
    ChainSumModel,
    TableGame,
    brute_c_shapley,
    brute_l_shapley,
    graph_restricted,
    mlp,
    model_game,
)


def random_table_game(d: int, seed: int) -> TableGame:
    generator = torch.Generator().manual_seed(seed)
    return TableGame(torch.randn(2**d, generator=generator, dtype=torch.float64))


def explain_table(explainer, game: TableGame, **kwargs) -> torch.Tensor:
    ones = torch.ones(1, game.d, dtype=torch.float64)
    return explainer(game).attribute(ones, baselines=0.0, **kwargs)[0]


# ------------------------------------------------------------------ lines
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("context", ["baseline", "input"])
def test_l_shapley_on_a_line_matches_eq5(k, context):
    game = random_table_game(7, seed=k)
    got = explain_table(LShapley, game, graph=LineGraph(7), k=k, context=context)
    want = brute_l_shapley(game.value, nx.path_graph(7), k, context)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("context", ["baseline", "input"])
@pytest.mark.parametrize("weights", ["myerson", "paper"])
def test_c_shapley_on_a_line_matches_eq6(k, context, weights):
    game = random_table_game(7, seed=10 + k)
    got = explain_table(CShapley, game, graph=LineGraph(7), k=k, context=context, weights=weights)
    want = brute_c_shapley(game.value, nx.path_graph(7), k, context, weights)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


def test_myerson_weights_are_eq6_in_the_interior_of_a_line():
    line = nx.path_graph(9)
    game = random_table_game(9, seed=3)
    paper = brute_c_shapley(game.value, line, 2, weights="paper")
    myerson = explain_table(CShapley, game, graph=LineGraph(9), k=2)
    # Features 3..5: no window within k = 2 of them reaches an end node, so
    # every window has two boundary nodes and b = 2 gives Eq. (6)'s constant.
    torch.testing.assert_close(
        myerson[3:6], torch.tensor(paper[3:6], dtype=torch.float64), rtol=0, atol=1e-12
    )
    assert not torch.allclose(myerson[:2], torch.tensor(paper[:2], dtype=torch.float64))


def test_on_a_real_model_with_default_line_graph_and_ppe():
    model = mlp(6, dtype=torch.float64, seed=2)
    x = torch.randn(3, 6, dtype=torch.float64)
    baseline = torch.randn(1, 6, dtype=torch.float64)
    line = nx.path_graph(6)
    l_got = LShapley(model).attribute(x, baseline, target=2, k=1, perturbations_per_eval=3)
    c_got = CShapley(model).attribute(x, baseline, target=2, k=2, perturbations_per_eval=3)
    for n in range(3):
        v = model_game(model, x[n], baseline[0], torch.arange(6), target=2)
        l_want = torch.tensor(brute_l_shapley(v, line, 1), dtype=torch.float64)
        c_want = torch.tensor(brute_c_shapley(v, line, 2), dtype=torch.float64)
        torch.testing.assert_close(l_got[n], l_want, rtol=0, atol=1e-10)
        torch.testing.assert_close(c_got[n], c_want, rtol=0, atol=1e-10)


# ------------------------------------------------------------- grids etc.
@pytest.mark.parametrize("method", [LShapley, CShapley])
def test_grid_of_pixels_with_channels_grouped(method):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(2 * 3 * 3, 8), nn.Tanh(), nn.Linear(8, 3)
    ).double()
    image = torch.randn(2, 2, 3, 3, dtype=torch.float64)
    got = method(model).attribute(image, target=1, k=1)
    assert got.shape == image.shape
    torch.testing.assert_close(got[:, 0], got[:, 1])
    grid = nx.grid_2d_graph(3, 3)
    grid = nx.convert_node_labels_to_integers(grid, ordering="sorted")
    brute = brute_l_shapley if method is LShapley else brute_c_shapley
    for n in range(2):
        v = model_game(
            model,
            image[n],
            torch.zeros(2, 3, 3, dtype=torch.float64),
            torch.arange(9).reshape(1, 3, 3),
            target=1,
        )
        want = torch.tensor(brute(v, grid, 1), dtype=torch.float64)
        torch.testing.assert_close(got[n, 0].reshape(-1), want, rtol=0, atol=1e-10)


def test_per_example_superpixel_graphs():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    images = torch.randn(2, 1, 4, 4, dtype=torch.float64)
    labels = [
        np.array([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]),
        np.array([[0, 0, 0, 1], [2, 2, 0, 1], [2, 4, 4, 1], [3, 3, 4, 4]]),
    ]
    graphs = [SuperpixelGraph.from_segments(lab) for lab in labels]
    mask = torch.stack([g.feature_mask for g in graphs])[:, None]  # (N, 1, H, W)
    for method, brute in ((LShapley, brute_l_shapley), (CShapley, brute_c_shapley)):
        got = method(model).attribute(images, target=0, feature_mask=mask, graph=graphs, k=1)
        for n, g in enumerate(graphs):
            v = model_game(
                model, images[n], torch.zeros(1, 4, 4, dtype=torch.float64), mask[n], target=0
            )
            want = torch.tensor(brute(v, g.to_networkx(), 1), dtype=torch.float64)
            torch.testing.assert_close(got[n, 0], want[mask[n, 0]], rtol=0, atol=1e-10)


def test_token_ids_with_pad_baseline_and_word_mask():
    torch.manual_seed(0)
    embedding = nn.Embedding(40, 6).double()
    conv = nn.Conv1d(6, 4, kernel_size=2).double()

    def model(tokens, attention):
        h = embedding(tokens) * attention[..., None]
        return torch.tanh(conv(h.transpose(1, 2))).sum(dim=(1, 2))[:, None]

    tokens = torch.randint(1, 40, (2, 7))
    attention = torch.ones(2, 7, dtype=torch.float64)
    words = torch.tensor([[0, 0, 1, 2, 2, 3, 4]])  # 5 words over 7 sub-word tokens
    got = CShapley(model).attribute(
        tokens, baselines=0, additional_forward_args=attention, feature_mask=words, k=1
    )
    assert got.shape == tokens.shape and got.is_floating_point()
    for n in range(2):

        def one(t, m=model, a=attention[n : n + 1]):
            return m(t, a)

        v = model_game(one, tokens[n], torch.zeros(7, dtype=torch.long), words[0])
        want = torch.tensor(brute_c_shapley(v, nx.path_graph(5), 1), dtype=torch.float64)
        torch.testing.assert_close(got[n].double(), want[words[0]], rtol=0, atol=1e-6)


# ------------------------------------------------------ the Myerson limit
@pytest.mark.parametrize(
    "graph",
    [
        LineGraph(6),
        GridGraph(2, 3),
        FeatureGraph.from_networkx(nx.gnp_random_graph(6, 0.4, seed=5)),
    ],
    ids=["line", "grid", "random"],
)
def test_c_shapley_at_the_diameter_is_myerson_is_shapley_for_decomposable_games(graph):
    base = random_table_game(graph.num_nodes, seed=7)
    restricted = graph_restricted(base.value, graph.to_networkx())
    # A game that decomposes over connected components: v = v^G.
    table = torch.tensor(
        [
            restricted(frozenset(i for i in range(graph.num_nodes) if m >> i & 1))
            for m in range(2**graph.num_nodes)
        ],
        dtype=torch.float64,
    )
    game = TableGame(table)
    k = max(graph.diameter(), 1)
    c = explain_table(CShapley, game, graph=graph, k=k)
    myerson = explain_table(MyersonValue, game, graph=graph)
    exact = explain_table(ExactShapley, game)
    torch.testing.assert_close(c, myerson, rtol=0, atol=1e-12)
    torch.testing.assert_close(myerson, exact, rtol=0, atol=1e-12)


def test_chain_model_c_shapley_equals_exact_shapley():
    model = ChainSumModel(6)
    x = torch.randn(2, 6, dtype=torch.float64) + 2.0
    torch.testing.assert_close(
        CShapley(model).attribute(x, k=5), ExactShapley(model).attribute(x), rtol=0, atol=1e-10
    )


def test_l_shapley_at_full_radius_is_exact_shapley():
    model = mlp(6, dtype=torch.float64)
    x = torch.randn(2, 6, dtype=torch.float64)
    torch.testing.assert_close(
        LShapley(model).attribute(x, target=0, k=5),
        ExactShapley(model).attribute(x, target=0),
        rtol=0,
        atol=1e-12,
    )


# -------------------------------------------------------- distinct rows
class RowCounter(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.rows = 0

    def forward(self, x):
        self.rows += x.shape[0]
        return self.model(x)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_distinct_rows_on_a_line(k):
    d = 40
    x = torch.randn(1, d, dtype=torch.float64)
    counter = RowCounter(mlp(d, dtype=torch.float64))
    LShapley(counter).attribute(x, target=0, k=k)
    assert counter.rows <= 2 ** (2 * k) * d
    coalitions = l_shapley_plan(LineGraph(d), k, "baseline").coalitions.dense()
    assert counter.rows == coalitions.shape[0]  # every distinct coalition once

    counter.rows = 0
    CShapley(counter).attribute(x, target=0, k=k)
    # (k+1)^2 windows per feature, two coalitions each, shared between neighbours.
    assert counter.rows <= 2 * (k + 1) ** 2 * d
    assert counter.rows == len(c_shapley_plan(LineGraph(d), k))


def test_rows_are_shared_across_examples_of_a_batch():
    counter = RowCounter(mlp(10, dtype=torch.float64))
    CShapley(counter).attribute(torch.randn(4, 10, dtype=torch.float64), target=0, k=2)
    assert counter.rows == 4 * len(c_shapley_plan(LineGraph(10), 2))


# ------------------------------------------------------------- regression
def test_regression_solves_the_constrained_kernel_least_squares():
    d, k = 6, 2
    game = random_table_game(d, seed=21)
    got = explain_table(CShapley, game, graph=LineGraph(d), max_size=k, estimator="kernel")
    # Independent solve: KKT system of the weighted least squares with efficiency.
    windows = [list(range(s, s + w)) for w in range(1, k + 1) for s in range(d - w + 1)]
    z = np.zeros((len(windows), d))
    for row, window in enumerate(windows):
        z[row, window] = 1
    sizes = z.sum(1)
    from math import comb

    w = np.array([(d - 1) / (comb(d, int(s)) * s * (d - s)) for s in sizes])
    v0 = game.value([])
    y = np.array([game.value(window) - v0 for window in windows])
    kkt = np.block(
        [[2 * z.T @ (w[:, None] * z), np.ones((d, 1))], [np.ones((1, d)), np.zeros((1, 1))]]
    )
    rhs = np.concatenate([2 * z.T @ (w * y), [game.value(range(d)) - v0]])
    want = np.linalg.solve(kkt, rhs)[:d]
    torch.testing.assert_close(got, torch.tensor(want), rtol=0, atol=1e-10)


def test_regression_on_a_grid_uses_squares_and_is_efficient():
    model = mlp(16, dtype=torch.float64)
    image = torch.randn(2, 1, 4, 4, dtype=torch.float64)

    def flat_model(z):
        return model(z.flatten(1))

    counter = RowCounter(nn.Identity())
    got = CShapley(lambda z: flat_model(counter(z))).attribute(
        image, target=1, max_size=2, estimator="kernel"
    )
    # empty + 16 pixels + 9 two-by-two squares + full image, per example
    assert counter.rows == 2 * (1 + 16 + 9 + 1)
    gain = flat_model(image)[:, 1] - flat_model(torch.zeros_like(image))[:, 1]
    torch.testing.assert_close(got.sum(dim=(1, 2, 3)), gain.detach(), rtol=0, atol=1e-10)


# --------------------------------------------------------------- refusals
def test_a_k_that_would_explode_is_refused_with_the_count_before_the_model_runs():
    counter = RowCounter(nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 2)))
    images = torch.rand(1, 1, 28, 28)
    with pytest.raises(ValueError, match=r"LShapley with k=3 would evaluate [\d,]+ coalitions"):
        LShapley(counter).attribute(images, target=0, k=3)
    with pytest.raises(ValueError, match=r"CShapley with k=6 would evaluate more than"):
        CShapley(counter).attribute(images, target=0, k=6)
    assert counter.rows == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        (dict(k=-1), ValueError, "k must be >= 0"),
        (dict(k=1.5), TypeError, "k must be an int"),
        (dict(context="global"), ValueError, "context must be one of"),
        (dict(graph=LineGraph(4)), ValueError, "graph has 4 nodes but feature_mask defines 5"),
        (dict(graph=[LineGraph(5)]), ValueError, "graph is a list of 1 graphs"),
    ],
)
@pytest.mark.parametrize("method", [LShapley, CShapley])
def test_bad_arguments(method, kwargs, error, fragment):
    counter = RowCounter(mlp(5))
    with pytest.raises(error, match=fragment):
        method(counter).attribute(torch.randn(2, 5), target=0, **kwargs)
    assert counter.rows == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (dict(weights="uniform"), "weights must be one of"),
        (dict(estimator="permutation"), "estimator must be"),
    ],
)
def test_bad_c_shapley_options(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        CShapley(mlp(5)).attribute(torch.randn(2, 5), target=0, **kwargs)


def test_non_integer_token_baseline_for_an_embedding_model():
    embedding = nn.Embedding(10, 3)
    with pytest.raises(ValueError, match="baselines has non-integer values"):
        CShapley(lambda t: embedding(t).sum(dim=(1, 2))).attribute(
            torch.randint(0, 10, (1, 6)), baselines=0.5
        )


def test_captum_visualization_accepts_image_attributions():
    from captum.attr import visualization

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 6 * 6, 2))
    image = torch.rand(1, 3, 6, 6)
    attr = CShapley(model).attribute(image, target=1, k=1)
    figure, _ = visualization.visualize_image_attr(
        attr[0].permute(1, 2, 0).numpy(),
        image[0].permute(1, 2, 0).numpy(),
        method="blended_heat_map",
        use_pyplot=False,
    )
    assert figure is not None


def test_slic_superpixels_on_a_real_photo_match_brute_force():
    optional("skimage")
    from skimage import data, transform

    photo = transform.resize(data.astronaut(), (32, 32), anti_aliasing=True)  # HWC in [0, 1]
    image = torch.tensor(photo, dtype=torch.float64).permute(2, 0, 1)[None]
    graph = SuperpixelGraph.slic(photo, n_segments=12, compactness=10.0)
    mask = graph.feature_mask[None, None]  # (1, 1, H, W): channels grouped
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.Tanh(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, 2),
    ).double()
    got = CShapley(model).attribute(image, target=1, feature_mask=mask, graph=graph, k=1)
    assert got.shape == image.shape
    v = model_game(model, image[0], torch.zeros(3, 32, 32, dtype=torch.float64), mask[0], 1)
    want = torch.tensor(brute_c_shapley(v, graph.to_networkx(), 1), dtype=torch.float64)
    torch.testing.assert_close(got[0, 0], want[mask[0, 0]], rtol=0, atol=1e-10)
    # Without graph=, the region adjacency of the mask is inferred: same answer.
    inferred = CShapley(model).attribute(image, target=1, feature_mask=mask, k=1)
    torch.testing.assert_close(inferred, got, rtol=0, atol=0)
