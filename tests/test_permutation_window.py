"""ShapleySampling spends the rest of ``budget=`` on one ordering's window, without bias.

Whole orderings cost ``d - 1`` rows; the rows left buy the contributions of
one more ordering (and its reverse, with antithetic pairs) at a uniform
cyclic window of positions (``plans/permutation_window.py``).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from captum_graphshap import ShapleySampling
from captum_graphshap.plans.permutation_window import WindowDraw, window_estimate

from .reference import brute_shapley


def game_values(d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(2**d, generator=g, dtype=torch.float64)
    table[0] = 0.0

    def value(rows: torch.Tensor) -> torch.Tensor:
        codes = (rows.long() * (2 ** torch.arange(d))).sum(-1)
        return table[codes]

    return table, value


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_window_term_is_unbiased_over_every_ordering_and_start(paired, length):
    """Given whole orderings' mean m, E[estimate] = m + (t/d)(phi - m) / (K + t/d):
    averaged over all orderings and starts, exactly (so unbiased when m is)."""
    d, samples = 5, 2
    table, value = game_values(d, seed=length + 7 * paired)
    phi = torch.tensor(
        brute_shapley(lambda s: float(table[sum(2**i for i in s)]), d), dtype=torch.float64
    )
    whole = torch.randn(1, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    whole += (phi.sum() - whole.sum()) / d  # an efficient whole-orderings mean
    ends = torch.tensor([[0.0, float(table[-1])]], dtype=torch.float64)
    total = torch.zeros(1, d, dtype=torch.float64)
    count = 0
    for order in itertools.permutations(range(d)):
        ranks = torch.empty(d, dtype=torch.long)
        ranks[list(order)] = torch.arange(d)
        for start in range(d):
            window = WindowDraw(ranks, start, length, paired)
            values = value(window.coalitions())[None]
            estimate = window_estimate(whole, samples, window, values, ends)
            torch.testing.assert_close(estimate.sum(), ends[0, 1], atol=1e-12, rtol=0)
            total += estimate
            count += 1
    share = length / d
    expected = whole + share * (phi - whole) / (samples + share)
    torch.testing.assert_close(total / count, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize(("d", "budget"), [(100, 151), (100, 250), (30, 45), (12, 51)])
def test_budget_is_spent_and_additive_models_stay_exact(d, budget, antithetic):
    weights = torch.linspace(-2.0, 3.0, d, dtype=torch.float64)
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    for model, exact in (
        (lambda z: (z * weights).sum(1, keepdim=True), x * weights),
        (lambda z: torch.tanh(z @ weights[:, None] / d), None),
    ):
        result = ShapleySampling(model).attribute(
            x,
            target=0,
            budget=budget,
            antithetic=antithetic,
            generator=torch.Generator().manual_seed(0),
            return_evaluations=True,
        )
        assert (result.n_evaluations <= budget).all()
        assert (result.n_evaluations >= budget - 1).all()  # 101 of 151 at d = 100 before
        gap = model(x)[:, 0] - model(torch.zeros_like(x))[:, 0]
        torch.testing.assert_close(result.attributions.sum(1), gap, atol=1e-10, rtol=0)
        if exact is not None:
            torch.testing.assert_close(result.attributions, exact, atol=1e-10, rtol=0)


def test_the_window_comes_from_the_generator_and_not_from_the_batch():
    d = 40
    model = torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(4, d)

    def run(inputs):
        return ShapleySampling(model).attribute(
            inputs, target=0, budget=70, generator=torch.Generator().manual_seed(3)
        )

    together = run(x)
    alone = torch.cat([run(x[i : i + 1]) for i in range(4)])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=0)
    assert not torch.equal(
        run(x),
        ShapleySampling(model).attribute(
            x, target=0, budget=70, generator=torch.Generator().manual_seed(4)
        ),
    )
