"""The defaults at their fewest pairs: finite, efficient and bounded, or refused.

At ``d`` pairs a stratified design often leaves the linear parities
unidentified (``x_0 + x_3 = x_8 + x_9`` in every row): the Gaussian-process
fit must redraw it, take the minimum-norm split where it cannot, and the
shared guard must refuse any estimate the observed values cannot justify.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import BayesShap, ExactShapley, PairedKernelShap
from captum_graphshap.attr.guards import (
    SCALE_BOUND,
    attribution_scale_excess,
    check_attribution_scale,
)
from captum_graphshap.plans import walsh_gp
from captum_graphshap.plans.stratified import stratified_paired_coalitions
from captum_graphshap.plans.walsh_design import identifies_linear_parities
from captum_graphshap.plans.walsh_gp import WalshGPDesign, walsh_gp_design

CPU = torch.device("cpu")


def model_of(kind: str, d: int, seed: int) -> nn.Module:
    """Small models of four kinds over ``d`` features, float64."""
    torch.manual_seed(seed)
    if kind == "constant":
        return ConstantModel()
    if kind == "dominant":
        return DominantModel(d, seed)
    activation = nn.Tanh() if kind == "tanh" else nn.ReLU()
    return nn.Sequential(nn.Linear(d, 16), activation, nn.Linear(16, 1)).double().eval()


class ConstantModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full((x.shape[0], 1), 0.7, dtype=torch.float64)


class DominantModel(nn.Module):
    """One feature carries 1,000 times the others' weight, plus a small interaction."""

    def __init__(self, d: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.randn(d, generator=g, dtype=torch.float64) * 1e-3
        self.w[seed % d] = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.double()
        return (x @ self.w + 1e-3 * torch.tanh(x[:, 0] * x[:, -1]))[:, None]


def assert_sound(phi: torch.Tensor, model: nn.Module, x: torch.Tensor) -> None:
    """Finite, efficient to 1e-6 relative and within the guard's bound."""
    with torch.no_grad():
        gap = (model(x) - model(torch.zeros_like(x)))[:, 0]
    assert torch.isfinite(phi).all()
    scale = gap.abs().max().clamp_min(1e-12)
    assert ((phi.sum(1) - gap).abs() <= 1e-6 * scale + 1e-12).all()
    assert phi.abs().max() <= SCALE_BOUND * 2 * scale + 1e-9


def test_the_reported_blow_up_is_gone() -> None:
    """Issue 29's reproduction: +-4.7e12 where the exact values are below 0.3."""
    torch.manual_seed(10)
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(8, 12)
    g = torch.Generator().manual_seed(10)
    phi = PairedKernelShap(model).attribute(x, target=0, budget=26, generator=g)
    exact = ExactShapley(model).attribute(x, target=0)
    assert phi.abs().max() < 3 * exact.abs().max()
    torch.testing.assert_close(phi.sum(1), exact.sum(1), rtol=1e-4, atol=1e-5)
    mean, half = BayesShap(model).attribute(
        x, target=0, budget=26, generator=torch.Generator().manual_seed(10), return_uncertainty=True
    )
    assert mean.abs().max() < 3 * exact.abs().max()
    assert (half > 0).all()


def deficient_first_draw(d: int) -> int:
    """A generator seed whose first stratified draw of ``d`` pairs misses exactly one
    direction of the linear parities (rank ``d - 1``)."""
    for seed in range(200):
        sampled, _ = stratified_paired_coalitions(
            d, d, torch.Generator().manual_seed(seed), CPU, small_first=True
        )
        signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
        if not identifies_linear_parities(sampled) and torch.linalg.matrix_rank(signs) == d - 1:
            return seed
    raise AssertionError("no rank-deficient first draw in 200 seeds")


def test_a_rank_deficient_design_is_redrawn() -> None:
    d = 12
    seed = deficient_first_draw(d)
    design = walsh_gp_design(d, d, torch.Generator().manual_seed(seed), CPU)
    assert identifies_linear_parities(design.sampled)
    signs = torch.cat([design.sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    assert torch.linalg.matrix_rank(signs) == d


def test_a_kept_rank_deficient_design_gives_the_minimum_norm_split() -> None:
    """With the redraws exhausted the pseudo-inverse splits the unseen direction
    evenly: a game linear in the features is then still exact on the features the
    design separates, and the tied ones share their total."""
    d = 12
    seed = deficient_first_draw(d)
    sampled, weights = stratified_paired_coalitions(
        d, d, torch.Generator().manual_seed(seed), CPU, small_first=True
    )
    design = WalshGPDesign(sampled, weights)
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    null = torch.linalg.svd(signs).Vh[-1]  # the unseen direction of the linear parities
    w = torch.linspace(-1.0, 2.0, d, dtype=torch.float64)
    rows = design.plan().coalitions.dense().double()
    values = (rows @ w)[None]
    phi = design.mean(values)[0]
    # the estimate differs from w only along the null direction, by the minimum-norm rule
    torch.testing.assert_close(phi, w - (w @ null) * null, rtol=1e-7, atol=1e-7)
    assert phi.abs().max() < 10 * w.abs().max()


def test_the_scale_guard_refuses_what_the_values_cannot_justify() -> None:
    values = torch.tensor([[0.0, 1.0, 0.5], [2.0, 2.0, 2.0]], dtype=torch.float64)
    fine = torch.tensor([[0.4, 0.6], [0.0, 1e-13]], dtype=torch.float64)
    assert not attribution_scale_excess(values, fine).any()
    blown = torch.tensor([[4.7e12, -4.7e12], [0.0, 0.0]], dtype=torch.float64)
    assert attribution_scale_excess(values, blown).tolist() == [True, False]
    with pytest.raises(RuntimeError, match=r"internal error: PairedKernelShap .* \[0\]"):
        check_attribution_scale("PairedKernelShap", values, blown)
    # a constant game's rounding-level estimate is not an excess, a real one is
    constant = torch.full((1, 4), 0.7, dtype=torch.float64)
    assert not attribution_scale_excess(constant, torch.full((1, 3), 1e-15)).any()
    assert attribution_scale_excess(constant, torch.full((1, 3), 1e-3)).all()


def test_the_guard_runs_in_the_estimator_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blown-up estimate from the process is raised, not returned."""
    real = walsh_gp.walsh_gp_shapley

    def blown(
        sampled: torch.Tensor, weights: torch.Tensor, values: torch.Tensor, windows: object
    ) -> torch.Tensor:
        phi = real(sampled, weights, values, windows)  # type: ignore[arg-type]
        return phi + torch.tensor([1e9, -1e9] + [0.0] * (phi.shape[1] - 2), dtype=phi.dtype)

    monkeypatch.setattr(walsh_gp, "walsh_gp_shapley", blown)
    model = model_of("tanh", 8, 0)
    x = torch.randn(2, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="internal error"):
        PairedKernelShap(model).attribute(x, target=0, budget=40, estimator="walsh_gp")


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    d=st.integers(2, 40),
    extra=st.integers(0, 10**6),
    kind=st.sampled_from(["tanh", "relu", "constant", "dominant"]),
    seed=st.integers(0, 2**16),
    bayes=st.booleans(),
)
def test_fewest_pairs_region_is_sound_or_refused(
    d: int, extra: int, kind: str, seed: int, bayes: bool
) -> None:
    """Budgets 2 d + 2 .. 4 d: finite, efficient, bounded, or a ValueError naming budget."""
    budget = 2 * d + 2 + extra % (2 * d - 1) if d > 1 else 4
    model = model_of(kind, d, seed)
    x = torch.randn(3, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    explainer = BayesShap(model) if bayes else PairedKernelShap(model)
    g = torch.Generator().manual_seed(seed)
    try:
        extras = {"return_uncertainty": True} if bayes else {}
        out = explainer.attribute(x, target=0, budget=budget, generator=g, **extras)
    except ValueError as error:
        assert "budget" in str(error)
        return
    phi = out[0] if bayes else out
    assert_sound(phi, model, x)
    if bayes:
        assert torch.isfinite(out[1]).all() and (out[1] >= 0).all()
