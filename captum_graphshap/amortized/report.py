"""The fit report: what the explainer costs and how accurate it is on held-out examples."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor


class FitReport(NamedTuple):
    """What :meth:`AmortizedShapley.fit` measured.

    Errors are on held-out examples the network did not train on: the mean
    over examples of the relative L2 error ``||phi_hat - phi|| / ||phi||``
    (per output), and the root mean square error per value.
    """

    #: training and held-out examples
    examples: int
    held_out: int
    #: model evaluations per example for labels, and the label estimator
    budget: int
    label_estimator: str
    epochs: int
    #: model evaluations of the fit: every training and held-out label
    evaluations: int
    #: RMS error against fresh unbiased estimates (their noise included)
    label_rmse: float
    #: the explainer's error against exact values (``d <= 16``) on ``exact_examples``
    #: held-out examples, else None
    exact_examples: int
    exact_error: float | None
    exact_rmse: float | None
    #: the labels' own error on those examples (what the explainer must beat)
    label_exact_error: float | None
    #: the per-example default (``PairedKernelShap(budget=budget)``) on the same examples
    default_exact_error: float | None
    #: model evaluations the exact values and the default's comparison cost
    check_evaluations: int
    #: the share of interval bounds covering the exact values (examples not used to calibrate)
    coverage: float | None
    #: examples beyond which explaining amortized costs fewer model evaluations than
    #: per-example at ``budget`` (the fit's evaluations over the ``budget - 2`` saved each)
    break_even_examples: int
    #: whether the explainer was at least as accurate as the per-example default at
    #: ``budget`` on the exact examples (None: not measured)
    beats_default: bool | None


def relative_error(estimate: Tensor, exact: Tensor) -> float:
    """Mean over examples and outputs of ``||estimate - exact|| / ||exact||`` (``(N, d, K)``)."""
    norm = exact.norm(dim=1).clamp_min(1e-12)
    return float(((estimate - exact).norm(dim=1) / norm).mean())


def rmse(estimate: Tensor, exact: Tensor) -> float:
    """Root mean square error per value."""
    return float((estimate - exact).pow(2).mean().sqrt())


def coverage(lower: Tensor, upper: Tensor, exact: Tensor) -> float:
    """The share of values inside their intervals."""
    return float(((lower <= exact) & (exact <= upper)).double().mean())


def break_even(evaluations: int, budget: int) -> int:
    """Examples at which ``evaluations + 2 n <= budget n`` (two evaluations each amortized)."""
    saved = max(1, budget - 2)
    return math.ceil(evaluations / saved)


def no_exact() -> dict[str, float | None]:
    """The report's exact-comparison fields when ``d > 16`` or none were asked for."""
    return {
        "exact_error": None,
        "exact_rmse": None,
        "label_exact_error": None,
        "default_exact_error": None,
        "coverage": None,
        "beats_default": None,
    }


def as_double(values: Tensor) -> Tensor:
    return values.to(torch.float64)
