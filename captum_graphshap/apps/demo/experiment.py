"""The ``graphshap demo`` experiment.

It trains a small CNN on scikit-learn's 8x8 digits, measures first each
estimator's error against exact Shapley values at equal evaluations (ours and
Captum's, :mod:`.accuracy`), then reproduces the image experiment of
L-Shapley/C-Shapley (Chen et al., ICLR 2019): it explains held-out digits with
C-Shapley, L-Shapley, exact Shapley and Captum's samplers at the same number
of model evaluations, scores every explanation with the masking experiment
(Fig. 3) and writes an HTML report.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...metrics import DEFAULT_FRACTIONS, curve_area, masking_curve
from .accuracy import accuracy_at_equal_cost, print_equal_cost
from .report import budget_note, plot_curves, plot_heatmaps, print_table, write_report
from .results import (
    C_SHAPLEY_1,
    C_SHAPLEY_2,
    CAPTUM_KERNEL,
    CAPTUM_SAMPLING,
    EXACT_PATCHES,
    INSTALL_DEMO,
    L_SHAPLEY,
    RANDOM,
    SENTENCES,
    CountingModel,
    DemoDependencyError,
    DemoResult,
    LocalityCheck,
    why_ranking,
)


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
    model = _fit(make_cnn(), images, labels, train, epochs, generator)
    return model, test, _accuracy(model, images, labels, test)


def _fit(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    train: Tensor,
    epochs: int,
    generator: torch.Generator,
) -> nn.Module:
    """Adam on mini-batches of 64 of the ``train`` digits; the model frozen in eval mode."""
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    with single_thread():
        for _ in range(epochs):
            for batch in train[torch.randperm(len(train), generator=generator)].split(64):
                optimiser.zero_grad()
                nn.functional.cross_entropy(model(images[batch]), labels[batch]).backward()
                optimiser.step()
    model.eval()
    return model


def _accuracy(model: nn.Module, images: Tensor, labels: Tensor, test: Tensor) -> float:
    with torch.no_grad():
        return float((model(images[test]).argmax(1) == labels[test]).float().mean())


def _predict(model: nn.Module, examples: Tensor) -> Tensor:
    """The predicted classes; the model's parameters stop requiring gradients from here on."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    with torch.no_grad():
        return model(examples).argmax(1)


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

    Args:
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

    Returns:
        DemoResult
            The numbers behind the report.
    """
    started = time.perf_counter()
    epochs = 6 if quick else 15
    images, labels = load_digits_tensors()
    model, test, accuracy = train_cnn(images, labels, seed, epochs=epochs)
    print(
        f"trained a CNN on {len(images) - len(test)} digits (8x8): test accuracy "
        f"{accuracy:.1%} on {len(test)} held-out digits ({time.perf_counter() - started:.1f} s)"
    )
    chosen = test[: 4 if quick else 10]
    examples = images[chosen]
    predicted = _predict(model, examples)
    print(
        f"explaining {len(chosen)} held-out digits: the log-probability of the predicted "
        f"class, absent pixels set to 0 (no ink); L-/C-Shapley with context={context!r}, "
        f"C-Shapley weights={weights!r}.\n"
    )
    with single_thread():  # the headline's timings: every estimator on one thread
        equal_cost = accuracy_at_equal_cost(model, examples, predicted, seed)
    print_equal_cost(equal_cost, len(chosen))
    print()
    attributions, evaluations, seconds = explain_digits(
        model, examples, predicted, seed, context=context, weights=weights
    )
    exact_total, exact_gain = _exact_efficiency(model, examples, predicted, attributions)
    attributions[RANDOM] = torch.rand(examples.shape, generator=torch.Generator().manual_seed(seed))
    with single_thread():  # 11 calls of N digits each: small batches
        curves = _masking_curves(model, examples, predicted, attributions)
    auc = {name: curve_area(curve, DEFAULT_FRACTIONS) for name, curve in curves.items()}
    _print_scores(evaluations, seconds, auc, float((exact_total - exact_gain).abs().max()))
    result = DemoResult(
        report=out_dir / "report.html",
        accuracy=accuracy,
        examples=examples,
        labels=labels[chosen],
        predicted=predicted,
        attributions=attributions,
        evaluations=evaluations,
        seconds=seconds,
        fractions=DEFAULT_FRACTIONS,
        curves=curves,
        auc=auc,
        exact_total=exact_total,
        exact_gain=exact_gain,
        context=context,
        weights=weights,
        locality=locality_check(images, labels, test, chosen, seed, epochs, context=context),
        equal_cost=equal_cost,
    )
    result.text, result.notes = _text_rows(quick or not text)
    _write_outputs(result, out_dir, started)
    return result


def _exact_efficiency(
    model: nn.Module, examples: Tensor, predicted: Tensor, attributions: dict[str, Tensor]
) -> tuple[Tensor, Tensor]:
    """Exact Shapley's sum over the 4 patches and ``log p(x) - log p(0)``: equal (efficiency).

    Each patch's value is repeated on its 16 pixels: one pixel per patch is summed.
    """
    exact_total = attributions[EXACT_PATCHES][:, 0, ::4, ::4].sum(dim=(1, 2)).double()
    with torch.no_grad():
        log_p = torch.log_softmax(model(torch.cat([examples, torch.zeros_like(examples[:1])])), 1)
    rows = torch.arange(examples.shape[0])
    return exact_total, (log_p[rows, predicted] - log_p[-1, predicted]).double()


def _masking_curves(
    model: nn.Module, examples: Tensor, predicted: Tensor, attributions: dict[str, Tensor]
) -> dict[str, Tensor]:
    """Each method's masking curve: pixels set to 0 (no ink), the predicted class's log-odds."""
    pixel_mask = torch.arange(64).reshape(1, 1, 8, 8)
    return {
        name: masking_curve(
            model,
            examples,
            attr,
            feature_mask=pixel_mask,
            baselines=0.0,
            target=predicted,
            fractions=DEFAULT_FRACTIONS,
        )
        for name, attr in attributions.items()
    }


def _print_scores(
    evaluations: dict[str, float], seconds: dict[str, float], auc: dict[str, float], gap: float
) -> None:
    """The console table, the budget note and what the scores mean."""
    print_table(evaluations, seconds, auc)
    print(f"\n{budget_note(evaluations)}")
    print(
        "masking AUC: area under the change in log-odds of the predicted class as the "
        f"top 0-{DEFAULT_FRACTIONS[-1]:.0%} of pixels (by attribution) are set to 0; lower = "
        "the ranking finds the evidence sooner."
    )
    print(
        f"efficiency of exact Shapley on 4 patches: max |sum - (log p(x) - log p(0))| = {gap:.1e}"
    )


def _text_rows(
    skip: bool,
) -> tuple[list[tuple[list[str], list[float], str]] | None, list[str]]:
    """The text section's rows (None when skipped) and the notes saying why, printed."""
    text_rows, notes = None, []
    if skip:
        notes.append("text section skipped (--quick / --no-text).")
    else:
        text_rows, note = text_section(SENTENCES)
        if note:
            notes.append(note)
    for note in notes:
        print(f"\n{note}")
    return text_rows, notes


