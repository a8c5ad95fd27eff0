"""Plots of bivariate explanations: the directed graph, token strips and pixel overlays.

Matplotlib only (networkx draws through it); each function draws on the
``ax`` it is given, or on a new figure, and returns the axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import numpy.typing as npt
import torch
from matplotlib.axes import Axes
from torch import Tensor

from ..analysis import ExplanationGraph
from .images import to_hwc

#: Colour of features in no redundant group.
_NO_GROUP = (0.78, 0.78, 0.78, 1.0)


def group_colours(groups: Sequence[set[int]] | None) -> list[tuple[float, ...]]:
    """One RGBA colour per group (``tab10``, cycling)."""
    palette = plt.get_cmap("tab10")
    return [tuple(palette(index % 10)) for index in range(len(groups or []))]


def plot_explanation_graph(
    graph: ExplanationGraph,
    gamma: float | None = None,
    *,
    importance: str | Tensor | npt.ArrayLike = "pagerank",
    max_edges: int = 40,
    layout: str | Mapping[int, Any] = "circular",
    ax: Axes | None = None,
) -> Axes:
    """The directed explanation graph ``G`` (edge ``j -> i``, weight ``E2[i, j]``).

    Args:
        graph:
            The explanation graph of one example.
        gamma:
            Colour the mutually redundant groups of ``H_gamma`` (one colour a
            group, grey elsewhere); None: no groups.
        importance:
            Node sizes: ``"pagerank"`` (default), ``"shapley"`` (absolute
            univariate values, which the graph must hold) or ``d`` numbers.
        max_edges:
            Draw the strongest edges by ``|E2|`` (a complete graph on many
            features is unreadable); their width grows with ``|E2|``, red ones
            are negative.
        layout:
            ``"circular"``, ``"spring"`` (seeded) or a ``{node: (x, y)}`` mapping.
        ax:
            Axes to draw on; default a new figure.
    """
    ax = ax if ax is not None else plt.figure(figsize=(6, 6)).gca()
    g = graph.to_networkx()
    d = graph.num_features
    if isinstance(layout, str):
        if layout not in ("circular", "spring"):
            raise ValueError(f"layout must be 'circular', 'spring' or a mapping, got {layout!r}.")
        positions = nx.circular_layout(g) if layout == "circular" else nx.spring_layout(g, seed=0)
    else:
        positions = dict(layout)
    sizes = _node_sizes(graph, importance)
    colours: list[tuple[float, ...]] = [_NO_GROUP] * d
    if gamma is not None:
        groups = graph.mutually_redundant_groups(gamma)
        for colour, group in zip(group_colours(groups), groups):
            for feature in group:
                colours[feature] = colour
    edges = sorted(g.edges(data="weight"), key=lambda edge: -abs(edge[2]))[: max(0, max_edges)]
    strongest = max((abs(w) for _, _, w in edges), default=0.0) or 1.0
    nx.draw_networkx_nodes(g, positions, node_size=sizes, node_color=colours, ax=ax)
    nx.draw_networkx_labels(
        g, positions, labels=dict(enumerate(graph.feature_names)), font_size=8, ax=ax
    )
    if edges:
        nx.draw_networkx_edges(
            g,
            positions,
            edgelist=[(u, v) for u, v, _ in edges],
            width=[0.5 + 3.0 * abs(w) / strongest for _, _, w in edges],
            edge_color=["tab:red" if w < 0 else "0.25" for _, _, w in edges],
            node_size=sizes,
            arrows=True,
            arrowstyle="-|>",
            connectionstyle="arc3,rad=0.08",
            ax=ax,
        )
    ax.set_axis_off()
    return ax


def plot_token_strip(
    tokens: Sequence[str],
    *,
    scores: Tensor | npt.ArrayLike | None = None,
    groups: Sequence[set[int]] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Tokens in reading order, bars of their scores (e.g. PageRank), and the
    mutually redundant groups as coloured token labels and bars.

    Args:
        tokens:
            One label per feature (words or sub-word tokens).
        scores:
            One number per token; default none (bars of height 1).
        groups:
            Sets of token indices (``mutually_redundant_groups``).
    """
    count = len(tokens)
    heights = np.ones(count) if scores is None else _vector(scores, count, "scores")
    colours = _feature_colours(count, groups)
    ax = ax if ax is not None else plt.figure(figsize=(max(4.0, 0.35 * count), 2.5)).gca()
    ax.bar(np.arange(count), heights, color=colours, edgecolor="0.3", linewidth=0.5)
    ax.set_xticks(np.arange(count))
    ax.set_xticklabels([str(token) for token in tokens], rotation=90, fontsize=8)
    for label, colour in zip(ax.get_xticklabels(), colours):
        if colour != _NO_GROUP:
            label.set_bbox({"facecolor": colour, "edgecolor": "none", "pad": 1.0})
    ax.set_xlim(-0.6, count - 0.4)
    ax.set_ylabel("score" if scores is not None else "")
    ax.spines[["top", "right"]].set_visible(False)
    return ax


