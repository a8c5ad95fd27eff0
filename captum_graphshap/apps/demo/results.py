"""What the demo measures: method names, its result record, its dependency error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor, nn

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


class CountingModel(nn.Module):
    """Wraps a model and counts the rows (examples) it is evaluated on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.rows = 0

    def forward(self, x: Tensor) -> Tensor:
        self.rows += x.shape[0]
        return self.model(x)


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
        equal_cost:
            The headline: each estimator's error against exact Shapley values
            at equal evaluations (:mod:`.accuracy`), or None when not run.
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
    locality: LocalityCheck | None = None
    equal_cost: list[EqualCostRow] | None = None


@dataclass
class EqualCostRow:
    """One estimator of the headline: evaluations per digit, seconds, relative error."""

    name: str
    evaluations: float
    seconds: float
    error: float


@dataclass
class LocalityCheck:
    """The demo's second setting: the same digits and score, a CNN whose units see 5x5 pixels.

    Attributes:
        accuracy:
            Test accuracy of that CNN (no pooling: its logits are sums over 5x5 windows).
        evaluations:
            Model evaluations per digit of C-Shapley k=1, which Captum's
            ShapleyValueSampling also gets.
        captum_evaluations:
            Model evaluations per digit ShapleyValueSampling made (whole
            permutations, so a little more or less than ``evaluations``).
        c_shapley, captum:
            ``(N,)`` masking-curve area per digit of C-Shapley k=1 and of Captum's
            ShapleyValueSampling on that CNN (lower is better).
    """

    accuracy: float
    evaluations: float
    c_shapley: Tensor
    captum: Tensor
    captum_evaluations: float = float("nan")


def paired_difference(ours: Tensor, theirs: Tensor) -> tuple[float, float, int]:
    """Mean of ``ours - theirs`` per example, its standard error, and how often ours is lower."""
    difference = (ours - theirs).double()
    n = difference.numel()
    error = float(difference.std()) / n**0.5 if n > 1 else float("nan")
    return float(difference.mean()), error, int((difference < 0).sum())


def positive_share(attributions: Tensor) -> float:
    """Mean fraction of the pixels with a positive attribution (the ones masking removes first)."""
    flat = attributions.flatten(1)
    return float((flat > 1e-9 * flat.abs().amax(1, keepdim=True)).double().mean())


def why_ranking(result: DemoResult) -> list[str]:
    """Paragraphs that say why the masking table ranks the methods as it does.

    The reasons were measured by ``benchmarks/method_study.py``; the guide's
    page ``docs/guide/which_method.md`` gives the tables.
    """
    auc = result.auc
    c1, svs = auc[C_SHAPLEY_1], auc[CAPTUM_SAMPLING]
    verdict = "beats" if c1 < svs else "loses to"
    share = {name: positive_share(result.attributions[name]) for name in METHODS}
    blank = float((result.examples.flatten(1) == 0).double().mean())
    paragraphs = [
        f"Why the ranking looks as it does. Here C-Shapley k=1 ({c1:.2f}) {verdict} "
        f"Captum's ShapleyValueSampling ({svs:.2f}) at about the same cost "
        f"({result.evaluations[C_SHAPLEY_1]:.0f} and "
        f"{result.evaluations[CAPTUM_SAMPLING]:.0f} evaluations per digit). The samplers "
        "estimate the Shapley values of the digit; C-Shapley k=1 computes something else: "
        "each pixel's contribution within the connected sets of its 5-pixel neighbourhood, "
        "with the rest of the digit absent (context='baseline') or present "
        "(context='input'). That is the Shapley value only when pixels interact with their "
        "neighbours alone. This CNN max-pools and then mixes the whole 8x8 digit in every "
        "unit, so pixels interact across the digit.",
        "The explained score is the log-probability. For a confident prediction it "
        "saturates: while most of the digit is present, one pixel more or less changes it "
        "little, so context='input' sees small, noisy effects, and context='baseline' "
        "measures what a lone stroke says about the class, not what the digit needs.",
        f"Every curve flattens early: {blank:.0%} of the pixels are blank (0, the baseline), "
        "so masking them changes nothing, and masking removes the highest-ranked pixels "
        "first: once the positively attributed pixels are gone ("
        + ", ".join(f"{share[name]:.0%} for {name}" for name in (C_SHAPLEY_1, CAPTUM_SAMPLING))
        + "), the rest are blank or count against the class.",
    ]
    check = result.locality
    if check is not None:
        mean, error, wins = paired_difference(check.c_shapley, check.captum)
        if mean < 0 and -mean > 2 * error:
            holds = "holds"
        elif mean < 0:
            holds = "holds only within noise (less than 2 standard errors)"
        else:
            holds = "does not hold"
        paragraphs.append(
            "Beside it, the same digits, score and budget on a CNN without pooling "
            f"(test accuracy {check.accuracy:.1%}; each unit sees a 5x5 window, so pixels "
            f"interact locally): C-Shapley k=1 {float(check.c_shapley.mean()):.2f}, Captum's "
            f"ShapleyValueSampling {float(check.captum.mean()):.2f} "
            f"({check.evaluations:.0f} and {check.captum_evaluations:.0f} evaluations per "
            f"digit; difference {mean:+.2f} "
            f"± {error:.2f}, C-Shapley lower on {wins} of {check.c_shapley.numel()} digits): "
            f"the papers' claim {holds} there."
        )
    paragraphs.append(
        "What to use: for the Shapley values of a model like this one, a permutation "
        "sampler (ShapleySampling(antithetic=True, budget=...) or Captum's "
        "ShapleyValueSampling) is closer at equal cost. L-Shapley with k at least the "
        "model's interaction range (text CNNs, patches) is exact and deterministic; "
        "C-Shapley is the cheapest deterministic ranking, good when interactions are local. "
        "The measured tables are in docs/guide/which_method.md "
        "(benchmarks/method_study.py)."
    )
    return paragraphs
