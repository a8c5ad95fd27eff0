"""OwenValue: the Winter value against brute force over hierarchy-consistent orderings.

Every test compares with an independent formula: orderings enumerated one by
one, the Owen formula written out, ExactShapley, SHAP's PartitionExplainer,
the Shapley value of the quotient game, or an axiom (efficiency, symmetry).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from captum_graphshap import ExactShapley, GridGraph, Hierarchy, LineGraph, OwenValue
from captum_graphshap.plans.owen import winter_coalition_count, winter_value_plan
from captum_graphshap.plans.owen_budgeted import budgeted_winter_values
from tests.reference import TableGame, brute_shapley, mlp, model_game


def consistent_orderings(nested):
    """Every ordering in which each node's members come together, each once."""
    if not isinstance(nested, list):
        yield (nested,)
        return
    for perm in itertools.permutations(nested):
        for parts in itertools.product(*(list(consistent_orderings(c)) for c in perm)):
            yield tuple(i for part in parts for i in part)


def brute_winter(nested, v, d):
    phi, count = [0.0] * d, 0
    for order in consistent_orderings(nested):
        count += 1
        present: frozenset[int] = frozenset()
        for i in order:
            phi[i] += v(present | {i}) - v(present)
            present = present | {i}
    return [p / count for p in phi]


def random_nested(draw_ids, rng):
    """A random tree over ``draw_ids`` (a list), nodes of 2-3 children or leaves."""
    if len(draw_ids) == 1:
        return draw_ids[0]
    parts = int(rng.integers(2, min(3, len(draw_ids)) + 1))
    cuts = sorted(rng.choice(np.arange(1, len(draw_ids)), parts - 1, replace=False).tolist())
    bounds = [0, *cuts, len(draw_ids)]
    return [random_nested(draw_ids[a:b], rng) for a, b in itertools.pairwise(bounds)]


def table_game(d, seed):
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(2**d, generator=generator, dtype=torch.float64)
    return TableGame(table)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(d=st.integers(1, 7), seed=st.integers(0, 10**6))
def test_exact_equals_brute_force_over_consistent_orderings(d, seed):
    rng = np.random.default_rng(seed)
    nested = random_nested(rng.permutation(d).tolist(), rng)
    game = table_game(d, seed)
    x = torch.ones(1, d, dtype=torch.float64)
    expected = torch.tensor(brute_winter(nested, game.value, d), dtype=torch.float64)
    phi = OwenValue(game).attribute(x, baselines=0.0, hierarchy=nested)
    torch.testing.assert_close(phi[0], expected, atol=1e-9, rtol=0)
    # the budgeted walk, given every evaluation it needs (per-example hierarchies), is exact too
    walked = OwenValue(game).attribute(
        x.repeat(2, 1), baselines=0.0, hierarchy=[Hierarchy.from_nested(nested, d)] * 2
    )
    torch.testing.assert_close(walked, expected.expand(2, d), atol=1e-9, rtol=0)


def test_exact_plan_counts_and_distinct_coalitions():
    # the counts the issue states for balanced binary trees
    assert [winter_coalition_count(Hierarchy.balanced(d)) for d in (16, 32, 64)] == [172, 684, 2732]
    plan = winter_value_plan(Hierarchy.from_nested([[0, 1, 2], [[3, 4], [5, 6]]]))
    rows = plan.coalitions.dense()
    assert len({tuple(r.tolist()) for r in rows}) == len(plan) == 36
    assert winter_coalition_count(Hierarchy.flat(10)) == 2**10


def test_flat_hierarchy_is_exact_shapley():
    model = mlp(7, dtype=torch.float64)
    x = torch.randn(4, 7, dtype=torch.float64)
    owen = OwenValue(model).attribute(x, target=2, hierarchy=list(range(7)))
    torch.testing.assert_close(owen, ExactShapley(model).attribute(x, target=2), atol=1e-12, rtol=0)


