"""A fuzzing harness for the graph methods: random graphs, masks and models against
the papers' formulas.

Each example draws a random graph over ``d`` features (connected or not, from
networkx's G(n, p)), a feature mask that gives each feature one or more of up
to 12 elements (in a random arrangement), a batch of two examples with a
shared, per-example or scalar baseline (features exactly at the baseline
included: the graph methods keep them), a random MLP and a target.
``MyersonValue``, ``LShapley`` and ``CShapley`` (k, context and weights drawn)
must equal the brute-force formulas of ``tests/reference.py`` on each
example's game, built one model call per coalition.
``GRAPHSHAP_FUZZ_EXAMPLES=N`` runs N random examples instead of the
derandomised few.
"""

from __future__ import annotations

import networkx as nx
import torch
from hypothesis import given
from hypothesis import strategies as st

import captum_graphshap as cg

from .reference import brute_c_shapley, brute_l_shapley, brute_myerson, mlp, model_game
from .test_fuzz import FUZZ


@st.composite
def graph_games(draw):
    d = draw(st.integers(2, 7))
    graph = nx.gnp_random_graph(
        d, draw(st.sampled_from([0.3, 0.6, 1.0])), seed=draw(st.integers(0, 999))
    )
    elements = draw(st.integers(d, 12))
    owners = list(range(d)) + [draw(st.integers(0, d - 1)) for _ in range(elements - d)]
    mask = torch.tensor(draw(st.permutations(owners))).view(1, -1)
    g = torch.Generator().manual_seed(draw(st.integers(0, 999)))
    x = torch.randn(2, elements, generator=g, dtype=torch.float64)
    form = draw(st.sampled_from(["scalar", "shared", "per example"]))
    if form == "scalar":
        baseline = torch.full((1, elements), 0.5, dtype=torch.float64)
        given_baseline = 0.5
    else:
        rows = 2 if form == "per example" else 1
        baseline = torch.randn(rows, elements, generator=g, dtype=torch.float64)
        given_baseline = baseline
    for feature in draw(st.lists(st.integers(0, d - 1), max_size=2)):  # at the baseline
        x[0, mask[0] == feature] = baseline[0, mask[0] == feature]
    return graph, mask, x, baseline.expand(2, -1), given_baseline


@FUZZ
@given(
    case=graph_games(),
    method=st.sampled_from(["myerson", "l", "c"]),
    k=st.integers(1, 3),
    context=st.sampled_from(["baseline", "input"]),
    weights=st.sampled_from(["myerson", "paper"]),
    seed=st.integers(0, 99),
)
def test_graph_methods_equal_the_papers_formulas_on_random_graphs(
    case, method, k, context, weights, seed
):
    graph, mask, x, baseline, given_baseline = case
    d = graph.number_of_nodes()
    model = mlp(x.shape[1], 3, seed=seed, dtype=torch.float64)
    feature_graph = cg.FeatureGraph.from_networkx(graph, nodelist=list(range(d)))
    kwargs = {
        "baselines": given_baseline,
        "target": 1,
        "feature_mask": mask,
        "graph": feature_graph,
    }
    if method == "myerson":
        got = cg.MyersonValue(model).attribute(x, **kwargs)
    elif method == "l":
        got = cg.LShapley(model).attribute(x, k=k, context=context, **kwargs)
    else:
        got = cg.CShapley(model).attribute(x, k=k, context=context, weights=weights, **kwargs)
    for row in range(2):
        v = model_game(model, x[row], baseline[row], mask[0], target=1)
        if method == "myerson":
            want = brute_myerson(v, graph)
        elif method == "l":
            want = brute_l_shapley(v, graph, k, context)
        else:
            want = brute_c_shapley(v, graph, k, context, weights)
        want_elements = torch.tensor(want, dtype=torch.float64)[mask[0]]
        torch.testing.assert_close(got[row], want_elements, rtol=1e-9, atol=1e-9)
