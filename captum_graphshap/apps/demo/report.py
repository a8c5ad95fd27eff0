"""The demo's console table, figures and HTML report."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from .results import (
    C_SHAPLEY_1,
    C_SHAPLEY_2,
    CAPTUM_KERNEL,
    CAPTUM_SAMPLING,
    EXACT_PATCHES,
    L_SHAPLEY,
    RANDOM,
    DemoResult,
    why_ranking,
)

#: Pixels per feature of the patch methods: their maps are drawn per pixel (a
#: patch's value spread evenly over its pixels), so that one colour scale
#: compares them with the pixel methods (a 4x4 patch's value is the
#: contribution of 16 pixels at once).
PIXELS_PER_FEATURE = {L_SHAPLEY: 4, EXACT_PATCHES: 16}
#: Diverging colour map of the heatmaps: ColorBrewer's red-white-blue, which
#: readers with red-green colour blindness tell apart (Captum's default is
#: red-white-green). Blue is evidence for the predicted class, red against.
DIVERGING_CMAP = "RdBu"
#: The same map's ends for the HTML word colours (negative, positive).
AGAINST_RGB, FOR_RGB = (178, 24, 43), (33, 102, 172)


def budget_note(evaluations: dict[str, float]) -> str:
    # The figures are the counted ones of this run (the table's), not the budget
    # asked for: ShapleyValueSampling spends whole permutations.
    budget, wide = evaluations[C_SHAPLEY_1], evaluations[C_SHAPLEY_2]
    return (
        f"Captum's samplers get C-Shapley k=1's budget of {budget:.0f} model evaluations per "
        f"digit: ShapleyValueSampling, which spends whole permutations of 64 rows, used "
        f"{evaluations[CAPTUM_SAMPLING]:.0f}, KernelShap {evaluations[CAPTUM_KERNEL]:.0f}. "
        f"Matching k=2's {wide:.0f} would make Captum's KernelShap, which draws its samples "
        f"one at a time in Python, {wide / budget:.0f}x slower."
    )


def print_table(
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
    path: Path,
    examples: Tensor,
    predicted: Tensor,
    attributions: dict[str, Tensor],
    pixels_per_feature: dict[str, int] | None = None,
) -> None:
    """Digits (rows) by method (columns), one symmetric colour scale per row.

    In a row every method's map uses the same scale, ``[-m, m]`` with ``m``
    the largest absolute value of the row, shown by the row's colour bar:
    colours compare across methods, and white is exactly 0. Blue is evidence
    for the predicted class, red against it (:data:`DIVERGING_CMAP`). Maps are
    drawn per pixel: a method whose features are patches
    (``pixels_per_feature``, default :data:`PIXELS_PER_FEATURE`) has each
    patch's value divided by its pixels, so every map sums to its method's
    total attribution.
    """
    spread = PIXELS_PER_FEATURE if pixels_per_feature is None else pixels_per_feature
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    from ...viz import to_hwc

    cmap = DIVERGING_CMAP
    names = [name for name in attributions if name != RANDOM]
    n = examples.shape[0]
    # Drawn at the size it is shown (the report's column, ~950 px at 110 dpi), with
    # text of 9 pt and more: a wider figure scaled down by the browser made the
    # colour bars' ticks about 6 px tall.
    figure, axes = _figure(n, len(names) + 1, (8.6, 1.35 * n + 1.2))
    for i in range(n):
        image = to_hwc(examples, i)
        axes[i][0].imshow(image[:, :, 0], cmap="gray", vmin=0, vmax=1)
        axes[i][0].set_title(("digit\n" if i == 0 else "") + f"predicted {int(predicted[i])}")
        maps = [to_hwc(attributions[name], i).sum(axis=2) / spread.get(name, 1) for name in names]
        largest = max(float(abs(m).max()) for m in maps) or 1.0
        norm = Normalize(vmin=-largest, vmax=largest)
        drawn = None
        for j, (name, heat) in enumerate(zip(names, maps), start=1):
            drawn = axes[i][j].imshow(heat, cmap=cmap, norm=norm)
            if i == 0:
                axes[i][j].set_title(_column_title(name))
        bar = figure.colorbar(drawn, ax=list(axes[i][1:]), shrink=0.95, aspect=10, pad=0.015)
        bar.ax.tick_params(labelsize=9)
        bar.locator = MaxNLocator(5, symmetric=True)
        bar.update_ticks()
    for row in axes:
        for axis in row:
            axis.set_xticks([])
            axis.set_yticks([])
            axis.title.set_fontsize(9)
    figure.suptitle(
        "Attribution per pixel (colour bar: one scale per digit; blue for, red against)",
        fontsize=10,
    )
    figure.savefig(path, dpi=110)


def _column_title(name: str) -> str:
    # "Captum ShapleyValueSampling" is wider than its map at 9 pt: one word a line
    return name.replace(", ", "\n").replace("Captum ", "Captum\n").replace("ValueS", "Value-\nS")


def plot_curves(path: Path, fractions: Sequence[float], curves: dict[str, Tensor]) -> None:
    """Mean masking curve per method; the legend beside the axes, where it hides no curve."""
    figure, axes = _figure(1, 1, (8.6, 4.2))
    axis = axes[0][0]
    percent = [100 * f for f in fractions]
    for name, curve in curves.items():
        style = "--" if name == RANDOM else "-"
        axis.plot(percent, curve.mean(0).tolist(), style, marker=".", label=name)
    axis.set_title(
        "Masking experiment: pixels set to 0 in each method's order (lower = better)",
        fontsize=9,
    )
    axis.set_xlabel("pixels masked, top-ranked first (%)")
    axis.set_ylabel("change in log-odds of predicted class")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    figure.savefig(path, dpi=110)


def write_report(result: DemoResult, heatmaps: str, masking: str, shown: int | None = None) -> None:
    """The HTML report: one self-contained file, the figures embedded (base64 PNG).

    ``heatmaps`` and ``masking`` name the figure files written next to the
    report (:func:`plot_heatmaps`, :func:`plot_curves`; the heatmaps of the
    first ``shown`` digits, all without it); their bytes are embedded, so the page can be
    mailed or attached on its own.
    """
    folder = result.report.parent
    shown = result.examples.shape[0] if shown is None else shown
    page = (
        _PAGE_HEAD
        + _intro_html(result)
        + _equal_cost_html(result)
        + _masking_html(result, _embedded(folder / masking))
        + _ATTRIBUTIONS_HTML.format(
            heatmaps=_embedded(folder / heatmaps), shown=_shown_html(result, shown)
        )
        + _text_html(result.text)
        + "".join(f"<p><i>{html.escape(note)}</i></p>" for note in result.notes)
        + "\n</body></html>\n"
    )
    result.report.write_text(page, encoding="utf-8")


_PAGE_HEAD = """<!doctype html>
<html><head><meta charset="utf-8"><title>captum-graphshap demo</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 .8em}
img{max-width:100%}.wide{overflow-x:auto}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}
@media (max-width:40em){td,th{padding:.2em .3em;font-size:.85em}}
td:not(:first-child){text-align:right}
.word{display:inline-block;text-align:center;padding:.1em .25em;margin:.1em 0;line-height:1.2}
.word small{display:block;font-size:.75em;color:#333}
.scale{display:inline-block;width:10em;height:.8em;vertical-align:middle;border:1px solid #999;
background:linear-gradient(to right,rgb(178,24,43),rgb(255,255,255),rgb(33,102,172))}</style>
</head><body>
"""


def _intro_html(result: DemoResult) -> str:
    """The title and what was explained, how, and at what cost."""
    return f"""<h1>captum-graphshap demo: explaining a digits CNN</h1>
<p>A small CNN trained on scikit-learn's 8x8 digits (test accuracy
{result.accuracy:.1%}). {result.examples.shape[0]} held-out digits are explained: each method
attributes the <b>log-probability of the predicted class</b>; absent pixels are
set to 0 (no ink). L-/C-Shapley use <code>context="{result.context}"</code>,
C-Shapley <code>weights="{result.weights}"</code>. Training, the accuracy
section, Captum's samplers and the masking run on one CPU thread (small
batches); the package's methods in the masking section on torch's default.</p>
"""


def _equal_cost_html(result: DemoResult) -> str:
    """The headline: each estimator's error against exact Shapley values at equal cost."""
    rows = result.equal_cost
    if not rows:
        return ""
    best = min(rows, key=lambda row: row.error)
    bold = ' style="font-weight:bold"'
    cells = "".join(
        f"<tr{bold if row is best else ''}><td>{html.escape(row.name)}</td>"
        f"<td>{row.evaluations:.0f}</td><td>{row.seconds:.2f} s</td>"
        f"<td>{row.error:.3f}</td></tr>"
        for row in rows
    )
    n = result.examples.shape[0]
    return f"""<h2>Accuracy against exact Shapley values, at equal cost</h2>
<p>Where the library's advantage is measured: on 16 features (2x2 patches),
where the exact Shapley values are affordable (2<sup>16</sup> coalitions per
digit), every estimator gets the same number of model evaluations per digit
and is scored by its <b>relative error</b> against the exact values (lower is
better), averaged over the {n} digits; the time is for all {n} on one
thread. The most accurate is in bold.</p>
<div class="wide"><table><tr><th>method</th><th>model evaluations / digit</th>
<th>time ({n} digits)</th><th>relative error</th></tr>{cells}</table></div>
<p>Beyond accuracy, the library explains structure Captum has no class for:
graph-restricted values (Myerson, L-/C-Shapley), pairwise interactions
(Bivariate Shapley) and intervals (ShapleySampling, BayesShap); the masking
experiment below is the L-/C-Shapley paper's test of rankings.</p>
"""


