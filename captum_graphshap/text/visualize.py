"""Word attributions as Captum's text visualisation (HTML)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover - typing only
    pass


def visualize_words(
    words: Sequence[str],
    attributions: Tensor | Sequence[float],
    label: str | int,
    probability: float | None = None,
    *,
    true_label: str | int | None = None,
    attribution_label: str | int | None = None,
    normalize: bool = True,
    legend: bool = True,
) -> str:
    """Captum's ``visualize_text`` table of one explanation, as an HTML string.

    Args:
        words:
            The explained words (or tokens).
        attributions:
            One value per word.
        label:
            The predicted label.
        probability:
            Its probability (shown next to it); None shows ``nan``.
        true_label:
            The true label if known; default the predicted one.
        attribution_label:
            The label the attributions explain; default ``label``.
        normalize:
            Divide by the largest absolute value: Captum colours values in
            ``[-1, 1]``, and log-probability attributions are often much smaller.
        legend:
            Show Captum's colour legend.

    Returns:
        str
            The HTML of :func:`captum.attr.visualization.visualize_text`. Without
            IPython, which ``visualize_text`` requires, the same table is built
            from Captum's own formatting helpers.
    """
    from captum.attr import visualization

    values = torch.as_tensor(attributions, dtype=torch.float64).detach().cpu().reshape(-1)
    if values.numel() != len(words):
        raise ValueError(
            f"attributions has {values.numel()} values but there are {len(words)} words; "
            "pass one value per word."
        )
    score = float(values.sum())
    if normalize and values.numel() and float(values.abs().max()) > 0:
        values = values / values.abs().max()
    record = visualization.VisualizationDataRecord(
        values,
        float("nan") if probability is None else float(probability),
        label,
        label if true_label is None else true_label,
        label if attribution_label is None else attribution_label,
        score,
        [str(w) for w in words],
        None,  # no convergence delta for Shapley methods
    )
    if getattr(visualization, "HAS_IPYTHON", False):
        return str(visualization.visualize_text([record], legend=legend).data)
    return _text_table(visualization, [record], legend)


def _text_table(visualization: Any, records: Sequence[Any], legend: bool) -> str:
    """The markup of Captum 0.9's ``visualize_text``, built without IPython."""
    dom = ["<table width: 100%>"]
    rows = [
        "<tr><th>True Label</th>"
        "<th>Predicted Label</th>"
        "<th>Attribution Label</th>"
        "<th>Attribution Score</th>"
        "<th>Word Importance</th>"
    ]
    for record in records:
        rows.append(
            "".join(
                [
                    "<tr>",
                    visualization.format_classname(record.true_class),
                    visualization.format_classname(f"{record.pred_class} ({record.pred_prob:.2f})"),
                    visualization.format_classname(record.attr_class),
                    visualization.format_classname(f"{record.attr_score:.2f}"),
                    visualization.format_word_importances(
                        record.raw_input_ids, record.word_attributions
                    ),
                    "<tr>",
                ]
            )
        )
    if legend:
        dom.append(
            '<div style="border-top: 1px solid; margin-top: 5px; \
            padding-top: 5px; display: inline-block">'
        )
        dom.append("<b>Legend: </b>")
        # Captum's colours of -1, 0 and 1 (its private _get_color); the tests
        # check this table against visualize_text itself.
        colours = ["hsl(0, 75%, 60%)", "hsl(0, 75%, 100%)", "hsl(120, 75%, 50%)"]
        for colour, name in zip(colours, ["Negative", "Neutral", "Positive"]):
            dom.append(
                f'<span style="display: inline-block; width: 10px; height: 10px; \
                border: 1px solid; background-color: \
                {colour}"></span> {name}  '
            )
        dom.append("</div>")
    dom.append("".join(rows))
    dom.append("</table>")
    return "".join(dom)
