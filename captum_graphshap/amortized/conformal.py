"""Split-conformal intervals for the explainer's values, and spot checks.

Scores are ``|phi_hat - label| / s(x)`` on held-out examples, per feature
value, with ``s(x)`` the root mean square of the example's predicted values
(so intervals widen with the explanation's scale). The labels are noisy,
unbiased estimates, not exact values: ``|phi_hat - label|`` holds the
explainer's error *and* the label's noise, so the intervals are calibrated
for covering the labels and are conservative for covering the exact values
(the noise, independent of the explainer's error, only widens them).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: keeps the scale of an all-zero explanation positive
SCALE_FLOOR = 1e-8
#: half-width of a dummy's interval (a feature at its baseline), relative to the
#: example's scale: its value is exactly 0, but a reference computed by sums over
#: coalitions carries rounding (``ExactShapley`` gave up to 2e-13 on the digits CNN
#: of benchmarks/amortized.py), which zero-width intervals excluded: a quarter of
#: those digits' values, so the intervals covered 0.70 of the exact values at 0.9
DUMMY_HALF_WIDTH = 1e-6


def example_scale(phi: Tensor) -> Tensor:
    """``(N, 1, K)``: root mean square over features of each example's values, floored."""
    return phi.pow(2).mean(dim=1, keepdim=True).sqrt().clamp_min(SCALE_FLOOR)


def half_widths(phi: Tensor, active: Tensor, quantile: float) -> Tensor:
    """``(N, d, K)`` the intervals' half-widths: the conformal ``quantile`` times the
    example's scale for ``active`` ``(N, d)`` features, :data:`DUMMY_HALF_WIDTH` times
    it for the others."""
    relative = torch.where(active.bool(), quantile, DUMMY_HALF_WIDTH).to(phi.dtype)
    return relative.unsqueeze(-1) * example_scale(phi)


def conformal_quantile(scores: Tensor, confidence: float) -> float:
    """The split-conformal quantile: the ``ceil((n + 1) confidence)``-th smallest score.

    Infinite when there are too few scores for the level.
    """
    flat = scores.reshape(-1).sort().values
    rank = math.ceil((flat.numel() + 1) * confidence)
    if rank > flat.numel():
        return math.inf
    return float(flat[rank - 1])


def residual_scores(phi: Tensor, labels: Tensor) -> Tensor:
    """``(N, d, K)`` scaled absolute residuals of held-out predictions."""
    return (phi - labels).abs() / example_scale(phi)


def example_scores(phi: Tensor, estimates: Tensor) -> Tensor:
    """``(N,)`` root mean square disagreement of each example (spot checks).

    Scaled by the geometric mean of the two explanations' scales, not by the
    explainer's alone: an explainer a hundred times too large off the
    training data then scores about ten, not about one (its own scale would
    hide it), and one near zero where the estimate is not scores high too.
    """
    scale = (example_scale(phi) * example_scale(estimates)).sqrt()
    return ((phi - estimates) / scale).pow(2).mean(dim=(1, 2)).sqrt()


def spot_threshold(held_out_scores: Tensor, label_budget: int, spot_budget: int) -> float:
    """The largest per-example disagreement a spot check at ``spot_budget`` tolerates.

    The held-out examples' largest score against labels at ``label_budget``,
    widened by ``sqrt(label_budget / spot_budget)`` when the spot check's
    estimate is noisier (fewer evaluations: its noise grows about as
    ``1 / sqrt(budget)``). An example above it disagrees with the explainer
    more than any held-out example did.
    """
    widen = math.sqrt(max(1.0, label_budget / spot_budget))
    return float(held_out_scores.max()) * widen