def _masking_html(result: DemoResult, curves_uri: str) -> str:
    """The masking experiment: the table of methods, efficiency, curves and why the ranking."""
    n = result.examples.shape[0]
    efficiency = float((result.exact_total - result.exact_gain).abs().max())
    return f"""<h2>Masking experiment</h2>
<p>Pixels are masked (set to 0) in the order of each method's attributions and
the change in the <b>log-odds</b> of the predicted class is recorded, from 0 to
{result.fractions[-1]:.0%} of the pixels. The AUC is the area under that
curve, averaged over the digits: <b>lower is better</b> (the ranking finds the
evidence sooner).</p>
<p>{html.escape(budget_note(result.evaluations))}</p>
<p>The table has one row per method: how many times it ran the model per
explained digit (its cost), the wall-clock time it took for all {n} digits on
this machine, and its masking AUC. The best (lowest) AUC is in bold; the
random ranking is the reference a useful method must beat by a clear
margin.</p>
<div class="wide"><table><tr><th>method</th><th>model evaluations / digit</th>
<th>time ({n} digits)</th><th>masking AUC</th></tr>{"".join(_table_rows(result))}</table></div>
<p>Exact Shapley over the four 4x4 patches is efficient: its values sum to
log p(x) − log p(0) within {efficiency:.1e}.</p>
<img src="{curves_uri}" alt="masking curves" style="max-width:100%">
{"".join(f"<p>{html.escape(p)}</p>" for p in why_ranking(result))}
"""


