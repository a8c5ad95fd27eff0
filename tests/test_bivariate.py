"""BivariateShapley against a float64 brute force of Masoomi et al. Eq. (6), its
estimators' convergence, the graph-local variant and bad input."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap.analysis import ExplanationGraph
from captum_graphshap.attr.bivariate_shapley import BivariateShapley
from captum_graphshap.attr.l_shapley import LShapley
from captum_graphshap.graphs import GridGraph, LineGraph
from captum_graphshap.plans.bivariate import (
    bivariate_from_all_coalitions,
    bivariate_from_kernel,
    bivariate_from_permutations,
    kernel_plan,
    local_support,
    permutation_prefixes,
)
from captum_graphshap.plans.permutations import permutation_ranks

from .reference import Game, TableGame, brute_shapley, mlp, model_game


def brute_bivariate(v: Game, d: int, players: list[int] | None = None) -> torch.Tensor:
    """Eq. (6) literally: E2[i, j] = sum over S in P - i containing j of
    |S|! (m - |S| - 1)! / m! (v(S + i) - v(S)), m = |P|; other entries 0."""
    players = list(range(d)) if players is None else players
    m = len(players)
    out = torch.zeros(d, d, dtype=torch.float64)
    for i in players:
        others = [p for p in players if p != i]
        for j in others:
            total = 0.0
            for size in range(m):
                weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
                for subset in itertools.combinations(others, size):
                    if j in subset:
                        s = frozenset(subset)
                        total += weight * (v(s | {i}) - v(s))
            out[i, j] = total
    return out


def brute_local(v: Game, graph, k: int) -> torch.Tensor:
    """The graph-local definition: row i is Eq. (6) in the game on N_k(i)
    (features outside it at the baseline, i.e. absent from every coalition)."""
    d = graph.num_nodes
    out = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d):
        ball = list(graph.neighbourhood(i, k))
        out[i] = brute_bivariate(v, d, ball)[i]
    return out


class CountingModel(nn.Module):
    """Wraps a model and counts rows and calls."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.calls = 0
        self.rows = 0

    def forward(self, *inputs):
        self.calls += 1
        self.rows += inputs[0].shape[0]
        return self.model(*inputs)


def or_model(x):
    """max of three binary features plus an independent one."""
    return (x[:, :3].max(dim=1).values + x[:, 3])[:, None]


# ---------------------------------------------------------------- exact values


@pytest.mark.parametrize("ppe", [None, 1, 5])
def test_exact_matches_brute_force_eq6_in_float64(ppe):
    model = mlp(6, dtype=torch.float64, seed=2)
    x = torch.randn(2, 6, dtype=torch.float64)
    baseline = torch.randn(2, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 2, 2, 3, 4]])
    got, phi = BivariateShapley(model).attribute(
        x,
        baselines=baseline,
        target=1,
        feature_mask=mask,
        perturbations_per_eval=ppe,
        return_shapley=True,
    )
    assert got.shape == (2, 5, 5) and got.dtype == torch.float64
    for n in range(2):
        v = model_game(model, x[n], baseline[n], mask[0], target=1)
        torch.testing.assert_close(got[n], brute_bivariate(v, 5), rtol=0, atol=1e-10)
        want_phi = torch.tensor(brute_shapley(v, 5), dtype=torch.float64)
        torch.testing.assert_close(phi[n], want_phi, rtol=0, atol=1e-10)
    assert torch.equal(got.diagonal(dim1=1, dim2=2), torch.zeros(2, 5, dtype=torch.float64))


tables = st.integers(min_value=1, max_value=5).flatmap(
    lambda d: st.lists(st.floats(-10, 10, allow_nan=False), min_size=2**d, max_size=2**d).map(
        lambda values: torch.tensor(values, dtype=torch.float64)
    )
)


@settings(max_examples=30, deadline=None)
@given(tables)
def test_exact_estimator_matches_brute_force_on_any_game(table):
    d = table.numel().bit_length() - 1
    game = TableGame(table)
    matrix, phi = bivariate_from_all_coalitions(table[None])
    torch.testing.assert_close(matrix[0], brute_bivariate(game.value, d), rtol=0, atol=1e-9)
    want = torch.tensor(brute_shapley(game.value, d), dtype=torch.float64)
    torch.testing.assert_close(phi[0], want, rtol=0, atol=1e-9)