def owen_formula(unions, v, d):
    """Owen (1977): phi_i = sum_Q sum_R |Q|!(m-|Q|-1)!/m! |R|!(c-|R|-1)!/c! (v(Q+R+i) - v(Q+R))."""
    m = len(unions)
    phi = [0.0] * d
    for j, union in enumerate(unions):
        others = [u for k, u in enumerate(unions) if k != j]
        for i in union:
            rest = [f for f in union if f != i]
            c = len(union)
            for q in range(m):
                for chosen in itertools.combinations(others, q):
                    outside = frozenset(f for u in chosen for f in u)
                    wq = math.factorial(q) * math.factorial(m - q - 1) / math.factorial(m)
                    for r in range(c):
                        for inner in itertools.combinations(rest, r):
                            wr = math.factorial(r) * math.factorial(c - r - 1) / math.factorial(c)
                            s = outside | frozenset(inner)
                            phi[i] += wq * wr * (v(s | {i}) - v(s))
    return phi


def test_one_level_is_the_owen_formula():
    unions = [[0, 3], [1, 2, 5], [4, 6, 7]]
    game = table_game(8, 3)
    x = torch.ones(1, 8, dtype=torch.float64)
    phi = OwenValue(game).attribute(x, baselines=0.0, hierarchy=unions)
    expected = torch.tensor(owen_formula(unions, game.value, 8), dtype=torch.float64)
    torch.testing.assert_close(phi[0], expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("leftover", ["profile", "equal"])
@pytest.mark.parametrize("budget", [None, 2, 7, 40, 500])
def test_efficiency_exact_and_budgeted(budget, leftover):
    model = mlp(12, dtype=torch.float64)
    x = torch.randn(3, 12, dtype=torch.float64)
    result = OwenValue(model).attribute(
        x,
        target=0,
        hierarchy=LineGraph(12).hierarchy(),
        budget=budget,
        leftover=leftover,
        return_evaluations=True,
    )
    gap = model(x)[:, 0] - model(torch.zeros_like(x))[:, 0]
    torch.testing.assert_close(result.attributions.sum(1), gap.detach(), atol=1e-10, rtol=0)
    assert torch.isfinite(result.attributions).all()
    if budget is not None:
        # a binary tree's splits cost 2 each: the walk spends all but an odd one
        assert (result.n_evaluations <= budget).all()
        assert (result.n_evaluations >= min(budget, 108) - 1).all()  # 108: the exact count


def test_budget_at_the_exact_count_is_exact_and_smaller_budgets_stay_within():
    h = Hierarchy.balanced(10)
    count = winter_coalition_count(h)
    model = mlp(10, dtype=torch.float64)
    x = torch.randn(2, 10, dtype=torch.float64)
    exact = OwenValue(model).attribute(x, target=1, hierarchy=h)
    walked = OwenValue(model).attribute(x, target=1, hierarchy=[h, h], budget=count)
    torch.testing.assert_close(walked, exact, atol=1e-12, rtol=0)
    for budget in (3, count // 2, count - 1):
        result = OwenValue(model).attribute(
            x, target=1, hierarchy=h, budget=budget, return_evaluations=True
        )
        assert (result.n_evaluations <= budget).all()


def test_symmetry_within_a_node():
    # features 1 and 2 enter the model only through their sum: symmetric players
    def model(x):
        return torch.tanh(x[:, 1] + x[:, 2]) * x[:, 0] + x[:, 3] ** 2 + x[:, 0] * x[:, 3]

    x = torch.tensor([[0.7, 1.3, 1.3, -0.4]], dtype=torch.float64)
    phi = OwenValue(model).attribute(x, hierarchy=[[0, [1, 2]], 3])
    torch.testing.assert_close(phi[0, 1], phi[0, 2], atol=1e-12, rtol=0)


def test_quotient_game_property():
    nested = [[0, [1, 2]], [3, 4], [5, [6, 7]]]
    game = table_game(8, 11)
    x = torch.ones(1, 8, dtype=torch.float64)
    phi = OwenValue(game).attribute(x, baselines=0.0, hierarchy=nested)[0]
    unions = [[0, 1, 2], [3, 4], [5, 6, 7]]

    def quotient(s):
        return game.value([f for j in s for f in unions[j]])

    shapley = brute_shapley(lambda s: quotient(sorted(s)), 3)
    for union, value in zip(unions, shapley):
        assert abs(float(phi[union].sum()) - value) < 1e-12
    # one level down: node [6, 7] in the game of its sibling 5, within every context of its union
    node = Hierarchy.from_nested(nested)
    assert node.nodes[node.children[node.children[0][2]][1]] == (6, 7)


def test_batch_invariance():
    model = mlp(9, dtype=torch.float64)
    x = torch.randn(5, 9, dtype=torch.float64)
    h = Hierarchy.from_nested([[0, 1, 2], [[3, 4], [5, 6]], [7, 8]])
    together = OwenValue(model).attribute(x, target=1, hierarchy=h)
    alone = torch.cat(
        [OwenValue(model).attribute(x[i : i + 1], target=1, hierarchy=h) for i in range(5)]
    )
    torch.testing.assert_close(together, alone, atol=1e-12, rtol=0)

    # the budgeted walk samples orderings: from one seed, an example's draws do not
    # depend on the batch it is in (they are keyed by node and context, not position)
    def budgeted(inputs):
        generator = torch.Generator().manual_seed(3)
        return OwenValue(model).attribute(
            inputs, target=1, hierarchy=h, budget=20, generator=generator
        )

    alone = torch.cat([budgeted(x[i : i + 1]) for i in range(5)])
    torch.testing.assert_close(budgeted(x), alone, atol=1e-12, rtol=0)


def test_integer_token_inputs():
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(20, 4).double()
    head = torch.nn.Linear(4 * 6, 2).double()

    def model(ids):
        return head(torch.tanh(embedding(ids)).flatten(1))

    ids = torch.tensor([[3, 7, 1, 9, 4, 12]])
    nested = [[0, 1], [[2, 3], [4, 5]]]
    phi = OwenValue(model).attribute(ids, baselines=0, target=1, hierarchy=nested)
    v = model_game(model, ids[0], torch.zeros(6, dtype=torch.long), torch.arange(6), target=1)
    expected = torch.tensor(brute_winter(nested, v, 6), dtype=phi.dtype)
    torch.testing.assert_close(phi[0], expected, atol=1e-6, rtol=0)


def test_feature_mask_groups_and_default_hierarchies():
    model = mlp(8, dtype=torch.float64)
    x = torch.randn(2, 8, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1, 2, 2, 3, 3]])
    phi = OwenValue(model).attribute(x, target=0, feature_mask=mask, hierarchy=[[0, 1], [2, 3]])
    v = model_game(model, x[0], torch.zeros(8, dtype=torch.float64), mask[0], target=0)
    per_feature = brute_winter([[0, 1], [2, 3]], v, 4)
    torch.testing.assert_close(
        phi[0], torch.tensor(per_feature, dtype=torch.float64)[mask[0]], atol=1e-12, rtol=0
    )
    # without hierarchy: a sequence gets LineGraph(L).hierarchy(), an image its grid's
    torch.testing.assert_close(
        OwenValue(model).attribute(x, target=0),
        OwenValue(model).attribute(x, target=0, hierarchy=LineGraph(8).hierarchy()),
    )
    image = torch.randn(1, 2, 4, 4, dtype=torch.float64)

    def conv(z):
        return (z[:, 0] * z[:, 1]).flatten(1).cumsum(1)[:, -3:]

    torch.testing.assert_close(
        OwenValue(conv).attribute(image, target=1),
        OwenValue(conv).attribute(image, target=1, hierarchy=GridGraph(4, 4).hierarchy()),
    )


