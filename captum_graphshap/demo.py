"""The ``graphshap demo`` experiment.

It reproduces the image experiment of L-Shapley/C-Shapley
(Chen et al., ICLR 2019) on scikit-learn's 8x8 digits: it trains a small CNN,
explains held-out digits with C-Shapley, L-Shapley, exact Shapley and Captum's
samplers at the same number of model evaluations, scores every explanation
with the masking experiment (Fig. 3) and writes an HTML report.
"""

from __future__ import annotations

import contextlib
import html
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .metrics import DEFAULT_FRACTIONS, curve_area, masking_curve

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

    Attributes
    ----------
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


class CountingModel(nn.Module):
    """Wraps a model and counts the rows (examples) it is evaluated on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.rows = 0

    def forward(self, x: Tensor) -> Tensor:
        self.rows += x.shape[0]
        return self.model(x)


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread inside the block.

    For batches of a few dozen 8x8 images, threads only add synchronisation:
    on a busy 2-core machine, training took 35 s on 2 threads and 0.5 s on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def load_digits_tensors() -> tuple[Tensor, Tensor]:
    """scikit-learn's digits as ``(1797, 1, 8, 8)`` floats in [0, 1] and labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:
        raise DemoDependencyError(
            f"graphshap demo needs scikit-learn for its digits data: {INSTALL_DEMO}"
        ) from error
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32)[:, None]
    return images, torch.tensor(digits.target, dtype=torch.long)


def make_cnn() -> nn.Sequential:
    """A small CNN: cheap enough to run ~50k perturbed digits a second on a CPU."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def train_cnn(
    images: Tensor, labels: Tensor, seed: int, epochs: int
) -> tuple[nn.Module, Tensor, float]:
    """Train on 80 % of the digits; return the model, the test indices, test accuracy."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    order = torch.randperm(len(images), generator=generator)
    n_train = int(0.8 * len(images))
    train, test = order[:n_train], order[n_train:]
    model = make_cnn()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    with single_thread():
        for _ in range(epochs):
            batches = train[torch.randperm(n_train, generator=generator)].split(64)
            for batch in batches:
                optimiser.zero_grad()
                loss = nn.functional.cross_entropy(model(images[batch]), labels[batch])
                loss.backward()
                optimiser.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(images[test]).argmax(1) == labels[test]).float().mean())
    return model, test, accuracy