def test_present_and_absent_parts_sum_to_the_shapley_value():
    # E2[i, j] is the part of phi_i's sum over coalitions with j; the rest
    # (coalitions without j) is written out here, and the two add up to phi_i.
    d = 5
    table = torch.randn(2**d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    game = TableGame(table)
    matrix, phi = bivariate_from_all_coalitions(table[None])
    for i, j in itertools.permutations(range(d), 2):
        others = [p for p in range(d) if p not in (i, j)]
        absent = sum(
            math.factorial(size)
            * math.factorial(d - size - 1)
            / math.factorial(d)
            * (game.value(set(s) | {i}) - game.value(set(s)))
            for size in range(d - 1)
            for s in itertools.combinations(others, size)
        )
        assert abs(float(matrix[0, i, j]) + absent - float(phi[0, i])) < 1e-12


def test_or_model_has_exactly_one_mutually_redundant_group():
    x = torch.ones(1, 4)
    for method, kwargs, gamma in [
        ("exact", {}, 1e-9),
        ("permutation", {"n_samples": 50}, 1e-9),  # j before i in {0,1,2}: gain exactly 0
        ("kernel", {"n_samples": 4000}, 0.03),
    ]:
        matrix = BivariateShapley(or_model).attribute(
            x, baselines=0.0, estimator=method, generator=torch.Generator().manual_seed(0), **kwargs
        )
        groups = ExplanationGraph(matrix[0]).mutually_redundant_groups(gamma)
        assert groups == [{0, 1, 2}], method
    exact = BivariateShapley(or_model).attribute(x)
    # the independent feature adds 1 in every coalition: E2[3, j] = P(j before 3) = 1/2
    torch.testing.assert_close(exact[0, 3, :3], torch.full((3,), 0.5))
    # and feature 0 counts only when it is the first of {0,1,2}, after 3: 1/12
    torch.testing.assert_close(exact[0, :3, 3], torch.full((3,), 1 / 12))


def test_token_ids_with_embedding_model():
    torch.manual_seed(0)
    embedding = nn.Embedding(30, 4).double()
    head = nn.Linear(4, 1).double()

    def model(tokens):
        return head(torch.tanh(embedding(tokens)).sum(dim=1) ** 2)

    tokens = torch.randint(1, 30, (2, 5))
    got = BivariateShapley(model).attribute(tokens, baselines=0)
    assert got.shape == (2, 5, 5) and got.dtype == torch.get_default_dtype()
    for n in range(2):
        v = model_game(model, tokens[n], torch.zeros(5, dtype=torch.long), torch.arange(5))
        torch.testing.assert_close(got[n].double(), brute_bivariate(v, 5), rtol=0, atol=1e-6)
    sampled = BivariateShapley(model).attribute(
        tokens, baselines=0, estimator="permutation", n_samples=20, generator=torch.Generator()
    )
    assert sampled.shape == (2, 5, 5)


class TupleModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(5, out_features=2, dtype=torch.float64, seed=7)

    def forward(self, first, second, scale):
        return self.net(torch.cat([first, second.flatten(1)], dim=1)) * scale[:, None]


@pytest.mark.parametrize("method", ["exact", "permutation", "kernel"])
def test_tuple_inputs_and_feature_masks_match_the_concatenated_input(method):
    x1 = torch.randn(3, 3, dtype=torch.float64)
    x2 = torch.randn(3, 1, 2, dtype=torch.float64)
    scale = torch.rand(3, dtype=torch.float64) + 0.5
    masks = (torch.tensor([[2, 0, 1]]), torch.tensor([[[3, 1]]]))
    seed = 5
    tuple_out = BivariateShapley(TupleModel()).attribute(
        (x1, x2),
        baselines=(0.5, torch.zeros(1, 1, 2, dtype=torch.float64)),
        target=1,
        additional_forward_args=(scale,),
        feature_mask=masks,
        estimator=method,
        n_samples=None if method == "exact" else 64,
        generator=torch.Generator().manual_seed(seed),
    )
    net = TupleModel().net

    def flat_model(x, scale):
        return net(x) * scale[:, None]

    single = BivariateShapley(flat_model).attribute(
        torch.cat([x1, x2.flatten(1)], dim=1),
        baselines=torch.tensor([[0.5, 0.5, 0.5, 0.0, 0.0]], dtype=torch.float64),
        target=1,
        additional_forward_args=(scale,),
        feature_mask=torch.tensor([[2, 0, 1, 3, 1]]),
        estimator=method,
        n_samples=None if method == "exact" else 64,
        generator=torch.Generator().manual_seed(seed),
    )
    assert tuple_out.shape == (3, 4, 4)
    torch.testing.assert_close(tuple_out, single, rtol=0, atol=1e-12)
    if method == "exact":
        for n in range(3):
            x = torch.cat([x1[n], x2[n].flatten()])
            base = torch.tensor([0.5, 0.5, 0.5, 0.0, 0.0], dtype=torch.float64)

            def wrapped(row, n=n):
                return flat_model(row, scale[n : n + 1].expand(row.shape[0]))

            v = model_game(wrapped, x, base, torch.tensor([2, 0, 1, 3, 1]), target=1)
            torch.testing.assert_close(tuple_out[n], brute_bivariate(v, 4), rtol=0, atol=1e-10)


def test_per_example_feature_mask():
    model = mlp(5, dtype=torch.float64, seed=3)
    x = torch.randn(2, 5, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 2, 3], [3, 2, 1, 0, 0]])
    got = BivariateShapley(model).attribute(x, target=0, feature_mask=mask)
    for n in range(2):
        v = model_game(model, x[n], torch.zeros(5, dtype=torch.float64), mask[n], target=0)
        torch.testing.assert_close(got[n], brute_bivariate(v, 4), rtol=0, atol=1e-10)