def test_equals_shap_partition_explainer_on_the_same_tree():
    shap = pytest.importorskip("shap")
    from scipy.cluster.hierarchy import linkage

    rng = np.random.default_rng(0)
    d = 9
    z = linkage(rng.normal(size=(20, d)).T, method="average")
    torch.manual_seed(1)
    net = mlp(d, out_features=1, dtype=torch.float64)

    def predict(array):
        with torch.no_grad():
            return net(torch.as_tensor(array, dtype=torch.float64))[:, 0].numpy()

    x = rng.normal(size=(3, d))
    baseline = rng.normal(size=(1, d))
    masker = shap.maskers.Partition(baseline, clustering=z)
    explainer = shap.PartitionExplainer(predict, masker)
    count = winter_coalition_count(Hierarchy.from_linkage(z))
    theirs = explainer(x, max_evals=4 * count, silent=True).values
    ours = OwenValue(net).attribute(
        torch.as_tensor(x),
        baselines=torch.as_tensor(baseline),
        target=0,
        hierarchy=Hierarchy.from_linkage(z),
        return_evaluations=True,
    )
    np.testing.assert_allclose(ours.attributions.numpy(), theirs, rtol=1e-6, atol=1e-12)
    # and SHAP's walk, complete, evaluates the same distinct coalitions
    assert int(ours.n_evaluations[0]) == count


