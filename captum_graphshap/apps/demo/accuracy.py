"""The demo's headline: accuracy against exact Shapley values at equal evaluations.

The masking experiment scores rankings; this section scores estimates. On 16
features (2x2 patches of the 8x8 digits) the exact Shapley values are
affordable (``2^16`` coalitions per digit, ``ExactShapley``), so each
estimator is given the same number of model evaluations per digit and its
error against them is measured: the library's ``PairedKernelShap`` (its
default estimator) and ``ShapleySampling`` (antithetic), Captum's
``KernelShap`` and ``ShapleyValueSampling``. All explain the log-probability
of the predicted class with absent patches set to 0, on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .results import CountingModel, EqualCostRow

#: Model evaluations per digit every estimator gets.
EQUAL_BUDGET = 256
#: Names of the rows, in table order.
OURS_KERNEL = "PairedKernelShap (ours)"
OURS_SAMPLING = "ShapleySampling, antithetic (ours)"
THEIRS_KERNEL = "Captum KernelShap"
THEIRS_SAMPLING = "Captum ShapleyValueSampling"


def patch_values(attributions: Tensor) -> Tensor:
    """``(N, 16)``: one value per 2x2 patch (the methods repeat it on the patch's pixels)."""
    return attributions[:, 0, ::2, ::2].reshape(attributions.shape[0], -1).double()


def relative_error(estimate: Tensor, exact: Tensor) -> float:
    """Mean over digits of ``||estimate - exact|| / ||exact||`` over the 16 patches."""
    ours, truth = patch_values(estimate), patch_values(exact)
    return float(((ours - truth).norm(dim=1) / truth.norm(dim=1).clamp_min(1e-12)).mean())


def accuracy_at_equal_cost(
    model: nn.Module, examples: Tensor, predicted: Tensor, seed: int, budget: int = EQUAL_BUDGET
) -> list[EqualCostRow]:
    """Each estimator at ``budget`` evaluations per digit against the exact values."""
    from captum.attr import KernelShap, ShapleyValueSampling

    from ... import ExactShapley, GridGraph, PairedKernelShap, ShapleySampling

    counter = CountingModel(model)
    n = examples.shape[0]
    _, mask = GridGraph.patches(8, 8, 2)
    mask = mask[None, None]
    ours: dict[str, Any] = {
        "baselines": 0.0, "target": predicted, "feature_mask": mask, "value": "log_prob"
    }  # fmt: skip

    def log_prob(x: Tensor) -> Tensor:  # Captum explains an output column: the same score
        return torch.log_softmax(counter(x), dim=1)

    def generator() -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    def captum_kernel() -> Tensor:  # one digit at a time, as Captum recommends
        torch.manual_seed(seed)
        explainer = KernelShap(log_prob)
        return torch.cat(
            [
                explainer.attribute(
                    examples[i : i + 1],
                    baselines=0.0,
                    target=int(predicted[i]),
                    feature_mask=mask,
                    n_samples=budget - 2,
                    perturbations_per_eval=64,
                )
                for i in range(n)
            ]
        )

    def captum_sampling() -> Tensor:  # 16 + 1 evaluations per permutation
        torch.manual_seed(seed)
        return ShapleyValueSampling(log_prob).attribute(
            examples, baselines=0.0, target=predicted, feature_mask=mask,
            n_samples=(budget - 1) // 16, perturbations_per_eval=16,
        )  # fmt: skip

    runs: dict[str, Callable[[], Tensor]] = {
        OURS_KERNEL: lambda: PairedKernelShap(counter).attribute(
            examples, budget=budget, generator=generator(), **ours
        ),
        OURS_SAMPLING: lambda: ShapleySampling(counter).attribute(
            examples, budget=budget, antithetic=True, generator=generator(), **ours
        ),
        THEIRS_KERNEL: captum_kernel,
        THEIRS_SAMPLING: captum_sampling,
    }
    with torch.no_grad():
        exact = ExactShapley(counter).attribute(examples, **ours).float()
    rows = []
    for name, run in runs.items():
        counter.rows = 0
        started = time.perf_counter()
        estimate = run()
        seconds = time.perf_counter() - started
        rows.append(
            EqualCostRow(name, counter.rows / n, seconds, relative_error(estimate.float(), exact))
        )
    return rows


def print_equal_cost(rows: list[EqualCostRow], digits: int) -> None:
    """The console table of :func:`accuracy_at_equal_cost`, the most accurate marked."""
    best = min(rows, key=lambda row: row.error)
    print(
        f"accuracy against exact Shapley values at equal cost ({digits} digits, 16 patches "
        "of 2x2 pixels, exact values over the 2^16 coalitions):"
    )
    print(f"{'method':<36} {'evals/digit':>11} {'time':>8} {'relative error':>15}")
    for row in rows:
        mark = "  <- most accurate" if row is best else ""
        print(
            f"{row.name:<36} {row.evaluations:>11.0f} {row.seconds:>6.2f} s "
            f"{row.error:>15.3f}{mark}"
        )