def _write_outputs(result: DemoResult, out_dir: Path, started: float) -> None:
    """The figures and the HTML report; ``result.wall_seconds`` set once they are drawn."""
    out_dir.mkdir(parents=True, exist_ok=True)
    heatmaps = out_dir / "heatmaps.png"
    masking = out_dir / "masking.png"
    shown = min(4, result.examples.shape[0])
    plot_heatmaps(heatmaps, result.examples[:shown], result.predicted[:shown], result.attributions)
    plot_curves(masking, result.fractions, result.curves)
    result.wall_seconds = time.perf_counter() - started
    for paragraph in why_ranking(result):
        print(f"\n{paragraph}")
    write_report(result, heatmaps.name, masking.name, shown)
    print(f"\nwrote {result.report} ({result.wall_seconds:.1f} s in all)")


def make_local_cnn() -> nn.Sequential:
    """A CNN without pooling: each unit sees 5x5 pixels and the logits sum over those windows."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


def locality_check(
    images: Tensor,
    labels: Tensor,
    test: Tensor,
    chosen: Tensor,
    seed: int,
    epochs: int,
    *,
    context: str = "baseline",
) -> LocalityCheck:
    """The demo's experiment on a CNN whose pixels interact locally (see ``LocalityCheck``).

    Trains :func:`make_local_cnn` on the same split and scores C-Shapley k=1
    (with ``context``) and Captum's ShapleyValueSampling at C-Shapley's
    evaluations per digit, both explaining the log-probability of the
    predicted class, by the masking experiment.
    """

    from ... import CShapley

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    train = torch.tensor(sorted(set(range(len(images))) - set(test.tolist())))
    model = _fit(make_local_cnn(), images, labels, train, epochs, generator)
    accuracy = _accuracy(model, images, labels, test)
    counter = CountingModel(model)
    examples = images[chosen]
    predicted = _predict(model, examples)
    c_shapley = CShapley(counter).attribute(
        examples,
        baselines=0.0,
        target=predicted,
        k=1,
        context=context,
        value="log_prob",
        show_progress=False,
    )
    budget = counter.rows / len(examples)
    torch.manual_seed(seed)
    counter.rows = 0
    with single_thread():
        captum = _captum_sampling(
            lambda x: torch.log_softmax(counter(x), dim=1), examples, predicted, budget
        )
        captum_evaluations = counter.rows / len(examples)
        curves = _masking_curves(model, examples, predicted, {"c": c_shapley, "captum": captum})
    fractions = torch.tensor(DEFAULT_FRACTIONS, dtype=torch.float64)
    areas = [torch.trapezoid(curve, fractions, dim=1) for curve in curves.values()]
    return LocalityCheck(accuracy, budget, areas[0], areas[1], captum_evaluations)


def _captum_sampling(
    log_prob: Callable[[Tensor], Tensor], examples: Tensor, predicted: Tensor, budget: float
) -> Tensor:
    """Captum's ShapleyValueSampling on pixels with about ``budget`` evaluations per digit.

    It evaluates 1 + 64 rows per permutation, in batches of 64 x N rows.
    """
    from captum.attr import ShapleyValueSampling

    return ShapleyValueSampling(log_prob).attribute(
        examples,
        baselines=0.0,
        target=predicted,
        feature_mask=torch.arange(64).reshape(1, 1, 8, 8),
        n_samples=max(1, round((budget - 1) / 64)),
        perturbations_per_eval=64,
    )


def _captum_kernel(
    log_prob: Callable[[Tensor], Tensor], examples: Tensor, predicted: Tensor, budget: float
) -> Tensor:
    """Captum's KernelShap on pixels, ``budget`` samples per digit.

    One digit at a time, as Captum recommends (it fits one regression per
    digit either way); one model evaluation per sample.
    """
    from captum.attr import KernelShap

    explainer = KernelShap(log_prob)
    rows = [
        explainer.attribute(
            examples[i : i + 1],
            baselines=0.0,
            target=int(predicted[i]),
            feature_mask=torch.arange(64).reshape(1, 1, 8, 8),
            n_samples=max(2, round(budget)),
            perturbations_per_eval=256,
        )
        for i in range(examples.shape[0])
    ]
    return torch.cat(rows)


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
    from ... import CShapley, ExactShapley, GridGraph, LShapley

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
    for name, sampler in ((CAPTUM_SAMPLING, _captum_sampling), (CAPTUM_KERNEL, _captum_kernel)):
        torch.manual_seed(seed)
        with single_thread():  # small batches (see single_thread)
            timed(name, partial(sampler, log_prob, examples, predicted, budget))
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
        from .. import minilm

        explanations = minilm.explain_sentiment(list(sentences), k=2, method="c_shapley")
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
    # captum_graphshap.apps.minilm returns objects with these attributes; a plain
    # (words, attributions, label) tuple is accepted too.
    if hasattr(item, "words"):
        words, attr, label = item.words, item.attributions, item.label
    else:
        words, attr, label = item
    values = attr.tolist() if isinstance(attr, Tensor) else [float(a) for a in attr]
    return [str(w) for w in words], [float(a) for a in values], str(label)