class _Refuses(torch.nn.Module):
    def forward(self, x):
        raise AssertionError("the model must not be called")


@pytest.mark.parametrize(
    ("hierarchy", "words"),
    [
        ([[0, 1], [2]], ["misses", "[3]"]),
        ([[0, 1], [1, 2, 3]], ["repeats", "[1]"]),
        ([[0, 1], [2, 3, 7]], ["do not exist", "[7]"]),
        ([[0, 1], [], [2, 3]], ["empty node"]),
        ([[0, -1], [2, 3]], ["negative", "[-1]"]),
    ],
)
def test_bad_hierarchy_refused_before_any_model_call(hierarchy, words):
    with pytest.raises(ValueError, match="hierarchy") as error:
        OwenValue(_Refuses()).attribute(torch.ones(2, 4), hierarchy=hierarchy)
    for word in words:
        assert word in str(error.value)


def test_a_list_of_nested_trees_is_one_per_example():
    model = mlp(4, dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64)
    trees = [[[0, 1], [2, 3]], [[0, 2], [1, 3]]]
    together = OwenValue(model).attribute(x, target=0, hierarchy=trees)
    for n, tree in enumerate(trees):
        alone = OwenValue(model).attribute(x[n : n + 1], target=0, hierarchy=tree)
        torch.testing.assert_close(together[n : n + 1], alone, atol=1e-12, rtol=0)


def test_bad_per_example_hierarchy_and_type_errors():
    with pytest.raises(ValueError, match=r"hierarchy\[1\] misses"):
        OwenValue(_Refuses()).attribute(
            torch.ones(2, 4), hierarchy=[Hierarchy.balanced(4), Hierarchy.balanced(3)]
        )
    with pytest.raises(ValueError, match="3 hierarchies but inputs has 2"):
        OwenValue(_Refuses()).attribute(torch.ones(2, 4), hierarchy=[Hierarchy.balanced(4)] * 3)
    with pytest.raises(TypeError, match="hierarchy leaves must be int"):
        OwenValue(_Refuses()).attribute(torch.ones(1, 2), hierarchy=[0, 1.0])


def test_too_deep_and_too_large_refused_with_counts():
    chain: object = 0
    for i in range(1, 600):
        chain = [chain, i]
    with pytest.raises(ValueError, match=r"hierarchy is 599 levels deep; at most MAX_DEPTH = 512"):
        Hierarchy.from_nested(chain)
    with pytest.raises(ValueError, match=r"2,097,152 coalitions") as error:
        OwenValue(_Refuses()).attribute(torch.ones(1, 21), hierarchy=list(range(21)))
    assert "budget=" in str(error.value)


def test_a_costly_node_does_not_stall_the_walk():
    # the root's first child has 3 children (6 evaluations to split), the second 2
    h = Hierarchy.from_nested([[0, 1, 2], [3, [4, 5]]])
    game = table_game(6, 2)
    x = torch.ones(2, 6, dtype=torch.float64)
    refs = torch.zeros(1, 6, dtype=torch.float64)
    result = OwenValue(game).attribute(
        x, hierarchy=h, references=refs, budget=8, return_evaluations=True
    )
    assert result.n_evaluations.tolist() == [8, 8]


@pytest.mark.parametrize("budget", [0, 1, -3])
def test_budget_below_two_refused(budget):
    with pytest.raises(ValueError, match="leftover must be one of"):
        OwenValue(_Refuses()).attribute(torch.ones(1, 4), leftover="uniform")
    with pytest.raises(ValueError, match="budget must be >= 2"):
        OwenValue(_Refuses()).attribute(torch.ones(1, 4), budget=budget)
    with pytest.raises(TypeError, match="budget must be an int"):
        OwenValue(_Refuses()).attribute(torch.ones(1, 4), budget=2.5)


