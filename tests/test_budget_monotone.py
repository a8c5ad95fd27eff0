"""More budget is never worse: the defaults' error and BayesShap's interval width
fall (within noise) from the fewest pairs to 4,096 evaluations, across every
handover of ``estimator="auto"``.

Errors are relative L1 against :class:`ExactShapley`, averaged over seeds and
examples; a larger budget may exceed a smaller one's by at most 15%.
"""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from torch import nn

from captum_graphshap import BayesShap, ExactShapley, PairedKernelShap

SEEDS = (0, 1, 2)
EXAMPLES = 4
TOLERANCE = 1.15


def budgets_for(d: int) -> list[int]:
    """From the fewest pairs (2 d + 2) through auto's handovers to 4,096, below 2^d."""
    steps = [2 * d + 2, 3 * d, 4 * d, 8 * d, 256, 512, 1026, 1100, 2048, 4096]
    return sorted({b for b in steps if b < 2**d})


def mlp(d: int, activation: type[nn.Module], seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(d, 48), activation(), nn.Linear(48, 48), activation(), nn.Linear(48, 1)
    )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.8)
    return model.double().eval()


@functools.cache
def errors_and_widths(d: int, activation: type[nn.Module], bayes: bool) -> dict[int, tuple]:
    """Mean relative error (and mean half-width) per budget."""
    out: dict[int, list[tuple[float, float]]] = {}
    for seed in SEEDS:
        model = mlp(d, activation, seed)
        g = torch.Generator().manual_seed(100 + seed)
        x = torch.randn(EXAMPLES, d, dtype=torch.float64, generator=g)
        exact = ExactShapley(model).attribute(x, target=0)
        scale = exact.abs().sum(1)
        for budget in budgets_for(d):
            g = torch.Generator().manual_seed(seed)
            if bayes:
                phi, half = BayesShap(model).attribute(
                    x, target=0, budget=budget, generator=g, return_uncertainty=True
                )
                width = float(half.mean())
            else:
                phi = PairedKernelShap(model).attribute(x, target=0, budget=budget, generator=g)
                width = 0.0
            error = float(((phi - exact).abs().sum(1) / scale).mean())
            out.setdefault(budget, []).append((error, width))
    return {
        b: tuple(sum(v[k] for v in rows) / len(rows) for k in range(2)) for b, rows in out.items()
    }


@pytest.mark.parametrize("bayes", [False, True], ids=["PairedKernelShap", "BayesShap"])
@pytest.mark.parametrize("activation", [nn.SiLU, nn.ReLU], ids=["smooth", "relu"])
@pytest.mark.parametrize("d", [10, 14])
def test_a_larger_budget_is_never_worse(d: int, activation: type[nn.Module], bayes: bool) -> None:
    table = errors_and_widths(d, activation, bayes)
    budgets = sorted(table)
    for smaller, larger in itertools.pairwise(budgets):
        assert table[larger][0] <= TOLERANCE * table[smaller][0], (smaller, larger, table)


@pytest.mark.parametrize("activation", [nn.SiLU, nn.ReLU], ids=["smooth", "relu"])
def test_bayes_shap_intervals_narrow_with_the_budget(activation: type[nn.Module]) -> None:
    table = errors_and_widths(14, activation, True)
    budgets = sorted(table)
    for smaller, larger in itertools.pairwise(budgets):
        assert table[larger][1] <= TOLERANCE * table[smaller][1], (smaller, larger, table)
