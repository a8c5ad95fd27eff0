"""Unbiased estimators: cross-fitted regression-adjusted Monte Carlo and Taylor control variates."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.attr.shear import Shear
from captum_graphshap.plans.control_variates import (
    controlled_contributions,
    ordering_groups,
    surrogate_contributions,
)
from captum_graphshap.plans.permutations import (
    permutation_contributions,
    permutation_ranks,
    prefix_coalitions,
)
from captum_graphshap.plans.regression_adjusted import cubic_kernel_plan
from captum_graphshap.plans.regression_mc import pair_weights, regression_mc_plan
from captum_graphshap.plans.surrogates import QuadraticSurrogate

from .reference import CallCounter, TableGame
from .test_estimators import brute, every_coalition, moebius_game, seeded, softplus_mlp

CPU = torch.device("cpu")


def table_estimate(
    make_plan, table: torch.Tensor, pairs: int, seed: int, **options
) -> torch.Tensor:
    """One estimate of a plan over a game table ``(2^d,)`` (or ``(N, 2^d)``)."""
    tables = table if table.dim() == 2 else table[None]
    d = int(tables.shape[1]).bit_length() - 1
    plan = make_plan(d, pairs, seeded(seed), CPU, **options)
    codes = (plan.coalitions.dense().long() << torch.arange(d)).sum(dim=1)
    return plan.estimator(tables[:, codes])


def z_scores(runs: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """``|mean - truth| / standard error`` per feature over the runs ``(R, d)``."""
    return (runs.mean(0) - truth).abs() / (runs.std(0) / math.sqrt(runs.shape[0]))


# ------------------------------------------------------- regression-adjusted Monte Carlo


def test_pair_weights_are_the_shapley_weights_of_a_pair():
    d = 5
    z = every_coalition(d)
    # phi_i = sum over all T of c_i(T) v(T): a random table gives the brute-force value
    table = torch.randn(2**d, generator=seeded(1), dtype=torch.float64)
    half = z[~z[:, 0]]  # one coalition of each pair: those without feature 0
    half = half[half.sum(1) > 0]
    codes = (half.long() << torch.arange(d)).sum(1)
    complement = (2**d - 1) - codes
    odd = (table[codes] - table[complement]) / 2
    phi = (table[-1] - table[0]) / d + odd @ pair_weights(half, torch.float64)
    torch.testing.assert_close(phi, brute(table))


def test_regression_mc_is_unbiased_where_the_cubic_fit_is_not():
    """Mean over 1,200 seeds on a game with terms up to order 5: the cross-fitted
    estimate's mean is within 4.5 standard errors of exact Shapley on every
    feature; the in-sample cubic fit, same budget, is many standard errors off."""
    table = moebius_game(7, {1: 7, 2: 10, 3: 8, 4: 6, 5: 3}, seed=1)
    truth = brute(table)
    pairs = 24  # 7 pairs of size 1 enumerated, 17 drawn
    mc = torch.cat([table_estimate(regression_mc_plan, table, pairs, s) for s in range(1200)])
    cubic = torch.cat([table_estimate(cubic_kernel_plan, table, pairs, s) for s in range(1200)])
    assert float(z_scores(mc, truth).max()) < 4.5
    assert float(z_scores(cubic, truth).max()) > 6


def test_regression_mc_with_informed_triples_is_unbiased():
    """Triples chosen from outside scores (SHEAR's eta) keep it unbiased as well."""
    d = 6
    table = moebius_game(d, {2: 6, 3: 6, 4: 3}, seed=4)
    strength = torch.rand(1, d, d, generator=seeded(2), dtype=torch.float64)
    strength = strength + strength.transpose(1, 2)
    runs = torch.cat(
        [
            table_estimate(regression_mc_plan, table, 14, s, strength=strength, folds=4)
            for s in range(1000)
        ]
    )
    assert float(z_scores(runs, brute(table)).max()) < 4.5


@pytest.mark.parametrize("pairs", [3, 10, 40])
def test_regression_mc_efficiency_at_any_budget(pairs):
    tables = torch.stack([moebius_game(8, {2: 8, 3: 5}, seed=s) for s in range(3)])
    phi = table_estimate(regression_mc_plan, tables, pairs, 0)
    torch.testing.assert_close(phi.sum(1), tables[:, -1] - tables[:, 0])


def test_regression_mc_is_exact_with_every_pair_and_for_quadratic_games():
    d = 6
    rough = moebius_game(d, {2: 5, 3: 5, 5: 2}, seed=3)
    every = 2 ** (d - 1) - 1
    torch.testing.assert_close(table_estimate(regression_mc_plan, rough, every, 0)[0], brute(rough))
    # order two: the odd part is linear, so each fold's fit is exact and the residual 0
    quadratic = moebius_game(8, {1: 8, 2: 12}, seed=5)
    for seed in range(3):
        torch.testing.assert_close(
            table_estimate(regression_mc_plan, quadratic, 40, seed)[0], brute(quadratic)
        )


def test_regression_mc_rows_are_distinct_where_enumerated_and_within_budget():
    plan = regression_mc_plan(10, 50, seeded(0), CPU)
    rows = plan.coalitions.dense()
    assert rows.shape == (2 + 2 * 50, 10)
    sampled = rows[2:52]
    singletons = sampled[sampled.sum(1) == 1]
    # 50 pairs over 5 size pairs: size 1 (10 pairs) fits its share and is enumerated
    assert singletons.shape[0] == 10 and torch.unique(singletons, dim=0).shape[0] == 10
    assert torch.equal(rows[52:], ~sampled)


def test_paired_kernel_shap_and_shear_take_the_regression_mc_estimator():
    d = 7
    model = softplus_mlp(d)
    x = torch.randn(3, d, dtype=torch.float64)
    exact = PairedKernelShap(model).attribute(x, target=0, n_samples=2**d)  # every pair
    phi, n = PairedKernelShap(model).attribute(
        x,
        target=0,
        budget=60,
        estimator="regression_mc",
        generator=seeded(1),
        return_evaluations=True,
    )
    again = PairedKernelShap(model).attribute(
        x, target=0, budget=60, estimator="regression_mc", generator=seeded(1)
    )
    assert torch.equal(phi, again)
    assert int(n.max()) <= 60
    torch.testing.assert_close(phi.sum(1), exact.sum(1))
    assert float((phi - exact).abs().max()) < 0.1 * float(exact.abs().max())
    shear = Shear(model).attribute(
        x, target=0, budget=200, estimator="regression_mc", generator=seeded(1)
    )
    torch.testing.assert_close(shear.sum(1), exact.sum(1))
    assert float((shear - exact).abs().max()) < 0.1 * float(exact.abs().max())


# ------------------------------------------------------------------ control variates


def random_quadratic(d: int, seed: int) -> QuadraticSurrogate:
    generator = seeded(seed)
    pairwise = torch.randn(1, d, d, generator=generator, dtype=torch.float64)
    pairwise = (pairwise + pairwise.transpose(1, 2)) * (1 - torch.eye(d, dtype=torch.float64))
    return QuadraticSurrogate(
        torch.randn(1, generator=generator, dtype=torch.float64),
        torch.randn(1, d, generator=generator, dtype=torch.float64),
        pairwise,
    )


def test_surrogate_contributions_are_its_differences_on_the_prefixes():
    d = 6
    surrogate = random_quadratic(d, 0)
    ranks = permutation_ranks(1, d, 5, False, seeded(1), CPU)
    prefixes = prefix_coalitions(ranks).reshape(-1, d)
    values = surrogate.values(prefixes).view(1, 5, d + 1)
    torch.testing.assert_close(
        surrogate_contributions(surrogate, ranks), permutation_contributions(values, ranks)
    )


@pytest.mark.parametrize("antithetic", [False, True])
def test_optimal_control_variate_is_unbiased(antithetic):
    """Cross-fitted coefficients: the mean over 2,000 seeds is within 4.5
    standard errors of exact Shapley, with a surrogate that only resembles the game."""
    d = 5
    table = moebius_game(d, {1: 5, 2: 6, 3: 4, 4: 2}, seed=7)
    truth = brute(table)
    surrogate = random_quadratic(d, 8)
    surrogate = QuadraticSurrogate(
        surrogate.constant, surrogate.linear + truth[None], surrogate.pairwise * 0.5
    )
    runs = []
    for seed in range(2000):
        ranks = permutation_ranks(1, d, 6, antithetic, seeded(seed), CPU)
        codes = (prefix_coalitions(ranks).long() << torch.arange(d)).sum(-1)
        contributions = permutation_contributions(table[codes], ranks)
        controlled = controlled_contributions(
            contributions,
            surrogate_contributions(surrogate, ranks),
            surrogate.shapley(),
            ordering_groups(6, antithetic),
            "optimal",
        )
        runs.append(controlled.mean(dim=1)[0])
    assert float(z_scores(torch.stack(runs), truth).max()) < 4.5


def quadratic_model(d: int) -> nn.Module:
    class Quadratic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = seeded(11)
            self.a = torch.randn(d, generator=generator, dtype=torch.float64)
            self.b = torch.randn(d, d, generator=generator, dtype=torch.float64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x @ self.a + ((x @ self.b) * x).sum(1))[:, None]

    return Quadratic()


@pytest.mark.parametrize("coefficient", ["optimal", 1.0])
def test_taylor_control_variate_is_exact_on_a_quadratic_model(coefficient):
    d = 6
    model = quadratic_model(d)
    x = torch.randn(2, d, dtype=torch.float64)
    exact = PairedKernelShap(model).attribute(x, target=0, n_samples=2**d)
    phi = ShapleySampling(model).attribute(
        x,
        target=0,
        n_samples=4,
        antithetic=False,
        control_variate="taylor",
        control_coefficient=coefficient,
        generator=seeded(0),
    )
    torch.testing.assert_close(phi, exact)


def test_taylor_control_variate_counts_its_derivatives_and_narrows_the_interval():
    d = 8
    model = CallCounter(softplus_mlp(d))
    x = torch.randn(2, d, dtype=torch.float64)
    plain = ShapleySampling(model).attribute(
        x, target=0, budget=300, antithetic=False, generator=seeded(0), return_uncertainty=True
    )
    controlled, width, n = ShapleySampling(model).attribute(
        x,
        target=0,
        budget=300,
        antithetic=False,
        control_variate="taylor",
        generator=seeded(0),
        return_uncertainty=True,
        return_evaluations=True,
    )
    assert int(n.max()) <= 300
    assert int(n.min()) >= 1 + 3 + 4 * d  # the derivatives are counted
    exact = PairedKernelShap(model).attribute(x, target=0, n_samples=2**d)
    assert float((controlled - exact).abs().sum()) < 0.5 * float((plain[0] - exact).abs().sum())
    assert float(width.mean()) < 0.5 * float(plain[1].mean())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"control_variate": "linear"}, ValueError, "control_variate"),
        ({"control_variate": "taylor", "control_point": 1.5}, ValueError, "control_point"),
        ({"control_coefficient": "best"}, ValueError, "control_coefficient"),
        (
            {"control_variate": "taylor", "references": torch.zeros(3, 4, dtype=torch.float64)},
            ValueError,
            "references",
        ),
    ],
)
def test_bad_control_options_are_refused_before_any_model_call(kwargs, error, match):
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(error, match=match):
        ShapleySampling(model).attribute(torch.randn(2, 4, dtype=torch.float64), target=0, **kwargs)
    assert model.calls == 0


def test_taylor_control_variate_refuses_token_ids_before_any_model_call():
    model = CallCounter(TableGame(torch.randn(16, dtype=torch.float64)))
    with pytest.raises(TypeError, match="control_variate"):
        ShapleySampling(model).attribute(
            torch.ones(1, 4, dtype=torch.long), control_variate="taylor"
        )
    assert model.calls == 0


def test_regression_mc_estimator_is_refused_by_name_when_misspelt():
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(ValueError, match="estimator"):
        PairedKernelShap(model).attribute(
            torch.randn(2, 4, dtype=torch.float64), target=0, estimator="regression-mc"
        )
    assert model.calls == 0
