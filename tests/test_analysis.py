"""ExplanationGraph: orientation, redundancy, quotient DAG, PageRank against networkx,
density against gamma, bad input; and the post-hoc accuracy metric."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from captum_graphshap.analysis import ExplanationGraph, pagerank
from captum_graphshap.attr.bivariate_shapley import BivariateShapley
from captum_graphshap.graphs import LineGraph
from captum_graphshap.metrics.posthoc import mask_features, post_hoc_accuracy
from captum_graphshap.plans.bivariate import local_support

# E[i, j]: 0 and 1 are mutually redundant, 2 is redundant given 0 (not the
# reverse), 3 is redundant given nobody and makes nobody redundant.
MATRIX = torch.tensor(
    [
        [0.0, 0.001, 0.9, 0.4],
        [-0.002, 0.0, 0.8, 0.5],
        [0.0, 0.7, 0.0, 0.3],
        [0.6, 0.6, 0.6, 0.0],
    ],
    dtype=torch.float64,
)


def networkx_pagerank(graph: ExplanationGraph, personalization=None, damping=0.85):
    g = graph.to_networkx()
    weighted = nx.DiGraph()
    weighted.add_nodes_from(g)
    for u, v, w in g.edges(data="weight"):
        weighted.add_edge(u, v, weight=float(np.logaddexp(0.0, w)))
    ranks = nx.pagerank(
        weighted, alpha=damping, personalization=personalization, tol=1e-13, max_iter=100_000
    )
    return torch.tensor([ranks[i] for i in range(graph.num_features)], dtype=torch.float64)


def test_edges_point_from_the_condition_to_the_explained_feature():
    graph = ExplanationGraph(MATRIX, ["a", "b", "c", "d"])
    g = graph.to_networkx()
    assert g.number_of_edges() == 12 and not any(u == v for u, v in g.edges)
    for i in range(4):
        for j in range(4):
            if i != j:
                assert g.edges[j, i]["weight"] == float(MATRIX[i, j])
    assert g.nodes[2]["name"] == "c"


def test_redundancy_graph_groups_and_quotient_dag():
    graph = ExplanationGraph(MATRIX)
    h = graph.redundancy_graph(0.01)
    assert set(h.nodes) == {0, 1, 2, 3}
    # |E[i, j]| <= gamma: E[0,1], E[1,0], E[2,0]
    assert set(h.edges) == {(1, 0), (0, 1), (0, 2)}
    assert graph.mutually_redundant_groups(0.01) == [{0, 1}]
    assert graph.mutually_redundant_groups(0.0015) == []  # |E[1, 0]| = 0.002 > gamma
    dag = graph.quotient_dag(0.01)
    assert dag.components == [frozenset({0, 1}), frozenset({2}), frozenset({3})]
    assert dag.sources == [frozenset({0, 1})]
    assert dag.sinks == [frozenset({2})]
    assert dag.isolated == [frozenset({3})]
    assert dag.source_features() == [0, 1] and dag.sink_features() == [2]
    assert nx.is_directed_acyclic_graph(dag.graph)
    # at a large gamma every edge is redundant: one group, nothing else
    assert graph.mutually_redundant_groups(1.0) == [{0, 1, 2, 3}]


def test_or_model_end_to_end():
    def model(x):
        return (x[:, :3].max(dim=1).values + x[:, 3])[:, None]

    matrix, phi = BivariateShapley(model).attribute(torch.ones(1, 4), return_shapley=True)
    graph = ExplanationGraph(matrix[0], shapley=phi[0])
    assert graph.mutually_redundant_groups(1e-9) == [{0, 1, 2}]
    dag = graph.quotient_dag(1e-9)
    assert frozenset({0, 1, 2}) in dag.components and frozenset({3}) in dag.components
    # the independent feature ranks first
    assert int(graph.pagerank("shapley").argmax()) == 3


@pytest.mark.parametrize("damping", [0.85, 0.5, 0.0])
def test_pagerank_agrees_with_networkx(damping):
    weights = torch.randn(7, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    shapley = torch.tensor([0.3, -0.2, 0.0, 1.1, -0.5, 0.4, 0.2], dtype=torch.float64)
    graph = ExplanationGraph(weights, shapley=shapley)
    torch.testing.assert_close(
        graph.pagerank(damping=damping), networkx_pagerank(graph, None, damping), atol=1e-9, rtol=0
    )
    clipped = {i: max(float(s), 0.0) for i, s in enumerate(shapley)}
    torch.testing.assert_close(
        graph.pagerank("shapley", damping=damping),
        networkx_pagerank(graph, clipped, damping),
        atol=1e-9,
        rtol=0,
    )
    custom = [1.0, 0, 0, 0, 0, 0, 2.0]
    torch.testing.assert_close(
        graph.pagerank(custom, damping=damping),
        networkx_pagerank(graph, dict(enumerate(custom)), damping),
        atol=1e-9,
        rtol=0,
    )
    assert abs(float(graph.pagerank().sum()) - 1) < 1e-12


def test_pagerank_with_a_local_support_has_dangling_nodes_like_networkx():
    # Feature 0 of a line with no neighbours computed: its node has no out-edge.
    support = local_support(LineGraph(5), 1)
    support[:, 0] = False
    matrix = torch.randn(5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    graph = ExplanationGraph(matrix, support=support)
    assert graph.to_networkx().out_degree(0) == 0
    shapley = {0: 0.1, 1: 0.0, 2: 0.5, 3: 0.2, 4: 0.2}
    torch.testing.assert_close(
        graph.pagerank(list(shapley.values())),
        networkx_pagerank(graph, shapley),
        atol=1e-9,
        rtol=0,
    )
    # the raw function on a graph with zero rows and explicit zeros
    weights = np.array([[0, 2.0, 0], [0, 0, 0], [1.0, 1.0, 0]])
    g = nx.DiGraph()
    g.add_nodes_from(range(3))
    g.add_weighted_edges_from((u, v, weights[u, v]) for u, v in zip(*np.nonzero(weights)))
    want = nx.pagerank(g, tol=1e-13, max_iter=10_000)
    np.testing.assert_allclose(pagerank(weights), [want[i] for i in range(3)], atol=1e-9)


def test_shapley_personalization_with_no_positive_value_is_uniform():
    graph = ExplanationGraph(MATRIX, shapley=-torch.ones(4))
    torch.testing.assert_close(graph.pagerank("shapley"), graph.pagerank(None))


def test_density_curve_counts_edges_below_gamma():
    graph = ExplanationGraph(MATRIX)
    gammas, density = graph.density_curve()
    magnitudes = MATRIX.abs()[~torch.eye(4, dtype=torch.bool)]
    for gamma, value in zip(gammas.tolist(), density.tolist()):
        assert value == float((magnitudes <= gamma).double().mean())
        assert value == graph.density(gamma)
    assert gammas[0] == 0 and density[-1] == 1.0
    assert bool((density.diff() > 0).all())
    given, at = graph.density_curve([0.5, 0.0])
    assert given.tolist() == [0.0, 0.5] and at.tolist() == [1 / 12, 6 / 12]


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (lambda g: g.redundancy_graph(-0.1), ValueError, "gamma must be >= 0"),
        (lambda g: g.mutually_redundant_groups(-1), ValueError, "gamma must be >= 0"),
        (lambda g: g.quotient_dag(float("nan")), ValueError, "gamma"),
        (lambda g: g.density_curve([0.1, -0.2]), ValueError, "gamma must be >= 0"),
        (lambda g: g.redundancy_graph(True), TypeError, "gamma"),
        (lambda g: g.redundancy_graph("0.1"), TypeError, "gamma"),
        (lambda g: g.pagerank("shapley"), ValueError, "needs the univariate values"),
        (lambda g: g.pagerank("uniform"), ValueError, "personalization must be"),
        (lambda g: g.pagerank([1.0, 2.0]), ValueError, "personalization must hold 4"),
        (lambda g: g.pagerank([0.0] * 4), ValueError, "must not be all zero"),
        (lambda g: g.pagerank(damping=1.0), ValueError, "damping"),
    ],
    # lambdas' default ids ("<lambda>" and an index) are the same in every process,
    # as pytest-xdist's workers need; str() of a lambda holds its address
)
def test_bad_arguments(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call(ExplanationGraph(MATRIX))


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(matrix=torch.zeros(3, 4)), "\\(d, d\\)"),
        (dict(matrix=torch.zeros(2, 3, 3)), "index a batch"),
        (dict(matrix=torch.tensor([[0.0, float("nan")], [1.0, 0.0]])), "NaN"),
        (dict(matrix=torch.zeros(3, 3), feature_names=["a"]), "feature_names has 1"),
        (dict(matrix=torch.zeros(3, 3), shapley=torch.zeros(2)), "shapley must hold 3"),
        (dict(matrix=torch.zeros(3, 3), support=torch.ones(2, 2, dtype=torch.bool)), "support"),
    ],
    ids=str,
)
def test_bad_construction(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        ExplanationGraph(**kwargs)


def test_batch_of_one_is_accepted():
    assert ExplanationGraph(MATRIX[None]).num_features == 4


# ------------------------------------------------------------------ post-hoc


def test_post_hoc_accuracy_masks_the_chosen_features():
    weights = torch.tensor([[1.0, -1.0], [2.0, 0.0], [0.0, 3.0]])  # 3 features -> 2 classes

    def model(x):
        return x @ weights

    x = torch.tensor([[1.0, 1.0, 0.5], [0.2, 0.1, 1.0]])  # predicted: class 0, class 1
    masked = torch.tensor([[False, True, False], [False, False, True]])
    hidden = mask_features(x, masked)
    assert torch.equal(hidden, torch.tensor([[1.0, 0.0, 0.5], [0.2, 0.1, 0.0]]))
    kept = post_hoc_accuracy(model, x, masked)
    # example 0: scores (1, 0.5) -> class 0 kept; example 1: (0.4, -0.2) -> class 0, flipped
    assert kept.tolist() == [True, False]
    labels = torch.tensor([1, 0])
    assert post_hoc_accuracy(model, x, masked, labels=labels).tolist() == [False, True]
    # grouped features on images, a tensor baseline
    images = torch.rand(2, 1, 2, 2)
    mask = torch.tensor([[0, 0], [1, 1]])
    rows = torch.tensor([[True, False], [False, False]])
    out = mask_features(images, rows, feature_mask=mask, baselines=-1.0)
    assert bool((out[0, 0, 0] == -1).all()) and torch.equal(out[0, 0, 1], images[0, 0, 1])
    assert torch.equal(out[1], images[1])


def test_post_hoc_bad_input():
    x = torch.rand(2, 3)
    with pytest.raises(ValueError, match="masked must be a bool tensor of shape \\(2, 3\\)"):
        mask_features(x, torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="masked"):
        mask_features(x, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        mask_features(x, torch.zeros(2, 3, dtype=torch.bool), feature_mask=torch.arange(4))
    with pytest.raises(ValueError, match="\\(N, C\\)"):
        post_hoc_accuracy(lambda t: t.sum(dim=1), x, torch.zeros(2, 3, dtype=torch.bool))
