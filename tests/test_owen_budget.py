"""The budgeted Owen walk on uneven trees: each defect found on 7e30b8d, as a test.

There the walk stopped as soon as its most valuable node cost more than the
round could pay, and returned group means: ``[[0, 1], [2..7]]`` at 131
evaluations (the exact count is 132) spent 4. A node too costly to split is
now estimated by sampled orderings of its children, within its share.
"""

from __future__ import annotations

import pytest
import torch

from captum_graphshap import Hierarchy, OwenValue
from captum_graphshap.attr.owen_report import OwenReport
from captum_graphshap.plans.owen import winter_coalition_count

WEIGHTS = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0])


def additive(z: torch.Tensor) -> torch.Tensor:
    """``sum_i w_i z_i``: every feature's value is its own term, whatever the tree."""
    return (z * WEIGHTS[: z.shape[1]].to(z.dtype)).sum(1, keepdim=True)


def tanh_mlp(d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(d, 16, generator=g, dtype=torch.float64)
    out = torch.randn(16, 1, generator=g, dtype=torch.float64)
    return lambda z: torch.tanh(z @ hidden) @ out


def attribute(model, x, hierarchy, budget, seed=0, **options):
    return OwenValue(model).attribute(
        x,
        target=0,
        hierarchy=hierarchy,
        budget=budget,
        generator=torch.Generator().manual_seed(seed),
        return_evaluations=True,
        **options,
    )


def test_the_issues_uneven_tree_spends_its_budget_and_finds_the_additive_values():
    h = Hierarchy.from_nested([[0, 1], [2, 3, 4, 5, 6, 7]])
    assert winter_coalition_count(h) == 132
    x = torch.ones(1, 8, dtype=torch.float64)
    result = attribute(additive, x, h, budget=131)
    assert 0.8 * 131 <= int(result.n_evaluations[0]) <= 131  # was 4
    torch.testing.assert_close(result.attributions[0], WEIGHTS[:8].double(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("budget", [20, 100, 500, 1000])
def test_a_pair_beside_a_group_of_ten_spends_the_budget(budget):
    h = Hierarchy.from_nested([[0, 1], list(range(2, 12))])  # exact: 2,054 coalitions
    x = torch.ones(1, 12, dtype=torch.float64)
    result = attribute(additive, x, h, budget)
    assert 0.8 * budget <= int(result.n_evaluations[0]) <= budget  # 8 at every budget before
    if budget >= 100:  # orderings of the ten: each feature its own weight
        torch.testing.assert_close(result.attributions[0], WEIGHTS.double(), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    ("nested", "d", "budget", "seed"),
    [
        ([[3, 2, [5, 0]], [4, 1]], 6, 18, 273),  # spent 14 before
        ([1, 3, [4, 0], 2], 5, 24, 286),  # 19
        ([[6, [5, 1], 0], [3, 4, 2]], 7, 22, 384),  # 17
    ],
)
def test_what_a_sampled_item_keeps_for_inner_children_is_spent(nested, d, budget, seed):
    # found by tests/test_fuzz.py's walk property on fresh draws: the items kept part of
    # their share for children that only whole orderings produce, and no item was left
    # to take the rest; the walk rounds those up to whole orderings now
    hierarchy = Hierarchy.from_nested(nested, d)
    weights = torch.randn(d, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = torch.randn(1, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    result = OwenValue(lambda z: z @ weights).attribute(
        x,
        target=1,
        hierarchy=hierarchy,
        budget=budget,
        return_evaluations=True,
        generator=torch.Generator().manual_seed(seed),
    )
    assert int(result.n_evaluations[0]) == budget
    # linear: every tree's Winter value is each feature's own term
    expected = x[0] * weights[:, 1]
    torch.testing.assert_close(result.attributions[0], expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize(("d", "budget"), [(8, 51), (30, 100)])
def test_a_flat_node_too_costly_to_enumerate_is_sampled_not_shared_equally(d, budget):
    weights = torch.linspace(-1.0, 2.0, d, dtype=torch.float64)
    x = torch.ones(2, d, dtype=torch.float64)
    f = tanh_mlp(d, seed=d)
    result = attribute(f, x, list(range(d)), budget)
    assert (result.n_evaluations >= 0.8 * budget).all()  # 2 before: equal shares
    assert result.attributions[0].std() > 1e-3  # not equal shares
    linear = attribute(lambda z: (z * weights).sum(1, keepdim=True), x, list(range(d)), budget)
    torch.testing.assert_close(linear.attributions, weights.expand(2, d), atol=1e-12, rtol=0)


def test_more_budget_moves_toward_the_exact_value():
    h = Hierarchy.from_nested([[0, [1, 2, 3]], [4, 5, 6, 7, 8, 9], 10])
    f = tanh_mlp(11, seed=3)
    x = torch.randn(4, 11, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = OwenValue(f).attribute(x, target=0, hierarchy=h)
    count = winter_coalition_count(h)
    errors = []
    for budget in (count // 8, count // 3, count - 1, count):
        runs = [attribute(f, x, h, budget, seed).attributions for seed in range(6)]
        errors.append(float(torch.stack([(r - exact).norm() for r in runs]).mean()))
    assert errors[0] > errors[1] > errors[2] > errors[3]
    assert errors[3] < 1e-12 and errors[2] < 0.2 * errors[0]


def test_per_example_hierarchies_without_a_budget_are_exact():
    # a case of 7e30b8d's that differed by 1.39 from the examples run alone
    trees = [
        [[5, 2, 0, 3, 7, 1], 4, 6],
        [[5, 3, 7, 2, 0], 6, [1, 4]],
        [4, [5, 6], 7, 2, 1, 3, 0],
    ]
    f = tanh_mlp(8, seed=5)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    together = OwenValue(f).attribute(x, target=0, hierarchy=trees)
    for i, tree in enumerate(trees):
        alone = OwenValue(f).attribute(x[i : i + 1], target=0, hierarchy=tree)
        torch.testing.assert_close(together[i : i + 1], alone, atol=1e-12, rtol=0)


def test_llm_shapley_with_an_uneven_tree_does_not_return_one_value_for_a_group():
    pytest.importorskip("transformers")
    from captum.attr import TextTokenInput

    from captum_graphshap.apps import toy_task
    from captum_graphshap.llm import LLMShapley

    from .tiny_lms import tiny_llama

    tokenizer = toy_task.LetterTokenizer()
    inp = TextTokenInput("c # h a d c # h a d c #", tokenizer)  # 12 tokens
    explainer = LLMShapley(OwenValue(tiny_llama()), tokenizer)
    tree = [[0, 1], list(range(2, 12))]
    result = explainer.attribute(
        inp, target="h", hierarchy=tree, budget=500, generator=torch.Generator().manual_seed(0)
    )
    group = result.seq_attr[2:]
    assert group.unique().numel() == 10  # one value for all ten before
    torch.testing.assert_close(result.seq_attr.sum(), result.token_attr.sum(), atol=1e-5, rtol=0)


def test_the_report_says_what_was_enumerated_and_what_estimated():
    h = Hierarchy.from_nested([[0, 1], list(range(2, 12))])
    x = torch.ones(2, 12, dtype=torch.float64)
    exact = OwenValue(additive).attribute(x, target=0, hierarchy=h, return_report=True)
    assert isinstance(exact.report, OwenReport) and exact.report.exact.all()
    assert set(exact.report.node_status().values()) == {"enumerated"}
    assert exact.report.enumerated[0].tolist()[:2] == [1, 2]  # the root once, (0, 1) twice
    budgeted = attribute(additive, x, h, budget=100, return_report=True)
    report = budgeted.report
    assert not report.exact.any()
    status = report.node_status(1)
    assert status[tuple(range(2, 12))] == "sampled"
    assert tuple(range(2, 12)) in report.estimated_nodes(1)
    assert bool(report.estimated[1, h.nodes.index(tuple(range(2, 12)))])
    assert int(report.orderings[1, h.nodes.index(tuple(range(2, 12)))]) >= 2
    at_count = attribute(additive, x, h, budget=winter_coalition_count(h), return_report=True)
    assert at_count.report.exact.all()


def test_single_child_wrappers_are_dropped_and_depth_counts_real_levels():
    wrapped: object = list(range(10))
    for _ in range(600):
        wrapped = [wrapped]
    assert Hierarchy.from_nested(wrapped).depth == 1  # refused as "1 levels deep" before
    chain: object = 0
    for i in range(1, 600):
        chain = [[chain], i]  # wrappers between the real levels are not levels
    with pytest.raises(ValueError, match=r"hierarchy is 599 levels deep; at most MAX_DEPTH"):
        Hierarchy.from_nested(chain)
