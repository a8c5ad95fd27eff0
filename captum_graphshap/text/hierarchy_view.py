"""Owen values of text on its hierarchy: nested spans shaded by each node's value.

A node's value is the sum of its leaves' Winter values, which is the node's
Shapley value in the game of its siblings (the quotient-game property): so
a sentence, a word and a token can be read off one explanation.
:func:`visualize_hierarchy` writes nested HTML ``<span>`` boxes (a sentence
box holds word boxes, which hold tokens), each shaded in Captum's colours
(red negative, green positive) by its value over the largest absolute node
value; :func:`plot_hierarchy` draws the same as an icicle plot with
matplotlib, one row per level, for documents and notebooks.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..graphs import Hierarchy

__all__ = ["node_values", "plot_hierarchy", "visualize_hierarchy"]


def node_values(attributions: Tensor | Sequence[float], hierarchy: Hierarchy) -> Tensor:
    """``(num_nodes,)`` float64: each node's value, the sum of its leaves' attributions."""
    values = torch.as_tensor(attributions, dtype=torch.float64).detach().cpu().reshape(-1)
    if values.numel() != hierarchy.num_features:
        raise ValueError(
            f"attributions has {values.numel()} values but hierarchy has "
            f"{hierarchy.num_features} features; pass one value per feature id."
        )
    ordered = torch.cat([torch.zeros(1, dtype=torch.float64), values[list(hierarchy.leaves)]])
    cumulative = ordered.cumsum(0)
    start = torch.from_numpy(hierarchy.start.copy())
    return cumulative[start + torch.from_numpy(hierarchy.size.copy())] - cumulative[start]


def _colour(value: float) -> str:
    """Captum's text colours: red for negative, green for positive, white at 0."""
    if value < 0:
        return f"hsl(0, 75%, {100 - int(40 * min(1.0, -value))}%)"
    return f"hsl(120, 75%, {100 - int(50 * min(1.0, value))}%)"


def visualize_hierarchy(
    tokens: Sequence[str],
    attributions: Tensor | Sequence[float],
    hierarchy: Hierarchy,
    *,
    joiner: str = " ",
) -> str:
    """Nested HTML spans of ``tokens`` (feature ``i`` is ``tokens[i]``), shaded by node value.

    Args:
        tokens: the text of each feature id.
        attributions: one value per feature id (e.g. ``OwenValue``'s on ``hierarchy``).
        hierarchy: the tree the values were computed on.
        joiner: put between the children of a node.

    Returns:
        str: an HTML fragment; each box's ``title`` gives its value.
    """
    if len(tokens) != hierarchy.num_features:
        raise ValueError(
            f"tokens has {len(tokens)} entries but hierarchy has {hierarchy.num_features} "
            "features; pass the text of each feature id."
        )
    values = node_values(attributions, hierarchy)
    scale = float(values.abs().max()) or 1.0
    kids = hierarchy.children
    built: list[str] = [""] * hierarchy.num_nodes
    for node in range(hierarchy.num_nodes - 1, -1, -1):
        value = float(values[node])
        if kids[node]:
            inner = joiner.join(built[c] for c in kids[node])
            style = "border: 1px solid #999; border-radius: 3px; padding: 1px 2px; margin: 1px"
        else:
            inner = html.escape(str(tokens[int(hierarchy.leaf_id[node])]))
            style = "padding: 0 1px"
        built[node] = (
            f'<span title="{value:.4g}" style="display: inline-block; {style}; '
            f'background-color: {_colour(value / scale)}">{inner}</span>'
        )
    return f'<div style="line-height: 2.2">{built[0]}</div>'


def plot_hierarchy(
    tokens: Sequence[str],
    attributions: Tensor | Sequence[float],
    hierarchy: Hierarchy,
    ax: Any = None,
) -> Any:
    """An icicle plot: one row per tree level, each node a bar over its tokens, shaded by value.

    Returns the matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    values = node_values(attributions, hierarchy)
    scale = float(values.abs().max()) or 1.0
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(tokens)), 0.5 * (hierarchy.depth + 2)))
    cmap = plt.get_cmap("RdYlGn")
    norm = TwoSlopeNorm(vmin=-scale, vcenter=0.0, vmax=scale)
    for node in range(hierarchy.num_nodes):
        level = int(hierarchy.level[node])
        start, size = int(hierarchy.start[node]), int(hierarchy.size[node])
        ax.barh(
            -level,
            size,
            left=start,
            height=0.9,
            color=cmap(norm(float(values[node]))),
            edgecolor="white",
        )
    ax.set_xticks([i + 0.5 for i in range(len(tokens))])
    ax.set_xticklabels([str(tokens[i]) for i in hierarchy.leaves], rotation=90)
    ax.set_yticks([-lv for lv in range(hierarchy.depth + 1)])
    ax.set_yticklabels([f"level {lv}" for lv in range(hierarchy.depth + 1)])
    ax.set_xlim(0, len(tokens))
    ax.figure.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="node value")
    return ax
