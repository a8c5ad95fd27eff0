"""Surrogates, the regression-adjusted (cubic) estimator, antithetic counts and t intervals."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shear import Shear
from captum_graphshap.engine.derivatives import taylor_terms
from captum_graphshap.plans.linear import shapley_from_all_coalitions
from captum_graphshap.plans.permutations import permutation_ranks
from captum_graphshap.plans.regression_adjusted import (
    cubic_kernel_plan,
    held_out_error,
    triple_count,
)
from captum_graphshap.plans.stratified import size_allocation, stratified_paired_coalitions
from captum_graphshap.plans.surrogates import (
    OddCubicSurrogate,
    QuadraticSurrogate,
    quadratic_from_taylor,
    select_triples,
)
from captum_graphshap.uncertainty.intervals import student_t_quantile

from .reference import CallCounter, TableGame, brute_shapley


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def every_coalition(d: int) -> torch.Tensor:
    codes = torch.arange(2**d)
    return ((codes[:, None] >> torch.arange(d)) & 1).bool()


def brute(table: torch.Tensor) -> torch.Tensor:
    d = int(table.numel()).bit_length() - 1
    game = TableGame(table)
    return torch.tensor(brute_shapley(lambda s: game.value(s), d), dtype=torch.float64)


def moebius_game(d: int, orders: dict[int, int], seed: int) -> torch.Tensor:
    """A table ``(2^d,)`` with random Moebius terms: ``orders[k]`` terms of order ``k``."""
    generator = seeded(seed)
    z = every_coalition(d)
    table = torch.randn(1, generator=generator, dtype=torch.float64).expand(2**d).clone()
    for order, count in orders.items():
        sets = list(itertools.combinations(range(d), order))
        picks = torch.randperm(len(sets), generator=generator)[:count].tolist()
        for pick in picks:
            weight = float(torch.randn(1, generator=generator, dtype=torch.float64)) * 2
            table += weight * z[:, list(sets[pick])].all(dim=1).double()
    return table


# ---------------------------------------------------------------- surrogates


def test_quadratic_surrogate_shapley_is_exact_shapley_of_its_game():
    d, batch = 5, 3
    generator = seeded(0)
    pairwise = torch.randn(batch, d, d, generator=generator, dtype=torch.float64)
    pairwise = (pairwise + pairwise.transpose(1, 2)) * (1 - torch.eye(d, dtype=torch.float64))
    q = QuadraticSurrogate(
        torch.randn(batch, generator=generator, dtype=torch.float64),
        torch.randn(batch, d, generator=generator, dtype=torch.float64),
        pairwise,
    )
    table = q.values(every_coalition(d))  # (N, 2^d)
    for n in range(batch):
        torch.testing.assert_close(q.shapley()[n], brute(table[n]), rtol=0, atol=1e-12)
    rows = every_coalition(d)[[3, 17, 30]]
    example = torch.tensor([0, 2, 1])
    torch.testing.assert_close(
        q.values(rows, example), table[example, torch.tensor([3, 17, 30])], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("point", [0.0, 0.5, 0.8])
def test_taylor_surrogate_of_a_quadratic_model_is_the_game_itself(point):
    d = 5
    generator = seeded(1)
    a = torch.randn(d, d, generator=generator, dtype=torch.float64)
    b = torch.randn(d, generator=generator, dtype=torch.float64)

    def model(x):
        return x @ b + ((x @ a) * x).sum(dim=1)

    x = torch.randn(2, d, generator=generator, dtype=torch.float64)
    base = torch.randn(1, d, generator=generator, dtype=torch.float64).expand(2, d)
    mask = (torch.arange(d)[None],)
    terms = taylor_terms(model, (x,), (base,), mask, d, point=point)
    q = quadratic_from_taylor(terms.value, terms.gradient, terms.hessian, point)
    z = every_coalition(d)
    for n in range(2):
        game = model(torch.where(z, x[n], base[n]))
        torch.testing.assert_close(q.values(z)[n], game, rtol=0, atol=1e-10)
    exact = ExactShapley(model).attribute(x, base)
    torch.testing.assert_close(q.shapley(), exact, rtol=0, atol=1e-10)


def test_odd_cubic_surrogate_shapley_is_exact_shapley_of_its_game():
    d, batch = 6, 2
    generator = seeded(2)
    triples = torch.tensor([[[0, 1, 2], [1, 3, 5]], [[2, 3, 4], [0, 4, 5]]])
    g = OddCubicSurrogate(
        torch.randn(batch, d, generator=generator, dtype=torch.float64),
        torch.randn(batch, 2, generator=generator, dtype=torch.float64),
        triples,
    )
    table = g.values(every_coalition(d))
    for n in range(batch):
        torch.testing.assert_close(g.shapley()[n], brute(table[n]), rtol=0, atol=1e-12)


def test_select_triples_finds_three_way_interactions_not_strong_pairs_alone():
    strength = torch.zeros(1, 9, 9)
    for block in range(3):
        ids = torch.arange(3 * block, 3 * block + 3)
        strength[0, ids[:, None], ids[None, :]] = 0.1 + block
    strength[0, 0, 4] = strength[0, 4, 0] = 50.0  # a strong pair without a third partner
    strength[0].fill_diagonal_(0)
    chosen = {tuple(t) for t in select_triples(strength, 3)[0].tolist()}
    assert chosen == {(0, 1, 2), (3, 4, 5), (6, 7, 8)}


# ---------------------------------------------------------------- sampler


def test_size_allocation_enumerates_small_sizes_and_spends_every_pair():
    d = 10
    allocation = size_allocation(d, 100)
    assert sum(count for _, count, _ in allocation) == 100
    assert allocation[0][1] == 10  # size 1 (and 9): all 10 pairs
    for pairs in (7, 100, 511, 2000):
        coalitions, weights = stratified_paired_coalitions(d, pairs, seeded(0), torch.device("cpu"))
        assert coalitions.shape[0] == min(pairs, 2 ** (d - 1) - 1)
        keys = set()
        for row in coalitions.tolist():
            code = sum(1 << i for i, bit in enumerate(row) if bit)
            keys.add(min(code, (1 << d) - 1 - code))  # the pair, whichever side drawn
        assert len(keys) == coalitions.shape[0]  # no pair twice
        assert bool((weights > 0).all())


def test_cubic_plan_rows_are_distinct_and_within_budget():
    plan = cubic_kernel_plan(7, 40, seeded(3), torch.device("cpu"))
    rows = plan.coalitions.dense()
    assert rows.shape[0] == 82
    assert torch.unique(rows, dim=0).shape[0] == 82 and plan.distinct


# ---------------------------------------------------------------- estimators


@pytest.mark.parametrize("estimator", ["stratified", "cubic"])
def test_exact_with_every_coalition(estimator):
    d = 6
    table = torch.randn(2**d, generator=seeded(4), dtype=torch.float64)
    model = TableGame(table)
    got = PairedKernelShap(model).attribute(
        torch.ones(1, d, dtype=torch.float64), budget=2**d, estimator=estimator, generator=seeded(0)
    )
    torch.testing.assert_close(got[0], brute(table), rtol=0, atol=1e-10)


@pytest.mark.parametrize("estimator", ["stratified", "cubic"])
@pytest.mark.parametrize("budget", [30, 40, 100])
def test_exact_for_games_of_order_two_once_the_pairs_span(estimator, budget):
    # the odd part of a game of order two is linear in s = 2 z - 1: any design
    # of complementary pairs that spans R^d recovers it (here 14+ pairs, d = 7)
    d = 7
    table = moebius_game(d, {1: 7, 2: 12}, seed=budget)
    model = TableGame(table)
    got = PairedKernelShap(model).attribute(
        torch.ones(1, d, dtype=torch.float64),
        budget=budget,
        estimator=estimator,
        generator=seeded(budget),
    )
    torch.testing.assert_close(got[0], brute(table), rtol=0, atol=1e-9)


def test_cubic_is_exact_for_a_game_of_order_three_and_linear_is_not():
    d = 8
    table = moebius_game(d, {1: 8, 2: 3}, seed=5)
    z = every_coalition(d).double()
    table += 3.0 * z[:, [0, 1, 2]].prod(dim=1) - 2.0 * z[:, [4, 5, 7]].prod(dim=1)
    model = TableGame(table)
    x = torch.ones(1, d, dtype=torch.float64)
    exact = brute(table)
    assert triple_count(d, 60) > 0
    cubic = PairedKernelShap(model).attribute(x, budget=122, estimator="cubic", generator=seeded(1))
    torch.testing.assert_close(cubic[0], exact, rtol=0, atol=1e-9)
    linear = PairedKernelShap(model).attribute(
        x, budget=122, estimator="stratified", generator=seeded(1)
    )
    assert float((linear[0] - exact).abs().max()) > 1e-3


def test_held_out_error_prefers_the_triples_a_game_has_and_none_when_it_has_none():
    d, pairs = 8, 60
    z = every_coalition(d).double()
    sampled, weights = stratified_paired_coalitions(d, pairs, seeded(2), torch.device("cpu"))
    codes = (sampled.long() << torch.arange(d)).sum(1)

    def odd_and_total(table):
        odd = (table[codes] - table[(2**d - 1) - codes]) / 2
        return odd[None], ((table[-1] - table[0]) / 2)[None]

    truth = torch.tensor([[[0, 1, 2], [4, 5, 7]]])
    wrong = torch.tensor([[[0, 3, 6], [1, 4, 6]]])
    cubic = moebius_game(d, {1: 8, 2: 3}, seed=5)
    cubic += 3.0 * z[:, [0, 1, 2]].prod(dim=1) - 2.0 * z[:, [4, 5, 7]].prod(dim=1)
    odd, total = odd_and_total(cubic)
    right = held_out_error(sampled, weights, odd, total, truth)
    assert float(right) < 1e-20
    assert float(held_out_error(sampled, weights, odd, total, truth[:, :0])) > 1e-3
    assert float(held_out_error(sampled, weights, odd, total, wrong)) > 1e-3
    # a game of order two has a linear odd part: no triple lowers the error
    quadratic = moebius_game(d, {1: 8, 2: 10}, seed=6)
    odd, total = odd_and_total(quadratic)
    for triples in (truth[:, :0], wrong):
        assert float(held_out_error(sampled, weights, odd, total, triples)) < 1e-20


def softplus_mlp(d: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 24), nn.Softplus(), nn.Linear(24, 1)).double()


@pytest.mark.parametrize("estimator", ["stratified", "cubic"])
def test_efficiency_and_reproducibility(estimator):
    d = 9
    model = softplus_mlp(d)
    x = torch.randn(3, d, dtype=torch.float64)

    def run(seed):
        return PairedKernelShap(model).attribute(
            x, target=0, budget=200, estimator=estimator, generator=seeded(seed)
        )

    phi = run(0)
    gap = (model(x) - model(torch.zeros(1, d, dtype=torch.float64)))[:, 0]
    torch.testing.assert_close(phi.sum(1), gap, rtol=0, atol=1e-10)
    torch.testing.assert_close(run(0), phi, rtol=0, atol=0)
    assert not torch.equal(run(1), phi)


def test_cubic_beats_the_linear_fit_on_a_smooth_model():
    d = 10
    model = softplus_mlp(d, seed=3)
    x = torch.randn(6, d, dtype=torch.float64) * 2
    exact = ExactShapley(model).attribute(x, target=0)

    def error(estimator):
        total = 0.0
        for seed in range(2):
            got = PairedKernelShap(model).attribute(
                x, target=0, budget=400, estimator=estimator, generator=seeded(seed)
            )
            total += float((got - exact).abs().sum())
        return total

    assert error("cubic") < 0.5 * error("stratified") < 0.5 * error("kernel") * 2


def test_shear_regression_is_exact_with_every_coalition_and_reports_derivatives():
    d = 5
    model = softplus_mlp(d)
    x = torch.randn(2, d, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x, target=0)
    got = Shear(model).attribute(x, target=0, n_samples=8)  # d N = 40 >= 2^5: all pairs
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-10)
    d = 8
    model = softplus_mlp(d)
    x = torch.randn(2, d, dtype=torch.float64)
    result = Shear(model).attribute(
        x,
        target=0,
        n_samples=16,
        generator=seeded(0),
        return_derivative_evaluations=True,
        return_evaluations=True,
    )
    assert result._fields == ("attributions", "derivative_evaluations", "n_evaluations")
    # a checking forward, the probe's Hessian-vector product, then d of them
    assert result.derivative_evaluations.tolist() == [1 + 4 * (d + 1)] * 2
    assert result.n_evaluations.tolist() == [1 + 4 * (d + 1) + d * 16] * 2


def test_shear_regression_beats_antithetic_permutations_at_equal_cost():
    d = 10
    model = softplus_mlp(d, seed=5)
    x = torch.randn(6, d, dtype=torch.float64) * 2
    exact = ExactShapley(model).attribute(x, target=0)
    budget = 41 + 10 * 32
    shear = Shear(model).attribute(x, target=0, budget=budget, generator=seeded(0))
    permutation = ShapleySampling(model).attribute(x, target=0, budget=budget, generator=seeded(0))
    assert float((shear - exact).abs().sum()) < 0.5 * float((permutation - exact).abs().sum())


# ---------------------------------------------------------------- permutation sampling


def test_odd_antithetic_count_is_pairs_plus_one_independent_ordering():
    ranks = permutation_ranks(2, 5, 7, True, seeded(0), torch.device("cpu"))
    assert torch.equal(ranks[:, 3:6], 4 - ranks[:, :3])
    assert torch.equal(ranks.sort(dim=2).values, torch.arange(5).expand(2, 7, 5))


def test_odd_antithetic_estimate_is_unbiased():
    d = 4
    table = torch.randn(2**d, generator=seeded(6), dtype=torch.float64)
    model = TableGame(table)
    x = torch.ones(1, d, dtype=torch.float64)
    runs = torch.stack(
        [
            ShapleySampling(model).attribute(x, n_samples=3, generator=seeded(s))[0]
            for s in range(1500)
        ]
    )
    spread = runs.std(0) / math.sqrt(runs.shape[0])
    assert bool(((runs.mean(0) - brute(table)).abs() <= 4 * spread + 1e-12).all())


def test_default_counts_25_orderings_and_26_with_an_interval():
    d = 6
    model = CallCounter(softplus_mlp(d))
    x = torch.randn(1, d, dtype=torch.float64)
    plain = ShapleySampling(model).attribute(x, target=0, return_evaluations=True)
    assert int(plain.n_evaluations[0]) <= 2 + 25 * (d - 1)
    ranks25 = permutation_ranks(1, d, 25, True, None, x.device)
    assert ranks25.shape[1] == 25
    result = ShapleySampling(model).attribute(
        x, target=0, return_uncertainty=True, generator=seeded(0)
    )
    again = ShapleySampling(model).attribute(
        x, target=0, n_samples=26, return_uncertainty=True, generator=seeded(0)
    )
    torch.testing.assert_close(result.half_width, again.half_width, rtol=0, atol=0)


def test_t_interval_is_the_textbook_formula():
    d, n = 4, 6
    table = torch.randn(2**d, generator=seeded(3), dtype=torch.float64)
    model = TableGame(table)
    x = torch.ones(1, d, dtype=torch.float64)
    _, half = ShapleySampling(model).attribute(
        x, n_samples=n, generator=seeded(5), return_uncertainty=True, confidence=0.9, interval="t"
    )
    _, normal = ShapleySampling(model).attribute(
        x,
        n_samples=n,
        generator=seeded(5),
        return_uncertainty=True,
        confidence=0.9,
        interval="normal",
    )
    ratio = student_t_quantile(0.9, n // 2 - 1) / 1.6448536269514722  # 3 pairs: 2 dof
    torch.testing.assert_close(half, normal * ratio, rtol=1e-12, atol=1e-14)
    assert abs(student_t_quantile(0.9, 2) - 2.919985580355516) < 1e-9


# ---------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (PairedKernelShap, {"estimator": "quartic"}, "estimator"),
        (Shear, {"estimator": "fast"}, "estimator"),
        (ShapleySampling, {"n_samples": 7, "return_uncertainty": True}, "even.*use 8"),
        (ShapleySampling, {"interval": "z"}, "interval"),
    ],
)
def test_bad_options_are_refused_before_any_model_call(cls, kwargs, match):
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(ValueError, match=match):
        cls(model).attribute(torch.randn(2, 4, dtype=torch.float64), target=0, **kwargs)
    assert model.calls == 0


def test_all_coalitions_helper_agrees_with_brute_force():
    table = torch.randn(2**5, generator=seeded(9), dtype=torch.float64)
    torch.testing.assert_close(shapley_from_all_coalitions(table[None])[0], brute(table))


def test_above_32_features_the_cubic_fit_is_exact_for_a_game_of_order_three():
    """Above 32 features the cubic surrogate (``"auto"``'s from ``6 d`` evaluations
    below ``8 d`` up to 64 features, and beyond 64) fits a quarter of the triples with
    no cross-validation; a game of order three whose triples interact in the even part
    is still fitted exactly."""
    from captum_graphshap.plans.regression_adjusted import WIDE_FEATURES, fitted_triple_count

    d = WIDE_FEATURES + 4
    a = torch.randn(d, generator=seeded(3), dtype=torch.float64)

    def model(z):
        return (z @ a + 3.0 * z[:, [0, 1, 2]].prod(dim=1) - 2.0 * z[:, [4, 5, 7]].prod(dim=1))[
            :, None
        ]

    exact = a.clone()
    exact[[0, 1, 2]] += 1.0
    exact[[4, 5, 7]] -= 2.0 / 3.0
    assert 0 < fitted_triple_count(d, 511) < triple_count(d, 511)
    x = torch.ones(2, d, dtype=torch.float64)
    got = PairedKernelShap(model).attribute(
        x, target=0, budget=1024, generator=seeded(4), estimator="cubic"
    )
    torch.testing.assert_close(got, exact.expand(2, d), rtol=0, atol=1e-8)