def test_budgeted_walk_on_a_synthetic_game_is_efficient_and_counts_evaluations():
    h = Hierarchy.from_nested([[0, [1, 2, 3]], [[4, 5], 6], [7, [8, 9]]])
    game = table_game(10, 5)

    def evaluate(example_index, coalitions):
        rows = coalitions.take(torch.arange(len(coalitions)))
        codes = (rows.long() * (2 ** torch.arange(10))).sum(1)
        return game.table[codes][:, None]

    for budget in (2, 5, 9, 30, 10**6):
        for leftover in ("profile", "equal"):
            phi, spent, _ = budgeted_winter_values(
                evaluate, [h], budget, torch.device("cpu"), leftover=leftover
            )
            assert int(spent[0]) <= budget
            total = float(game.table[-1] - game.table[0])
            assert abs(float(phi.sum()) - total) < 1e-10
    expected = brute_winter(h.to_nested(), game.value, 10)
    torch.testing.assert_close(
        phi[0, :, 0], torch.tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0
    )


def test_budgeted_walk_shares_one_walk_between_outputs():
    """Two outputs (two games) walk together: the budget bounds both at once, each
    output is efficient, and run to the end each is its own game's Winter value."""
    h = Hierarchy.from_nested([[0, [1, 2, 3]], [[4, 5], 6], [7, [8, 9]]])
    games = [table_game(10, 5), table_game(10, 6)]
    calls = []

    def evaluate(example_index, coalitions):
        rows = coalitions.take(torch.arange(len(coalitions)))
        calls.append(rows.shape[0])
        codes = (rows.long() * (2 ** torch.arange(10))).sum(1)
        return torch.stack([g.table[codes] for g in games], dim=1)

    for budget in (2, 9, 30, 10**6):
        calls.clear()
        phi, spent, _ = budgeted_winter_values(evaluate, [h], budget, torch.device("cpu"))
        assert phi.shape == (1, 10, 2)
        assert sum(calls) == int(spent[0]) <= budget
        for output, g in enumerate(games):
            total = float(g.table[-1] - g.table[0])
            assert abs(float(phi[0, :, output].sum()) - total) < 1e-10
    for output, g in enumerate(games):
        expected = brute_winter(h.to_nested(), g.value, 10)
        torch.testing.assert_close(
            phi[0, :, output], torch.tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0
        )


def test_budget_holds_for_a_multi_output_model_without_target():
    """Without target every output of the model is explained from one budgeted walk:
    no more model rows per example than the budget, each output efficient."""
    calls = []

    def model(x):
        calls.append(x.shape[0])
        return torch.stack([x[:, 0] * x[:, 1] + x[:, 2], x.sum(1), x[:, 3] * x[:, 5]], 1)

    x = torch.randn(2, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    hierarchy = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    for budget in (6, 10, 20):
        calls.clear()
        phi = OwenValue(model).attribute(x, target=None, hierarchy=hierarchy, budget=budget)
        assert phi.shape == (2, 3, 8)
        assert sum(calls) <= 2 * budget
        full, empty = model(x), model(torch.zeros_like(x))
        torch.testing.assert_close(phi.sum(-1), full - empty)
    # exact (no budget): every output equals its target's Winter value
    exact = OwenValue(model).attribute(x, target=None, hierarchy=hierarchy)
    for output in range(3):
        torch.testing.assert_close(
            exact[:, output], OwenValue(model).attribute(x, target=output, hierarchy=hierarchy)
        )


def test_inside_noise_tunnel_and_dataloader_attribution():
    from captum.attr import NoiseTunnel
    from torch.utils.data import DataLoader, TensorDataset

    from captum_graphshap.wrappers import DataLoaderAttribution

    net = mlp(5, dtype=torch.float64)
    x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    owen = NoiseTunnel(OwenValue(net)).attribute(
        x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=1, hierarchy=list(range(5))
    )
    torch.manual_seed(1)
    shapley = NoiseTunnel(ExactShapley(net)).attribute(
        x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=1
    )
    torch.testing.assert_close(owen, shapley, atol=1e-12, rtol=0)
    # two features: every hierarchy is flat, so the Winter value is the Shapley value
    pair = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    data = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)

    def reduce(acc, out, _):
        return out.sum() if acc is None else acc + out.sum()

    ours = DataLoaderAttribution(OwenValue(pair)).attribute(data, reduce=reduce)
    exact = DataLoaderAttribution(ExactShapley(pair)).attribute(data, reduce=reduce)
    torch.testing.assert_close(ours[0], exact[0])