# ------------------------------------------------------------------ estimators


def _mean_error(estimate, exact):
    return float((estimate - exact).abs().mean())


def test_sampling_and_kernel_converge_to_the_exact_matrix():
    model = mlp(6, dtype=torch.float64, seed=11)
    x = torch.randn(2, 6, dtype=torch.float64)
    explainer = BivariateShapley(model)
    exact, exact_phi = explainer.attribute(x, target=0, return_shapley=True)
    scale = float(exact.abs().mean())
    for method, budgets in [("permutation", [16, 256, 4096]), ("kernel", [16, 256, 16384])]:
        errors = []
        for n_samples in budgets:
            # average over seeds so the test checks the trend, not one draw
            runs = [
                explainer.attribute(
                    x,
                    target=0,
                    estimator=method,
                    n_samples=n_samples,
                    generator=torch.Generator().manual_seed(seed),
                    return_shapley=True,
                )
                for seed in range(3)
            ]
            errors.append(sum(_mean_error(m, exact) for m, _ in runs) / 3)
            phi_error = sum(_mean_error(p, exact_phi) for _, p in runs) / 3
        assert errors[0] > errors[1] > errors[2], (method, errors)
        assert errors[2] < 0.03 * scale, (method, errors, scale)
        assert phi_error < 0.03 * float(exact_phi.abs().mean()), method