def run_demo(
    out_dir: Path,
    seed: int = 0,
    quick: bool = False,
    text: bool = True,
    *,
    context: str = "baseline",
    weights: str = "myerson",
) -> DemoResult:
    """Train, explain, score and report; see the module docstring.

    Parameters
    ----------
    out_dir:
        Folder for ``report.html`` and its figures (created if needed).
    seed:
        Seeds the data split, training, the samplers and the random ranking.
    quick:
        Fewer epochs and digits, no text section: a smoke test in seconds.
    text:
        Run the text section when the ``text`` extra is installed.
    context, weights:
        Passed to L-/C-Shapley (``weights`` to C-Shapley only): ``context=
        "input"`` keeps the pixels outside a neighbourhood, as the authors'
        released code does; ``weights="paper"`` applies Eq. (6) literally.

    Returns
    -------
    DemoResult
        The numbers behind the report.
    """
    started = time.perf_counter()
    images, labels = load_digits_tensors()
    model, test, accuracy = train_cnn(images, labels, seed, epochs=6 if quick else 15)
    print(
        f"trained a CNN on {len(images) - len(test)} digits (8x8): test accuracy "
        f"{accuracy:.1%} on {len(test)} held-out digits ({time.perf_counter() - started:.1f} s)"
    )
    for parameter in model.parameters():
        parameter.requires_grad_(False)

    n_explain = 4 if quick else 10
    chosen = test[:n_explain]
    examples, true_labels = images[chosen], labels[chosen]
    with torch.no_grad():
        predicted = model(examples).argmax(1)
    print(
        f"explaining {n_explain} held-out digits: the log-probability of the predicted "
        f"class, absent pixels set to 0 (no ink); L-/C-Shapley with context={context!r}, "
        f"C-Shapley weights={weights!r}.\n"
    )
    attributions, evaluations, seconds = explain_digits(
        model, examples, predicted, seed, context=context, weights=weights
    )

    # Efficiency of exact Shapley over the 4 patches: the values sum to
    # log p(x) - log p(0). Each patch's value is repeated on its 16 pixels.
    exact_total = attributions[EXACT_PATCHES][:, 0, ::4, ::4].sum(dim=(1, 2)).double()
    with torch.no_grad():
        log_p = torch.log_softmax(model(torch.cat([examples, torch.zeros_like(examples[:1])])), 1)
    rows = torch.arange(n_explain)
    exact_gain = (log_p[rows, predicted] - log_p[-1, predicted]).double()

    generator = torch.Generator().manual_seed(seed)
    attributions[RANDOM] = torch.rand(examples.shape, generator=generator)
    fractions = DEFAULT_FRACTIONS
    pixel_mask = torch.arange(64).reshape(1, 1, 8, 8)
    with single_thread():  # 11 calls of N digits each: small batches
        curves = {
            name: masking_curve(
                model,
                examples,
                attr,
                feature_mask=pixel_mask,
                baselines=0.0,
                target=predicted,
                fractions=fractions,
            )
            for name, attr in attributions.items()
        }
    auc = {name: curve_area(curve, fractions) for name, curve in curves.items()}
    _print_table(evaluations, seconds, auc)
    print(f"\n{_budget_note(evaluations)}")
    print(
        "masking AUC: area under the change in log-odds of the predicted class as the "
        f"top 0-{fractions[-1]:.0%} of pixels (by attribution) are set to 0; lower = the "
        "ranking finds the evidence sooner."
    )
    print(
        "efficiency of exact Shapley on 4 patches: max |sum - (log p(x) - log p(0))| = "
        f"{float((exact_total - exact_gain).abs().max()):.1e}"
    )

    text_rows = None
    notes: list[str] = []
    if quick or not text:
        notes.append("text section skipped (--quick / --no-text).")
    else:
        text_rows, note = text_section(SENTENCES)
        if note:
            notes.append(note)
    for note in notes:
        print(f"\n{note}")

    out_dir.mkdir(parents=True, exist_ok=True)
    heatmaps = out_dir / "heatmaps.png"
    masking = out_dir / "masking.png"
    shown = min(4, n_explain)
    plot_heatmaps(heatmaps, examples[:shown], predicted[:shown], attributions)
    plot_curves(masking, fractions, curves)
    report = out_dir / "report.html"
    wall = time.perf_counter() - started
    result = DemoResult(
        report=report,
        accuracy=accuracy,
        examples=examples,
        labels=true_labels,
        predicted=predicted,
        attributions=attributions,
        evaluations=evaluations,
        seconds=seconds,
        fractions=tuple(fractions),
        curves=curves,
        auc=auc,
        exact_total=exact_total,
        exact_gain=exact_gain,
        text=text_rows,
        wall_seconds=wall,
        notes=notes,
        context=context,
        weights=weights,
    )
    write_report(result, heatmaps.name, masking.name)
    print(f"\nwrote {report} ({wall:.1f} s in all)")
    return result