def test_inside_llm_attribution_and_llm_shapley():
    from .optional_deps import optional

    optional("transformers")
    from captum.attr import LLMAttribution, TextTokenInput

    from captum_graphshap.apps import toy_task
    from captum_graphshap.llm import LLMShapley, prompt_hierarchy

    model, tokenizer = toy_task.trained_model(steps=5), toy_task.LetterTokenizer()
    inp = TextTokenInput("c f # h a d", tokenizer)
    h = prompt_hierarchy(inp)
    flat = Hierarchy.flat(inp.n_itp_features)
    ours = LLMShapley(OwenValue(model), tokenizer).attribute(inp, target="h", hierarchy=flat)
    exact = LLMShapley(ExactShapley(model), tokenizer).attribute(inp, target="h")
    torch.testing.assert_close(ours.seq_attr, exact.seq_attr, atol=1e-5, rtol=1e-5)
    batched = LLMShapley(OwenValue(model), tokenizer).attribute(
        inp, target="h", hierarchy=h, forward_in_tokens=False
    )
    captum = LLMAttribution(OwenValue(model), tokenizer).attribute(
        inp, target="h", hierarchy=h, forward_in_tokens=False
    )
    torch.testing.assert_close(batched.seq_attr, captum.seq_attr, atol=1e-5, rtol=1e-5)
    assert batched.seq_attr.shape == (inp.n_itp_features,)


def test_llm_shapley_with_a_budget_spends_it_once_for_every_answer_token():
    """A several-token answer is several outputs (one per token, and the sequence):
    they share one budgeted walk, so the model sees no more prompt rows than the
    budget, and each token's row of attributions adds up to its log-probability's
    change."""
    import functools

    from .optional_deps import optional

    optional("transformers")
    from captum.attr import TextTokenInput

    from captum_graphshap.apps import toy_task
    from captum_graphshap.llm import LLMShapley

    model, tokenizer = toy_task.trained_model(steps=5), toy_task.LetterTokenizer()
    inp = TextTokenInput("c f # h a d b e", tokenizer)
    rows, forward = [], model.forward

    @functools.wraps(forward)
    def counted(*args, **kwargs):
        rows.append(kwargs.get("input_ids", args[0] if args else None).shape[0])
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    explainer = LLMShapley(OwenValue(model), tokenizer)
    out = explainer.attribute(inp, target="h a", budget=12, forward_in_tokens=False)
    model.forward = forward  # type: ignore[method-assign]
    assert sum(rows) <= 12
    assert out.token_attr.shape == (2, inp.n_itp_features)
    torch.testing.assert_close(out.token_attr.sum(0), out.seq_attr, atol=1e-5, rtol=0)


def test_profile_leftover_follows_the_splits_it_saw():
    # an additive game: a feature's gain is the same in every context, so a node's
    # children's gains where it was split predict its unsplit contexts
    weights = torch.tensor([3.0, -1.0, 0.5, 2.0, -2.5, 1.0, 0.25, 4.0], dtype=torch.float64)

    def model(x):
        return (x * weights).sum(1, keepdim=True)

    x = torch.ones(1, 8, dtype=torch.float64)
    h = Hierarchy.balanced(8)
    errors = {}
    for leftover in ("profile", "equal"):
        errors[leftover] = [
            float(
                (
                    OwenValue(model).attribute(
                        x, target=0, hierarchy=h, budget=b, leftover=leftover
                    )
                    - weights
                )
                .abs()
                .sum()
            )
            for b in (6, 14, 20, 30, 44)
        ]
    # equal until a node is split in two contexts, then strictly closer; both exact at 44
    assert all(p <= e + 1e-12 for p, e in zip(errors["profile"], errors["equal"]))
    assert errors["profile"][2] < errors["equal"][2] and errors["profile"][3] < errors["equal"][3]
    assert errors["profile"][-1] < 1e-12 and errors["equal"][-1] < 1e-12