def test_sampling_estimator_is_the_permutation_average():
    # A permutation's marginal gains, averaged where j precedes i: check the
    # estimator against that loop for a few permutations of a random game.
    table = torch.randn(2**4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    game = TableGame(table)
    generator = torch.Generator().manual_seed(2)
    rank = permutation_ranks(1, 4, 7, False, generator, torch.device("cpu"))[0]
    coalitions = permutation_prefixes(rank)
    values = torch.tensor(
        [[game.value(torch.nonzero(c).flatten().tolist()) for c in coalitions]], dtype=torch.float64
    )
    matrix, phi = bivariate_from_permutations(values, rank)
    want = torch.zeros(4, 4, dtype=torch.float64)
    want_phi = torch.zeros(4, dtype=torch.float64)
    for p in range(7):
        order = rank[p].argsort().tolist()
        for position, i in enumerate(order):
            before = set(order[:position])
            gain = game.value(before | {i}) - game.value(before)
            want_phi[i] += gain / 7
            for j in before:
                want[i, j] += gain / 7
    torch.testing.assert_close(matrix[0], want, rtol=0, atol=1e-12)
    torch.testing.assert_close(phi[0], want_phi, rtol=0, atol=1e-12)


def test_kernel_plan_is_paired_without_endpoints():
    plan = kernel_plan(7, 101, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert plan.shape == (102, 7)  # odd counts are rounded up to whole pairs
    sizes = plan.sum(dim=1)
    assert bool(((sizes > 0) & (sizes < 7)).all())
    assert torch.equal(plan[0::2], ~plan[1::2])


def test_kernel_estimator_does_not_depend_on_the_row_order():
    # Paired rows take a faster path (half the Gram products); any order of the
    # same rows is the same least squares.
    d = 6
    plan = kernel_plan(d, 40, torch.Generator().manual_seed(1), torch.device("cpu"))
    table = torch.randn(2, 2**d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    codes = (plan.long() << torch.arange(d)).sum(dim=1)
    values = table[:, codes]
    paired = bivariate_from_kernel(plan, values, table[:, 0], table[:, -1])
    order = torch.randperm(plan.shape[0], generator=torch.Generator().manual_seed(3))
    shuffled = bivariate_from_kernel(plan[order], values[:, order], table[:, 0], table[:, -1])
    for a, b in zip(paired, shuffled):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_kernel_univariate_output_is_paired_kernelshap_on_the_same_draws():
    from captum_graphshap import PairedKernelShap

    model = mlp(7, dtype=torch.float64, seed=6)
    x = torch.randn(3, 7, dtype=torch.float64)
    _, phi = BivariateShapley(model).attribute(
        x,
        target=1,
        estimator="kernel",
        n_samples=30,
        generator=torch.Generator().manual_seed(4),
        return_shapley=True,
    )
    univariate = PairedKernelShap(model).attribute(
        x, target=1, n_samples=30, generator=torch.Generator().manual_seed(4), estimator="kernel"
    )
    torch.testing.assert_close(phi, univariate, rtol=0, atol=1e-10)


def test_kernel_with_a_budget_fills_it_and_is_paired_kernelshap_on_the_same_draws():
    """budget= counts distinct evaluations: both draw pairs until that many are distinct."""
    from captum_graphshap import PairedKernelShap

    model = mlp(7, dtype=torch.float64, seed=6)
    x = torch.randn(3, 7, dtype=torch.float64)
    _, phi, evaluations = BivariateShapley(model).attribute(
        x,
        target=1,
        estimator="kernel",
        budget=60,
        generator=torch.Generator().manual_seed(4),
        return_shapley=True,
        return_evaluations=True,
    )
    assert torch.equal(evaluations, torch.full((3,), 60))
    univariate = PairedKernelShap(model).attribute(
        x, target=1, budget=60, generator=torch.Generator().manual_seed(4), estimator="kernel"
    )
    torch.testing.assert_close(phi, univariate, rtol=0, atol=1e-10)


def test_rows_are_deduplicated_and_counted():
    model = CountingModel(mlp(6, dtype=torch.float64))
    x = torch.randn(3, 6, dtype=torch.float64)
    explainer = BivariateShapley(model)
    explainer.attribute(x, target=0, estimator="kernel", n_samples=200, generator=torch.Generator())
    # at most the 62 interior coalitions + 2 endpoints, each once, for 3 examples
    assert model.rows <= 64 * 3
    model.rows = 0
    explainer.attribute(
        x, target=0, estimator="permutation", n_samples=3, generator=torch.Generator()
    )
    assert model.rows <= (2 + 3 * 5) * 3
    model.rows = 0
    explainer.attribute(x, target=0)
    assert model.rows == 2**6 * 3


@pytest.mark.parametrize("method", ["permutation", "kernel"])
def test_generator_makes_results_reproducible(method):
    model = mlp(8, dtype=torch.float64, seed=4)
    x = torch.randn(2, 8, dtype=torch.float64)
    explainer = BivariateShapley(model)

    def run(seed):
        return explainer.attribute(
            x,
            target=2,
            estimator=method,
            n_samples=40,
            generator=torch.Generator().manual_seed(seed),
        )

    first, again, other = run(0), run(0), run(1)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_single_feature():
    model = mlp(3, dtype=torch.float64)
    x = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.zeros(1, 3, dtype=torch.long)
    gain = model(x)[:, 0] - model(torch.zeros(1, 3, dtype=torch.float64))[0, 0]
    for method in ["exact", "permutation", "kernel"]:
        matrix, phi = BivariateShapley(model).attribute(
            x, target=0, feature_mask=mask, estimator=method, return_shapley=True
        )
        assert torch.equal(matrix, torch.zeros(2, 1, 1, dtype=torch.float64)), method
        torch.testing.assert_close(phi[:, 0], gain.detach(), rtol=0, atol=1e-12)


# ------------------------------------------------------------------ graph-local


@pytest.mark.parametrize(
    "graph, k", [(LineGraph(6), 1), (LineGraph(6), 2), (GridGraph(2, 3), 1)], ids=str
)
def test_graph_local_matches_its_definition(graph, k):
    model = mlp(6, dtype=torch.float64, seed=9)
    x = torch.randn(2, 6, dtype=torch.float64)
    counting = CountingModel(model)
    got, phi = BivariateShapley(counting).attribute(
        x, target=2, graph=graph, k=k, return_shapley=True
    )
    support = local_support(graph, k)
    assert bool((got[:, ~support] == 0).all())
    for n in range(2):
        v = model_game(model, x[n], torch.zeros(6, dtype=torch.float64), torch.arange(6), 2)
        torch.testing.assert_close(got[n], brute_local(v, graph, k), rtol=0, atol=1e-10)
    # linear cost: at most 2^|N_k(i)| rows per feature, shared by the batch
    bound = sum(2 ** len(graph.neighbourhood(i, k)) for i in range(6))
    assert counting.rows <= bound * 2
    # its univariate output is L-Shapley from the same rows
    l_shapley = LShapley(model).attribute(x, target=2, graph=graph, k=k)
    torch.testing.assert_close(phi, l_shapley, rtol=0, atol=1e-12)


def test_graph_local_at_the_diameter_is_the_exact_matrix():
    model = mlp(5, dtype=torch.float64, seed=1)
    x = torch.randn(2, 5, dtype=torch.float64)
    local = BivariateShapley(model).attribute(x, target=0, graph=LineGraph(5), k=4)
    exact = BivariateShapley(model).attribute(x, target=0)
    torch.testing.assert_close(local, exact, rtol=0, atol=1e-12)


def test_graph_local_infers_the_grid_and_takes_one_graph_per_example():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 2 * 3, 2)).double()
    images = torch.randn(2, 2, 2, 3, dtype=torch.float64)  # (N, C, H, W): pixels grouped
    auto = BivariateShapley(model).attribute(images, target=1, graph="auto", k=1)
    explicit = BivariateShapley(model).attribute(images, target=1, graph=GridGraph(2, 3), k=1)
    torch.testing.assert_close(auto, explicit, rtol=0, atol=0)
    # per-example graphs: the second example's mask uses 3 features on a line
    tokens = torch.randn(2, 4, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 2]])
    net = mlp(4, dtype=torch.float64, seed=5)
    got = BivariateShapley(net).attribute(
        tokens, target=0, feature_mask=mask, graph=[LineGraph(4), LineGraph(3)], k=1
    )
    assert got.shape == (2, 4, 4)
    for n, graph in enumerate([LineGraph(4), LineGraph(3)]):
        v = model_game(net, tokens[n], torch.zeros(4, dtype=torch.float64), mask[n], 0)
        want = brute_local(v, graph, 1)
        own = graph.num_nodes
        torch.testing.assert_close(got[n, :own, :own], want, rtol=0, atol=1e-10)
        assert bool((got[n, own:] == 0).all()) and bool((got[n, :, own:] == 0).all())