def explain_digits(
    model: nn.Module,
    examples: Tensor,
    predicted: Tensor,
    seed: int,
    *,
    context: str = "baseline",
    weights: str = "myerson",
) -> tuple[dict[str, Tensor], dict[str, float], dict[str, float]]:
    """Attributions, model evaluations per digit and seconds, per method."""
    from captum.attr import KernelShap, ShapleyValueSampling

    from . import CShapley, ExactShapley, GridGraph, LShapley

    counter = CountingModel(model)
    n = examples.shape[0]
    attributions: dict[str, Tensor] = {}
    evaluations: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def log_prob(x: Tensor) -> Tensor:
        # Captum's samplers explain an output column: give them the same score.
        return torch.log_softmax(counter(x), dim=1)

    def timed(name: str, run: Callable[[], Tensor | tuple[Tensor, ...]]) -> None:
        counter.rows = 0
        t0 = time.perf_counter()
        out = run()
        seconds[name] = time.perf_counter() - t0
        evaluations[name] = counter.rows / n
        attributions[name] = (out if isinstance(out, Tensor) else out[0]).detach().float()

    common: dict[str, Any] = {"baselines": 0.0, "target": predicted, "value": "log_prob"}
    local = {**common, "context": context}
    for name, k in ((C_SHAPLEY_2, 2), (C_SHAPLEY_1, 1)):
        timed(name, partial(CShapley(counter).attribute, examples, k=k, weights=weights, **local))
    patch_graph, patch_mask = GridGraph.patches(8, 8, 2)
    timed(
        L_SHAPLEY,
        lambda: LShapley(counter).attribute(
            examples, feature_mask=patch_mask[None, None], graph=patch_graph, k=1, **local
        ),
    )

    # Captum's samplers get C-Shapley k=1's budget: k=2's ~52k evaluations per
    # digit would cost Captum's KernelShap (one Python step per sample) minutes.
    budget = evaluations[C_SHAPLEY_1]
    pixel_mask = torch.arange(64).reshape(1, 1, 8, 8)
    # ShapleyValueSampling evaluates 1 + 64 rows per permutation.
    permutations = max(1, round((budget - 1) / 64))
    torch.manual_seed(seed)
    with single_thread():  # batches of 64 x N rows (see single_thread)
        timed(
            CAPTUM_SAMPLING,
            lambda: ShapleyValueSampling(log_prob).attribute(
                examples,
                baselines=0.0,
                target=predicted,
                feature_mask=pixel_mask,
                n_samples=permutations,
                perturbations_per_eval=64,
            ),
        )

    def kernel_shap() -> Tensor:
        # One digit at a time, as Captum recommends (it fits one regression per
        # digit either way); one model evaluation per sample.
        explainer = KernelShap(log_prob)
        rows = [
            explainer.attribute(
                examples[i : i + 1],
                baselines=0.0,
                target=int(predicted[i]),
                feature_mask=pixel_mask,
                n_samples=max(2, round(budget)),
                perturbations_per_eval=256,
            )
            for i in range(n)
        ]
        return torch.cat(rows)

    torch.manual_seed(seed)
    with single_thread():  # KernelShap evaluates small batches (see single_thread)
        timed(CAPTUM_KERNEL, kernel_shap)
    _, quadrant_mask = GridGraph.patches(8, 8, 4)
    timed(
        EXACT_PATCHES,
        lambda: ExactShapley(counter).attribute(
            examples, feature_mask=quadrant_mask[None, None], **common
        ),
    )
    return attributions, evaluations, seconds


def text_section(
    sentences: Sequence[str],
) -> tuple[list[tuple[list[str], list[float], str]] | None, str | None]:
    """Explain sentences with C-Shapley word by word, if the ``text`` extra is there.

    Returns the ``(words, attributions, label)`` rows, or None and a note
    saying why the section was skipped.
    """
    try:
        from . import text as text_module

        explanations = text_module.explain_sentiment(list(sentences), k=2, method="c_shapley")
    except ImportError as error:
        hint = 'pip install "captum-graphshap[text]"'
        reason = str(error) if "[text]" in str(error) else f"{error}; install it with: {hint}"
        return None, f"text section skipped: {reason}"
    rows = []
    print("\nC-Shapley (k=2) on words, zero-shot MiniLM sentiment (log-probability):")
    for item in explanations:
        words, attr, label = _unpack_explanation(item)
        rows.append((words, attr, label))
        print(f"  [{label}] " + " ".join(f"{w}({a:+.2f})" for w, a in zip(words, attr)))
    return rows, None


