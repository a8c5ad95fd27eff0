"""What the demo measures: method names, its result record, its dependency error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

INSTALL_DEMO = 'pip install "captum-graphshap[demo]"'

# Method names: keys of every dict in DemoResult, in table order.
C_SHAPLEY_2 = "C-Shapley, pixels, k=2"
C_SHAPLEY_1 = "C-Shapley, pixels, k=1"
L_SHAPLEY = "L-Shapley, 2x2 patches, k=1"
CAPTUM_SAMPLING = "Captum ShapleyValueSampling"
CAPTUM_KERNEL = "Captum KernelShap"
EXACT_PATCHES = "Exact Shapley, 4x4 patches"
RANDOM = "random ranking"
METHODS = (C_SHAPLEY_2, C_SHAPLEY_1, L_SHAPLEY, CAPTUM_SAMPLING, CAPTUM_KERNEL, EXACT_PATCHES)

SENTENCES = (
    "The acting was wonderful and the story moving, though the ending dragged.",
    "A dull, clumsy film with a plot that makes no sense.",
)


class DemoDependencyError(RuntimeError):
    """An optional dependency the demo needs is missing."""


@dataclass
class DemoResult:
    """What :func:`run_demo` measured; every dict is keyed by method name.

    Attributes:
        report:
            Path of the HTML report.
        accuracy:
            Test accuracy of the CNN on the held-out digits.
        examples, labels, predicted:
            The explained digits ``(N, 1, 8, 8)``, their true and predicted classes.
        attributions:
            ``(N, 1, 8, 8)`` attributions of the log-probability of the predicted
            class, per method (``RANDOM`` holds the random scores).
        evaluations:
            Model evaluations (forward rows) per explained digit, per method.
        seconds:
            Wall time of each method on all ``N`` digits.
        fractions, curves, auc:
            The masking experiment: fractions of pixels masked, ``(N, F)`` change
            in log-odds of the predicted class, and its mean area (lower is better).
        exact_total, exact_gain:
            Per digit, the sum of the exact Shapley values of the 4 patches and
            ``log p(x) - log p(0)`` of the predicted class: equal (efficiency).
        text:
            ``(words, attributions, label)`` per sentence, or None when skipped.
        wall_seconds, notes:
            Total wall time; sections skipped and why.
        context, weights:
            The L-/C-Shapley options used.
    """

    report: Path
    accuracy: float
    examples: Tensor
    labels: Tensor
    predicted: Tensor
    attributions: dict[str, Tensor]
    evaluations: dict[str, float]
    seconds: dict[str, float]
    fractions: tuple[float, ...]
    curves: dict[str, Tensor]
    auc: dict[str, float]
    exact_total: Tensor
    exact_gain: Tensor
    text: list[tuple[list[str], list[float], str]] | None = None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    context: str = "baseline"
    weights: str = "myerson"
