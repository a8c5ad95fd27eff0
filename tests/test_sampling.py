"""Permutation sampling and paired KernelSHAP against exact Shapley values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.plans.permutations import permutation_ranks

from .reference import CallCounter, TableGame, brute_permutation_samples, brute_shapley


def softplus_mlp(d: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.Softplus(), nn.Linear(16, 3)).double()


class Quadratic(nn.Module):
    """f(x) = b.x + x^T A x: interactions of order two only."""

    def __init__(self, d: int, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.b = torch.randn(d, generator=generator, dtype=torch.float64)
        self.a = torch.randn(d, d, generator=generator, dtype=torch.float64)

    def forward(self, x):
        return x @ self.b + ((x @ self.a) * x).sum(dim=1)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_mean_and_normal_half_width_are_the_textbook_formulas():
    d, n, batch = 4, 6, 2
    generator = seeded(3)
    table = torch.randn(2**d, dtype=torch.float64, generator=generator)
    model = TableGame(table)
    x = torch.ones(batch, d, dtype=torch.float64)
    got, half = ShapleySampling(model).attribute(
        x,
        n_samples=n,
        generator=seeded(5),
        return_uncertainty=True,
        confidence=0.9,
        antithetic=False,
        interval="normal",
    )
    ranks = permutation_ranks(batch, d, n, False, seeded(5), x.device)
    z = 1.6448536269514722
    for example in range(batch):
        samples = brute_permutation_samples(model.value, ranks[example])
        torch.testing.assert_close(got[example], samples.mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(
            half[example], z * samples.std(0) / math.sqrt(n), rtol=1e-12, atol=1e-12
        )


def test_converges_to_exact_shapley():
    model = softplus_mlp(7)
    x = torch.randn(10, 7, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x, target=2)
    errors = [
        (ShapleySampling(model).attribute(x, target=2, n_samples=n, generator=seeded(0)) - exact)
        .abs()
        .sum(1)
        .mean()
        .item()
        for n in (4, 64, 1024)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < errors[0] / 8  # error ~ 1/sqrt(n): 16x fewer at 256x the samples


def test_antithetic_orderings_are_exact_for_games_of_order_two():
    # an ordering and its reverse put each partner once before and once after
    model = Quadratic(6)
    x = torch.randn(5, 6, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x)
    got = ShapleySampling(model).attribute(x, n_samples=2, antithetic=True, generator=seeded(1))
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-12)
    plain = ShapleySampling(model).attribute(x, n_samples=2, antithetic=False, generator=seeded(1))
    assert (plain - exact).abs().max() > 1e-3


def test_antithetic_orderings_are_reversed_pairs():
    ranks = permutation_ranks(3, 5, 8, True, seeded(0), torch.device("cpu"))
    assert torch.equal(ranks[:, 4:], 4 - ranks[:, :4])
    assert torch.equal(ranks.sort(dim=2).values, torch.arange(5).expand(3, 8, 5))


@pytest.mark.parametrize(
    ("antithetic", "interval"), [(False, "normal"), (True, "normal"), (False, "bootstrap")]
)
def test_intervals_cover_exact_shapley_near_the_nominal_rate(antithetic, interval):
    model = softplus_mlp(8, seed=4)
    x = torch.randn(40, 8, dtype=torch.float64) * 2
    exact = ExactShapley(model).attribute(x, target=0)
    covered = []
    for seed in range(3):
        estimate, half = ShapleySampling(model).attribute(
            x,
            target=0,
            n_samples=64,
            antithetic=antithetic,
            generator=seeded(seed),
            return_uncertainty=True,
            interval=interval,
        )
        covered.append(((estimate - exact).abs() <= half).double().mean().item())
    assert sum(covered) / 3 >= 0.88


def test_references_average_single_reference_games():
    model = softplus_mlp(5, seed=2)
    x = torch.randn(6, 5, dtype=torch.float64)
    references = torch.randn(4, 5, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x, target=1, references=references)
    estimate, half = ShapleySampling(model).attribute(
        x,
        target=1,
        n_samples=4000,
        references=references,
        generator=seeded(0),
        return_uncertainty=True,
    )
    assert ((estimate - exact).abs() <= 2 * half).all()
    assert (estimate - exact).abs().max() < 0.05 * exact.abs().max()
    # one reference is a baseline
    single = ShapleySampling(model).attribute(
        x, target=1, n_samples=8, references=references[:1], generator=seeded(2)
    )
    baseline = ShapleySampling(model).attribute(
        x, references[:1], target=1, n_samples=8, generator=seeded(2)
    )
    torch.testing.assert_close(single, baseline, rtol=0, atol=1e-12)


def test_token_ids_tuple_inputs_and_reproducibility():
    embedding = nn.Embedding(12, 3).double()

    def model(tokens, scale):
        return (embedding(tokens).sum(dim=(1, 2)) * scale.squeeze(1))[:, None].tanh()

    tokens = torch.randint(1, 12, (3, 6))
    scale = torch.rand(3, 1, dtype=torch.float64) + 0.5
    sampler = ShapleySampling(model)
    first = sampler.attribute((tokens, scale), baselines=(0, 1.0), n_samples=6, generator=seeded(9))
    again = sampler.attribute((tokens, scale), baselines=(0, 1.0), n_samples=6, generator=seeded(9))
    assert isinstance(first, tuple) and first[0].shape == tokens.shape
    assert first[0].dtype == torch.get_default_dtype()
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 6))
def test_sampling_estimates_are_efficient_and_give_dummies_zero(seed, n):
    d = 5
    generator = seeded(seed)
    table = torch.randn(2**d, dtype=torch.float64, generator=generator)
    # feature 4 is a dummy: v(S + 4) = v(S)
    table = table.view(2, 2**4)
    table[1] = table[0]
    model = TableGame(table.reshape(-1))
    x = torch.ones(2, d, dtype=torch.float64)
    got = ShapleySampling(model).attribute(x, n_samples=n, generator=generator)
    total = model.value(range(d)) - model.value([])
    torch.testing.assert_close(got.sum(1), torch.full((2,), total, dtype=torch.float64))
    assert torch.all(got[:, 4] == 0)


# ---------------------------------------------------------------- KernelSHAP


def test_kernel_shap_is_efficient_and_converges():
    model = softplus_mlp(8, seed=6)
    x = torch.randn(12, 8, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x, target=1)
    with torch.no_grad():
        gap = model(x)[:, 1] - model(torch.zeros(1, 8, dtype=torch.float64))[:, 1]
    errors = []
    for n in (16, 64, 2048):
        got = PairedKernelShap(model).attribute(x, target=1, n_samples=n, generator=seeded(0))
        torch.testing.assert_close(got.sum(1), gap, rtol=1e-9, atol=1e-12)
        errors.append((got - exact).abs().sum(1).mean().item())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.02 * exact.abs().sum(1).mean().item()


def test_kernel_shap_is_exact_for_additive_games():
    weights = torch.randn(6, dtype=torch.float64)

    def model(x):
        return x @ weights

    x = torch.randn(3, 6, dtype=torch.float64)
    got = PairedKernelShap(model).attribute(x, n_samples=40, generator=seeded(0))
    # the default's kriging solves with a near-singular covariance: exact to round-off
    torch.testing.assert_close(got, x * weights, rtol=0, atol=1e-10)


def test_kernel_shap_of_a_table_game_matches_brute_force_at_large_budgets():
    d = 4
    table = torch.randn(2**d, dtype=torch.float64, generator=seeded(1))
    model = TableGame(table)
    got = PairedKernelShap(model).attribute(
        torch.ones(1, d, dtype=torch.float64), n_samples=40000, generator=seeded(2)
    )
    want = torch.tensor(brute_shapley(lambda s: model.value(s), d), dtype=torch.float64)
    torch.testing.assert_close(got[0], want, rtol=0, atol=0.03 * want.abs().max().item())


def test_kernel_shap_with_one_feature():
    model = softplus_mlp(1)
    x = torch.randn(2, 1, dtype=torch.float64)
    got = PairedKernelShap(model).attribute(x, target=0, n_samples=4)
    torch.testing.assert_close(got, ExactShapley(model).attribute(x, target=0))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_samples": 5, "return_uncertainty": True}, ValueError, "even.*use 6"),
        ({"n_samples": 0}, ValueError, "n_samples must be >= 1"),
        ({"n_samples": 1, "return_uncertainty": True}, ValueError, "at least two"),
        ({"n_samples": 2, "antithetic": True, "return_uncertainty": True}, ValueError, ">= 4"),
        ({"confidence": 1.5}, ValueError, "confidence must be strictly between"),
        ({"confidence": 0.0}, ValueError, "confidence must be strictly between"),
        ({"interval": "jackknife"}, ValueError, "interval"),
        ({"generator": 1}, TypeError, "torch.Generator"),
        ({"references": torch.zeros(3, 5)}, ValueError, "references"),
        ({"n_samples": 2**20}, ValueError, "coalitions per example"),
    ],
)
def test_sampling_bad_options_fail_before_any_model_call(kwargs, error, match):
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(error, match=match):
        ShapleySampling(model).attribute(torch.randn(2, 4, dtype=torch.float64), target=0, **kwargs)
    assert model.calls == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_samples": 0}, ValueError, "n_samples must be >= 1"),
        ({"n_samples": "many"}, TypeError, "n_samples must be an int"),
        ({"generator": "seed"}, TypeError, "torch.Generator"),
    ],
)
def test_kernel_bad_options_fail_before_any_model_call(kwargs, error, match):
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(error, match=match):
        PairedKernelShap(model).attribute(
            torch.randn(2, 4, dtype=torch.float64), target=0, **kwargs
        )
    assert model.calls == 0


def test_kernel_below_two_d_samples_warns_and_keeps_efficiency():
    # Captum's KernelShap runs n_samples=25 at d = 40; PairedKernelShap too, with a warning
    model = torch.nn.Linear(40, 1)
    x = torch.randn(2, 40, generator=seeded(0))
    with pytest.warns(RuntimeWarning, match="n_samples=25 is below 2 d = 80"):
        phi = PairedKernelShap(model).attribute(x, target=0, n_samples=25, generator=seeded(1))
    gap = (model(x) - model(torch.zeros(1, 40)))[:, 0]
    torch.testing.assert_close(phi.sum(dim=1), gap.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{}, {"antithetic": False}, {"return_uncertainty": True}, {"references": "background"}],
)
def test_an_example_gets_the_same_explanation_in_any_batch(options):
    """Orderings (and sampled references) are shared by the batch, as in Captum: an
    example alone, or in a permuted batch, gets its row of the batch (issue 23)."""
    from captum_graphshap import ShapleySampling

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(7, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    x = torch.randn(4, 7, dtype=torch.float64)
    options = dict(options)
    if options.get("references") == "background":
        options["references"] = torch.randn(5, 7, dtype=torch.float64)

    def run(inputs):
        result = ShapleySampling(net).attribute(
            inputs, target=0, n_samples=8, generator=torch.Generator().manual_seed(3), **options
        )
        return torch.cat(result, dim=1) if isinstance(result, tuple) else result

    batch = run(x)
    for i in range(4):
        torch.testing.assert_close(run(x[i : i + 1])[0], batch[i], rtol=0, atol=1e-12)
    order = [2, 0, 3, 1]
    torch.testing.assert_close(run(x[order]), batch[order], rtol=0, atol=1e-12)
