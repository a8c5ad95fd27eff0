"""Plots of bivariate explanations draw what they are given (matplotlib Agg)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display in tests

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection
from matplotlib.patches import FancyArrowPatch, Rectangle

from captum_graphshap.analysis import ExplanationGraph
from captum_graphshap.viz.graph_plots import (
    group_colours,
    plot_explanation_graph,
    plot_pixel_overlay,
    plot_token_strip,
)

MATRIX = torch.tensor(
    [
        [0.0, 0.0, 0.9, 0.4],
        [0.0, 0.0, 0.8, 0.5],
        [0.2, 0.7, 0.0, -0.3],
        [0.6, 0.6, 0.6, 0.0],
    ],
    dtype=torch.float64,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _nodes(ax) -> PathCollection:
    (collection,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    return collection


def test_graph_plot_sizes_nodes_by_importance_and_colours_groups():
    graph = ExplanationGraph(MATRIX, ["w", "x", "y", "z"], shapley=[0.1, 0.2, 0.4, 0.8])
    ax = plot_explanation_graph(graph, gamma=0.0, importance="shapley", max_edges=5)
    nodes = _nodes(ax)
    sizes = nodes.get_sizes()
    assert len(sizes) == 4 and list(np.argsort(sizes)) == [0, 1, 2, 3]
    colours = nodes.get_facecolors()
    # features 0 and 1 form the only group at gamma = 0: same colour, unlike the rest
    np.testing.assert_allclose(colours[0], colours[1])
    np.testing.assert_allclose(colours[0], group_colours([{0, 1}])[0])
    assert not np.allclose(colours[2], colours[0]) and np.allclose(colours[2], colours[3])
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 5
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["w", "x", "y", "z"]


def test_graph_plot_defaults_to_pagerank_and_draws_on_given_axes():
    graph = ExplanationGraph(MATRIX)
    _, ax = plt.subplots()
    assert plot_explanation_graph(graph, layout="spring", ax=ax) is ax
    ranks = graph.pagerank().numpy()
    assert list(np.argsort(_nodes(ax).get_sizes())) == list(np.argsort(ranks))
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 12  # all 12 edges fit under the default max_edges


def test_token_strip_draws_scores_and_group_colours():
    tokens = ["not", "bad", "at", "all"]
    scores = torch.tensor([0.4, 0.3, 0.1, 0.2])
    ax = plot_token_strip(tokens, scores=scores, groups=[{0, 1}])
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    np.testing.assert_allclose([b.get_height() for b in bars], scores.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    colour = group_colours([{0, 1}])[0]
    np.testing.assert_allclose(bars[0].get_facecolor(), colour)
    np.testing.assert_allclose(bars[1].get_facecolor(), colour)
    assert not np.allclose(bars[2].get_facecolor(), colour)


def test_pixel_overlay_tints_groups_and_maps_scores():
    image = torch.rand(1, 3, 4, 4)
    mask = torch.arange(4).reshape(2, 2).repeat_interleave(2, 0).repeat_interleave(2, 1)
    scores = torch.tensor([0.1, 0.2, 0.3, 0.4])
    ax = plot_pixel_overlay(image, mask[None, None], scores=scores, groups=[{3}], alpha=0.5)
    layers = ax.get_images()
    assert len(layers) == 3  # grey image, score heat map, group tint
    np.testing.assert_allclose(layers[1].get_array(), scores.numpy()[mask.numpy()])
    tint = np.asarray(layers[2].get_array())
    inside = mask.numpy() == 3
    np.testing.assert_allclose(tint[inside][:, 3], 0.5)
    np.testing.assert_allclose(tint[~inside][:, 3], 0.0)


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda g: plot_explanation_graph(g, layout="tree"), "layout"),
        (lambda g: plot_explanation_graph(g, importance="shapley"), "shapley=phi"),
        (lambda g: plot_explanation_graph(g, importance=[1.0]), "importance must hold 4"),
        (lambda g: plot_token_strip(["a", "b"], scores=[1.0]), "scores must hold 2"),
        (lambda g: plot_token_strip(["a"], groups=[{3}]), "outside 0..0"),
        (lambda g: plot_pixel_overlay(torch.rand(4, 4), torch.zeros(3, 3)), "feature_mask"),
    ],
    # lambdas' default ids ("<lambda>" and an index) are the same in every process,
    # as pytest-xdist's workers need; str() of a lambda holds its address
)
def test_bad_arguments(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call(ExplanationGraph(MATRIX))