def plot_pixel_overlay(
    image: Tensor | npt.ArrayLike,
    feature_mask: Tensor | npt.ArrayLike,
    *,
    scores: Tensor | npt.ArrayLike | None = None,
    groups: Sequence[set[int]] | None = None,
    alpha: float = 0.55,
    ax: Axes | None = None,
) -> Axes:
    """An image with per-feature scores as a heat map and redundant groups tinted.

    Args:
        image:
            ``(H, W)``, ``(C, H, W)`` or ``(1, C, H, W)``; drawn in grey.
        feature_mask:
            ``(H, W)`` feature ids (broadcast shapes such as ``(1, 1, H, W)``
            are squeezed).
        scores:
            One number per feature (e.g. PageRank), drawn with ``viridis``.
        groups:
            Sets of feature ids, each tinted with its colour.
        alpha:
            Opacity of the overlays.
    """
    picture = to_hwc(image)
    grey = picture.mean(axis=2)
    ids = np.asarray(
        feature_mask.detach().cpu().numpy() if isinstance(feature_mask, Tensor) else feature_mask
    ).astype(np.int64)
    ids = ids.reshape(ids.shape[-2:]) if ids.ndim > 2 else ids
    if ids.shape != grey.shape:
        raise ValueError(
            f"feature_mask must be ({grey.shape[0]}, {grey.shape[1]}) like the image, "
            f"got {ids.shape}."
        )
    d = int(ids.max()) + 1
    ax = ax if ax is not None else plt.figure(figsize=(4, 4)).gca()
    ax.imshow(grey, cmap="gray")
    if scores is not None:
        per_pixel = _vector(scores, d, "scores")[ids]
        heat = ax.imshow(per_pixel, cmap="viridis", alpha=alpha)
        ax.figure.colorbar(heat, ax=ax, fraction=0.046, pad=0.04)
    if groups:
        tint = np.zeros((*ids.shape, 4))
        for colour, group in zip(group_colours(groups), groups):
            inside = np.isin(ids, list(group))
            tint[inside] = (*colour[:3], alpha)
        ax.imshow(tint)
    ax.set_axis_off()
    return ax


def _node_sizes(graph: ExplanationGraph, importance: Any) -> list[float]:
    if isinstance(importance, str):
        if importance == "pagerank":
            values = graph.pagerank().numpy()
        elif importance == "shapley":
            if graph.shapley is None:
                raise ValueError(
                    'importance="shapley" needs ExplanationGraph(matrix, shapley=phi); '
                    'or use importance="pagerank".'
                )
            values = np.abs(graph.shapley)
        else:
            raise ValueError(
                f"importance must be 'pagerank', 'shapley' or d numbers, got {importance!r}."
            )
    else:
        values = np.abs(_vector(importance, graph.num_features, "importance"))
    top = values.max() if values.size and values.max() > 0 else 1.0
    return [float(150 + 1350 * value / top) for value in values]


def _feature_colours(count: int, groups: Sequence[set[int]] | None) -> list[tuple[float, ...]]:
    colours: list[tuple[float, ...]] = [_NO_GROUP] * count
    for colour, group in zip(group_colours(groups), groups or []):
        for feature in group:
            if not 0 <= feature < count:
                raise ValueError(f"groups name feature {feature}, outside 0..{count - 1}.")
            colours[feature] = colour
    return colours


def _vector(values: Any, count: int, name: str) -> npt.NDArray[np.float64]:
    if isinstance(values, Tensor):
        values = values.detach().cpu().to(torch.float64).numpy()
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.shape != (count,):
        raise ValueError(f"{name} must hold {count} numbers, got {array.size}.")
    return array
