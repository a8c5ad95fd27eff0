"""The stencil plans (grids and lines) against the per-node bitmask builders.

The stencil builders serve grids and lines; the bitmask builders stay the
reference (they enumerate each node's ball directly). Equality is checked on
the linear map applied to a random table game over all coalitions, which pins
both the coalitions and the coefficients.
"""

from __future__ import annotations

import pytest
import torch

from captum_graphshap import LShapley, MyersonValue
from captum_graphshap.engine.plan import IntervalCoalitions, MemberCoalitions
from captum_graphshap.graphs import GridGraph, LineGraph
from captum_graphshap.plans.exact import _myerson_plan_cached, myerson_plan
from captum_graphshap.plans.l_c_shapley import (
    _c_shapley_plan_cached,
    _l_shapley_plan_cached,
    c_shapley_plan,
    l_shapley_plan,
)
from captum_graphshap.plans.stencils import c_shapley_grid_plan, l_shapley_grid_plan

GRIDS = [(1, 7), (1, 12), (3, 4), (4, 4), (5, 3), (2, 1), (1, 1)]


def table_game(n, seed):
    table = torch.randn(2**n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    weights = 1 << torch.arange(n)

    def apply(plan):
        rows = plan.coalitions.dense()
        return plan.estimator(table[(rows.long() * weights).sum(dim=1)][None])[0]

    return apply


def graph_of(height, width):
    return LineGraph(width) if height == 1 else GridGraph(height, width)


@pytest.mark.parametrize("height, width", GRIDS)
@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("context", ["baseline", "input"])
def test_l_shapley_stencil_plan_equals_the_bitmask_builder(height, width, k, context):
    apply = table_game(height * width, seed=height * 31 + width + k)
    reference = _l_shapley_plan_cached(graph_of(height, width), k, context)
    plan = l_shapley_grid_plan(height, width, k, context, 2**20)
    assert isinstance(plan.coalitions, MemberCoalitions)
    assert len(plan) == len(reference)  # the same distinct coalitions
    torch.testing.assert_close(apply(plan), apply(reference), atol=1e-10, rtol=0)


@pytest.mark.parametrize("height, width", GRIDS)
@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("context", ["baseline", "input"])
@pytest.mark.parametrize("weights", ["myerson", "paper"])
def test_c_shapley_stencil_plan_equals_the_bitmask_builder(height, width, k, context, weights):
    apply = table_game(height * width, seed=height * 17 + width + k)
    reference = _c_shapley_plan_cached(graph_of(height, width), k, context, weights, 2**20)
    plan = c_shapley_grid_plan(height, width, k, context, weights, 2**20)
    assert len(plan) == len(reference)
    torch.testing.assert_close(apply(plan), apply(reference), atol=1e-10, rtol=0)


@pytest.mark.parametrize("n", [1, 2, 3, 6, 11])
def test_line_myerson_plan_equals_the_bitmask_builder(n):
    apply = table_game(n, seed=n)
    reference = _myerson_plan_cached(LineGraph(n), 2**20)
    plan = myerson_plan(LineGraph(n))
    assert isinstance(plan.coalitions, IntervalCoalitions)
    assert len(plan) == len(reference) == n * (n + 1) // 2 + 1
    torch.testing.assert_close(apply(plan), apply(reference), atol=1e-10, rtol=0)


def test_large_grid_plans_are_stored_by_members_in_linear_memory():
    # 128 x 128 pixels at k = 1: every coalition has at most 5 members
    for build in (l_shapley_plan, c_shapley_plan):
        plan = build(GridGraph(128, 128), 1)
        assert isinstance(plan.coalitions, MemberCoalitions)
        assert len(plan) == 369_951
        assert plan.coalitions.members.numel() <= 5 * len(plan)


def test_long_lines_build_at_once():
    plan = myerson_plan(LineGraph(500))
    assert len(plan) == 500 * 501 // 2 + 1
    assert len(l_shapley_plan(LineGraph(16_384), 2)) == 262_096


def test_end_to_end_on_a_grid_the_stencil_serves():
    # 72 x 72 = 5184 pixels: past the size where even k = 3 takes the stencil path.
    # A linear model: L-Shapley's weights over each ball sum to 1, so it is exact.
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(72 * 72, 2))
    x = torch.rand(2, 1, 72, 72)
    own = (x.flatten(1) * model[1].weight[1]).view_as(x).detach()
    torch.testing.assert_close(LShapley(model).attribute(x, target=1, k=1), own, atol=1e-5, rtol=0)
    line = torch.randn(2, 300)
    net = torch.nn.Sequential(torch.nn.Linear(300, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    psi = MyersonValue(net).attribute(line, target=0)
    total = (net(line) - net(torch.zeros(1, 300)))[:, 0].detach()
    torch.testing.assert_close(psi.sum(dim=1), total, atol=1e-4, rtol=1e-4)