def _table_rows(result: DemoResult) -> list[str]:
    """One ``<tr>`` per method: evaluations per digit, time, masking AUC (the best in bold)."""
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
    return rows


_ATTRIBUTIONS_HTML = """<h2>Attributions</h2>
<p>{shown}Blue: evidence for the predicted class; red: against; white: 0
(a red-blue map, readable with red-green colour blindness). The maps
of one digit (a row) share one symmetric colour scale, shown by the row's
colour bar, so a paler map has smaller attributions, not just a different
normalisation. Maps are per pixel: the patch methods' values are divided by
the pixels of their patch (4 for 2x2, 16 for 4x4), so each map adds up to its
method's total.</p>
<img src="{heatmaps}" alt="heatmaps" style="max-width:100%">
"""


def _shown_html(result: DemoResult, shown: int) -> str:
    """Which of the explained digits the figure shows (all, or the first few)."""
    n = result.examples.shape[0]
    if shown >= n:
        return f"All {n} explained digits are shown. "
    return (
        f"The first {shown} of the {n} explained digits are shown (the masking table "
        f"and curves above average all {n}). "
    )


def _text_html(text: list[tuple[list[str], list[float], str]] | None) -> str:
    """The text section: each sentence's words coloured by attribution, or nothing."""
    if not text:
        return ""
    lines = []
    for words, attr, label in text:
        scale = max((abs(a) for a in attr), default=0.0) or 1.0
        # each word's value is printed under it (not only in a tooltip), and the
        # sentence's colour scale is drawn beside its label
        spans = " ".join(
            f'<span class="word" style="background:{_colour(a / scale)}" title="{a:+.3f}">'
            f"{html.escape(w)}<small>{a:+.2f}</small></span>"
            for w, a in zip(words, attr)
        )
        lines.append(f"<p><b>{html.escape(label)}</b> {_scale_html(scale)}</p><p>{spans}</p>")
    return (
        "<h2>Text: C-Shapley (k=2) on words</h2><p>Zero-shot MiniLM sentiment. Under "
        "each word, its attribution of the log-probability of the predicted label: "
        "blue supports the label, red opposes it; each sentence's colours run from "
        "its largest negative to its largest positive value, as its scale shows.</p>"
        + "".join(lines)
    )


def _embedded(path: Path) -> str:
    """A ``data:`` URI of a PNG file, for an ``<img src>`` that needs no file."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _scale_html(scale: float) -> str:
    """The colour scale of :func:`_colour` from ``-scale`` to ``+scale``, labelled."""
    return (
        f'<small>scale: {-scale:+.2f} <span class="scale"></span> {scale:+.2f} (white: 0)</small>'
    )


def _colour(weight: float) -> str:
    # White at 0 to FOR_RGB (positive) or AGAINST_RGB (negative): the heatmaps' map.
    share = min(abs(weight), 1.0)
    end = FOR_RGB if weight >= 0 else AGAINST_RGB
    red, green, blue = (round(255 + (channel - 255) * share) for channel in end)
    return f"rgb({red},{green},{blue})"