def _unpack_explanation(item: Any) -> tuple[list[str], list[float], str]:
    # captum_graphshap.text returns objects with these attributes; a plain
    # (words, attributions, label) tuple is accepted too.
    if hasattr(item, "words"):
        words, attr, label = item.words, item.attributions, item.label
    else:
        words, attr, label = item
    values = attr.tolist() if isinstance(attr, Tensor) else [float(a) for a in attr]
    return [str(w) for w in words], [float(a) for a in values], str(label)


def _budget_note(evaluations: dict[str, float]) -> str:
    budget, wide = evaluations[C_SHAPLEY_1], evaluations[C_SHAPLEY_2]
    return (
        f"Captum's samplers get C-Shapley k=1's budget, {budget:.0f} model evaluations per "
        f"digit; matching k=2's {wide:.0f} would make Captum's KernelShap, which draws its "
        f"samples one at a time in Python, {wide / budget:.0f}x slower."
    )


def _print_table(
    evaluations: dict[str, float], seconds: dict[str, float], auc: dict[str, float]
) -> None:
    best = min(auc, key=auc.__getitem__)
    print(f"{'method':<30} {'evals/digit':>11} {'time':>8} {'masking AUC':>12}")
    for name, area in auc.items():
        evals = f"{evaluations[name]:.0f}" if name in evaluations else "-"
        took = f"{seconds[name]:.2f} s" if name in seconds else "-"
        mark = "  <- best" if name == best else ""
        print(f"{name:<30} {evals:>11} {took:>8} {area:>12.3f}{mark}")


def _figure(rows: int, cols: int, size: tuple[float, float]) -> tuple[Any, Any]:
    # A bare Figure renders with Agg and never touches pyplot or a display.
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    return figure, figure.subplots(rows, cols, squeeze=False)


def plot_heatmaps(
    path: Path, examples: Tensor, predicted: Tensor, attributions: dict[str, Tensor]
) -> None:
    """Digits (rows) by method (columns), drawn with Captum's visualisation."""
    from captum.attr import visualization

    from .viz import to_hwc

    names = [name for name in attributions if name != RANDOM]
    n = examples.shape[0]
    figure, axes = _figure(n, len(names) + 1, (1.6 * (len(names) + 1), 1.75 * n + 0.6))
    for i in range(n):
        image = to_hwc(examples, i)
        # Captum draws a one-channel image in colour; a digit reads better in grey.
        axes[i][0].imshow(image[:, :, 0], cmap="gray", vmin=0, vmax=1)
        axes[i][0].set_xticks([])
        axes[i][0].set_yticks([])
        axes[i][0].set_title(("digit\n" if i == 0 else "") + f"predicted {int(predicted[i])}")
        for j, name in enumerate(names, start=1):
            with warnings.catch_warnings():
                # Captum warns when a map is ~0 everywhere (normalising by ~0).
                warnings.simplefilter("ignore", UserWarning)
                visualization.visualize_image_attr(
                    to_hwc(attributions[name], i),
                    image,
                    method="heat_map",
                    sign="all",
                    plt_fig_axis=(figure, axes[i][j]),
                    use_pyplot=False,
                    title=name.replace(", ", "\n") if i == 0 else None,
                )
    for row in axes:
        for axis in row:
            axis.title.set_fontsize(7)
    figure.savefig(path, dpi=110)


def plot_curves(path: Path, fractions: Sequence[float], curves: dict[str, Tensor]) -> None:
    """Mean masking curve per method."""
    figure, axes = _figure(1, 1, (6.4, 4.2))
    axis = axes[0][0]
    percent = [100 * f for f in fractions]
    for name, curve in curves.items():
        style = "--" if name == RANDOM else "-"
        axis.plot(percent, curve.mean(0).tolist(), style, marker=".", label=name)
    axis.set_xlabel("pixels masked, top-ranked first (%)")
    axis.set_ylabel("change in log-odds of predicted class")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.savefig(path, dpi=110)