# -------------------------------------------------------------------- bad input

X = torch.randn(2, 5)


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        (dict(estimator="shapley"), ValueError, "estimator must be one of"),
        (dict(estimator="kernel", n_samples=9), ValueError, "at least 2 d = 10"),
        (dict(estimator="permutation", n_samples=0), ValueError, "n_samples must be >= 1"),
        (dict(estimator="permutation", n_samples=2.5), TypeError, "n_samples"),
        (dict(estimator="kernel", n_samples=True), TypeError, "n_samples"),
        (dict(n_samples=10), ValueError, "not used by estimator='exact'"),
        (dict(generator=0), TypeError, "generator"),
        (dict(graph=LineGraph(5), estimator="kernel"), ValueError, "estimator='exact'"),
        (dict(graph=LineGraph(5), k=-1), ValueError, "k must be >= 0"),
        (dict(graph=LineGraph(4)), ValueError, "graph has 4 nodes"),
        (dict(graph="line"), TypeError, "graph must be"),
        (dict(estimator="permutation", n_samples=2**19), ValueError, "coalitions per example"),
    ],
    ids=str,
)
def test_bad_input_is_refused_before_any_model_call(kwargs, error, fragment):
    model = CountingModel(lambda x: x.sum(dim=1, keepdim=True).repeat(1, 3))
    with pytest.raises(error, match=fragment):
        BivariateShapley(model).attribute(X, **kwargs)
    assert model.calls == 0


def test_exact_refuses_too_many_features_with_the_count():
    model = CountingModel(lambda x: x.sum(dim=1, keepdim=True))
    with pytest.raises(ValueError, match=r"2,097,152 coalitions"):
        BivariateShapley(model).attribute(torch.randn(1, 21))
    with pytest.raises(ValueError, match="BivariateShapley with graph and k=3 would evaluate"):
        BivariateShapley(model).attribute(torch.randn(1, 6, 6), graph="auto", k=3)
    assert model.calls == 0
