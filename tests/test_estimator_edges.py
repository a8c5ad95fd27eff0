"""The estimators at the edges of d and budget: finite, exact where they should be (issue 19)."""

from __future__ import annotations

import warnings

import pytest
import torch

from captum_graphshap import ExactShapley, PairedKernelShap, ShapleySampling, Shear


def mlp(d: int, activation: type[torch.nn.Module], seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 8), activation(), torch.nn.Linear(8, 2)).double()


@pytest.mark.parametrize("estimator", ["cubic", "stratified", "kernel", "regression_mc"])
@pytest.mark.parametrize("budget", [6, 64])
def test_two_features_give_exact_shapley(estimator, budget):
    """cubic and stratified were all-NaN at d = 2: one pair, s = (1, -1), leaves the
    efficiency direction outside the Gram's range. With the pair and the endpoints
    every coalition is seen, so the value is exact."""
    net = mlp(2, torch.nn.Tanh, 0)
    x = torch.randn(3, 2, dtype=torch.float64)
    phi = PairedKernelShap(net).attribute(
        x, target=0, estimator=estimator, budget=budget, generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(phi, ExactShapley(net).attribute(x, target=0))


def test_a_two_group_mask_gives_exact_shapley():
    net = mlp(4, torch.nn.Tanh, 1)
    x = torch.randn(2, 4, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1]])
    for estimator in ("cubic", "stratified"):
        phi = PairedKernelShap(net).attribute(
            x, target=1, feature_mask=mask, estimator=estimator, budget=64
        )
        exact = ExactShapley(net).attribute(x, target=1, feature_mask=mask)
        torch.testing.assert_close(phi, exact)


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("options", [{}, {"budget": 40}, {"n_samples": 4}])
def test_shear_with_one_or_two_features_is_exact(d, options):
    """Shear's default estimator returned NaN at d = 1 and 2 (248/248 runs)."""
    net = mlp(d, torch.nn.Tanh, d)
    x = torch.randn(2, d, dtype=torch.float64)
    phi = Shear(net).attribute(x, target=0, generator=torch.Generator().manual_seed(0), **options)
    torch.testing.assert_close(phi, ExactShapley(net).attribute(x, target=0))


def test_shear_one_group_mask_is_exact():
    net = mlp(3, torch.nn.Tanh, 3)
    x = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.zeros(1, 3, dtype=torch.long)
    phi = Shear(net).attribute(x, target=0, feature_mask=mask)
    torch.testing.assert_close(phi, ExactShapley(net).attribute(x, target=0, feature_mask=mask))


def test_regression_mc_is_finite_and_efficient_at_small_budgets():
    """d = 4, budgets 6-12 gave NaN in 263 of 1,400 seeded runs (now 0); below 2 d = 8
    a warning says the fit is underdetermined."""
    for seed in range(40):
        net = mlp(4, torch.nn.ReLU, seed)
        x = torch.randn(2, 4, dtype=torch.float64)
        total = ExactShapley(net).attribute(x, target=0).sum(1)
        for budget in range(6, 13):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                phi = PairedKernelShap(net).attribute(
                    x,
                    target=0,
                    estimator="regression_mc",
                    budget=budget,
                    generator=torch.Generator().manual_seed(seed),
                )
            said = any("underdetermined" in str(w.message) for w in caught)
            assert said == (budget < 8), (budget, [str(w.message) for w in caught])
            assert bool(torch.isfinite(phi).all())
            torch.testing.assert_close(phi.sum(1), total)


def test_one_feature_budget_one_is_refused_before_any_call():
    """PairedKernelShap at d = 1, budget=1 evaluated 2 rows."""
    calls = []

    def model(t):
        calls.append(t.shape[0])
        return t.sum(1)

    with pytest.raises(ValueError, match="budget=1 is too small for PairedKernelShap"):
        PairedKernelShap(model).attribute(torch.ones(2, 1), budget=1)
    assert calls == []
    phi = PairedKernelShap(model).attribute(torch.ones(2, 1), budget=2)
    assert phi.tolist() == [[1.0], [1.0]]


def test_taylor_control_variate_is_efficient_and_detached():
    """Per-feature coefficients moved each ordering's sum (up to 0.27 |f(x) - f(b)|);
    the correction restores it exactly, and attributions no longer require grad."""
    net = mlp(6, torch.nn.Softplus, 4)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    total = ExactShapley(net).attribute(x.detach(), target=0).sum(1)
    for seed in range(10):
        phi = ShapleySampling(net).attribute(
            x,
            target=0,
            control_variate="taylor",
            antithetic=False,
            budget=200,
            generator=torch.Generator().manual_seed(seed),
        )
        assert not phi.requires_grad
        torch.testing.assert_close(phi.sum(1), total, rtol=1e-10, atol=1e-12)


def test_taylor_control_variate_refuses_a_small_budget_before_any_call():
    rows = []

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp(5, torch.nn.Tanh, 0)

        def forward(self, t):
            rows.append(t.shape[0])
            return self.net(t)

    with pytest.raises(ValueError, match="budget=12 is too small for ShapleySampling"):
        ShapleySampling(Counting()).attribute(
            torch.randn(2, 5, dtype=torch.float64), target=0, control_variate="taylor", budget=12
        )
    assert rows == []


@pytest.mark.parametrize("cls", [ShapleySampling, PairedKernelShap])
def test_a_huge_budget_is_refused_naming_budget(cls):
    with pytest.raises(ValueError, match="lower budget"):
        cls(lambda t: t.sum(1)).attribute(torch.ones(1, 30), budget=10**9)


def test_regression_mc_is_finite_and_efficient_at_a_thousand_features():
    # C(1024, 512) is near float64's largest number: the draws' importance and the
    # pair weights apart over- and underflow (inf * 0 was NaN, refused as an
    # internal error); combined in log space they are finite.
    d = 1024
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    x = torch.randn(2, d, dtype=torch.float64)
    phi = PairedKernelShap(model).attribute(
        x,
        target=0,
        estimator="regression_mc",
        budget=4096,
        generator=torch.Generator().manual_seed(0),
    )
    assert bool(torch.isfinite(phi).all())
    with torch.no_grad():
        gain = model(x)[:, 0] - model(torch.zeros(1, d, dtype=torch.float64))[:, 0]
    torch.testing.assert_close(phi.sum(1), gain, rtol=1e-9, atol=1e-9)