def write_report(result: DemoResult, heatmaps: str, masking: str) -> None:
    """The HTML report: the table, the figures (files next to it) and the text."""
    best = min(result.auc, key=result.auc.__getitem__)
    rows = []
    for name, area in result.auc.items():
        evals = f"{result.evaluations[name]:.0f}" if name in result.evaluations else "–"
        took = f"{result.seconds[name]:.2f} s" if name in result.seconds else "–"
        weight = ' style="font-weight:bold"' if name == best else ""
        rows.append(
            f"<tr{weight}><td>{html.escape(name)}</td><td>{evals}</td><td>{took}</td>"
            f"<td>{area:.3f}</td></tr>"
        )
    efficiency = float((result.exact_total - result.exact_gain).abs().max())
    text_html = ""
    if result.text:
        lines = []
        for words, attr, label in result.text:
            scale = max((abs(a) for a in attr), default=0.0) or 1.0
            spans = " ".join(
                f'<span style="background:{_colour(a / scale)}" title="{a:+.3f}">'
                f"{html.escape(w)}</span>"
                for w, a in zip(words, attr)
            )
            lines.append(f"<p><b>{html.escape(label)}</b>: {spans}</p>")
        text_html = (
            "<h2>Text: C-Shapley (k=2) on words</h2><p>Zero-shot MiniLM sentiment; "
            "green supports the predicted label, red opposes it.</p>" + "".join(lines)
        )
    notes = "".join(f"<p><i>{html.escape(note)}</i></p>" for note in result.notes)
    n = result.examples.shape[0]
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>captum-graphshap demo</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3em .6em}}
td:not(:first-child){{text-align:right}}</style></head><body>
<h1>captum-graphshap demo: L-/C-Shapley on digits</h1>
<p>A small CNN trained on scikit-learn's 8x8 digits (test accuracy
{result.accuracy:.1%}). {n} held-out digits are explained: each method
attributes the <b>log-probability of the predicted class</b>; absent pixels are
set to 0 (no ink). L-/C-Shapley use <code>context="{result.context}"</code>,
C-Shapley <code>weights="{result.weights}"</code>.
{html.escape(_budget_note(result.evaluations))} Training, Captum's samplers and
the masking run on one CPU thread (small batches); the package's methods on
torch's default.</p>
<h2>Masking experiment</h2>
<p>Pixels are masked (set to 0) in the order of each method's attributions and
the change in the <b>log-odds</b> of the predicted class is recorded, from 0 to
{result.fractions[-1]:.0%} of the pixels. The AUC is the area under that
curve, averaged over the digits: <b>lower is better</b> (the ranking finds the
evidence sooner).</p>
<table><tr><th>method</th><th>model evaluations / digit</th><th>time ({n} digits)</th>
<th>masking AUC</th></tr>{"".join(rows)}</table>
<p>Exact Shapley over the four 4x4 patches is efficient: its values sum to
log p(x) − log p(0) within {efficiency:.1e}.</p>
<img src="{html.escape(masking)}" alt="masking curves">
<h2>Attributions</h2>
<p>Green: evidence for the predicted class; red: against (Captum's
<code>visualize_image_attr</code>, each map scaled on its own).</p>
<img src="{html.escape(heatmaps)}" alt="heatmaps" style="max-width:100%">
{text_html}{notes}
</body></html>
"""
    result.report.write_text(page, encoding="utf-8")


def _colour(weight: float) -> str:
    # Green for positive, red for negative, white at 0 (as Captum's maps).
    level = int(255 * (1 - min(abs(weight), 1.0)))
    return f"rgb({level},255,{level})" if weight >= 0 else f"rgb(255,{level},{level})"
