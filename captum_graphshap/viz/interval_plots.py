"""Attributions drawn with their uncertainty: error bars, shaded bands, half-width maps.

Matplotlib only. Each function takes the ``(mean, half_width)`` pair that
``return_uncertainty=True`` returns (per-feature vectors, or an example of a
batch), draws on the axes it is given or on a new figure, and returns them.
A bar whose interval contains zero is drawn faded: its sign is not settled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
import torch
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from torch import Tensor

from .images import to_hwc

_POSITIVE = "#2f7ed8"
_NEGATIVE = "#d8452f"
_UNSETTLED_ALPHA = 0.35


def plot_feature_intervals(
    attributions: Tensor | npt.ArrayLike,
    half_width: Tensor | npt.ArrayLike,
    feature_names: Sequence[str] | None = None,
    *,
    index: int = 0,
    sort: bool = True,
    max_features: int | None = 20,
    ax: Axes | None = None,
) -> Axes:
    """Horizontal bars of tabular attributions with their intervals as error bars.

    Args:
        attributions, half_width:
            ``(d,)`` per-feature values, or ``(N, d)`` (example ``index`` is drawn).
        feature_names:
            ``d`` labels; default ``"feature i"``.
        sort:
            Largest ``|attribution|`` at the top.
        max_features:
            Draw at most this many features (the largest); None draws all.
    """
    values = _vector(attributions, "attributions", index)
    widths = _vector(half_width, "half_width", index)
    _check_pair(values, widths)
    names = _names(feature_names, values.size)
    order = np.argsort(-np.abs(values), kind="stable") if sort else np.arange(values.size)
    if max_features is not None:
        if isinstance(max_features, bool) or not isinstance(max_features, int) or max_features < 1:
            raise ValueError(f"max_features must be a positive int or None, got {max_features!r}.")
        order = order[:max_features]
    ax = ax if ax is not None else plt.subplots(figsize=(6, 0.35 * len(order) + 1))[1]
    rows = np.arange(len(order))[::-1]  # first feature at the top
    shown, spread = values[order], widths[order]
    bars = ax.barh(rows, shown, color=_colours(shown), xerr=spread, capsize=3)
    for bar, settled in zip(bars, np.abs(shown) > spread):
        bar.set_alpha(1.0 if settled else _UNSETTLED_ALPHA)
    ax.set_yticks(rows, [names[i] for i in order])
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("attribution ± half-width")
    return ax


def plot_token_intervals(
    tokens: Sequence[str],
    attributions: Tensor | npt.ArrayLike,
    half_width: Tensor | npt.ArrayLike,
    *,
    index: int = 0,
    ax: Axes | None = None,
) -> Axes:
    """Token attributions as bars in reading order, each interval shaded behind its bar.

    Args:
        tokens:
            One label per feature (words or tokens), in order.
        attributions, half_width:
            ``(L,)`` or ``(N, L)`` per-token values (example ``index``).
    """
    values = _vector(attributions, "attributions", index)
    widths = _vector(half_width, "half_width", index)
    _check_pair(values, widths)
    labels = list(tokens)
    if len(labels) != values.size:
        raise ValueError(
            f"tokens has {len(labels)} entries but attributions has {values.size}; pass one "
            "token per feature."
        )
    ax = ax if ax is not None else plt.subplots(figsize=(max(4.0, 0.6 * len(labels)), 3))[1]
    positions = np.arange(values.size)
    for position, value, width in zip(positions, values, widths):
        ax.fill_between(
            [position - 0.45, position + 0.45],
            value - width,
            value + width,
            color="0.8",
            linewidth=0,
            zorder=1,
        )
    bars = ax.bar(positions, values, width=0.5, color=_colours(values), zorder=2)
    for bar, settled in zip(bars, np.abs(values) > widths):
        bar.set_alpha(1.0 if settled else _UNSETTLED_ALPHA)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(positions, labels, rotation=45, ha="right")
    ax.set_ylabel("attribution (band: interval)")
    return ax


def plot_image_intervals(
    attributions: Tensor | npt.ArrayLike,
    half_width: Tensor | npt.ArrayLike,
    image: Tensor | npt.ArrayLike | None = None,
    *,
    index: int = 0,
    layout: str | None = None,
    axes: Sequence[Axes] | None = None,
) -> list[Axes]:
    """The attribution heatmap next to the map of its half-widths (and the image first).

    Channels are summed, as for Captum's heat maps; the attribution map uses a
    diverging colour scale centred at zero, the half-width map a sequential
    one starting at zero, each with its colour bar.

    Args:
        attributions, half_width:
            Image-shaped tensors (``NCHW``, ``NHW``, ``CHW`` or ``HW``, as
            :func:`~captum_graphshap.viz.images.to_hwc` reads them).
        image:
            The input image, drawn in a first panel when given (values in [0, 1]
            or [0, 255]).
        axes:
            Two (three with ``image``) axes to draw on; default a new figure.
    """
    heat = to_hwc(attributions, index, layout=layout).sum(axis=2)
    spread = to_hwc(half_width, index, layout=layout).sum(axis=2)
    if heat.shape != spread.shape:
        raise ValueError(
            f"attributions and half_width must have the same image shape, got {heat.shape} "
            f"and {spread.shape}."
        )
    if bool(np.any(spread < 0)):
        raise ValueError("half_width has negative values; pass the half-widths themselves.")
    panels = 3 if image is not None else 2
    figure: Any
    if axes is None:
        figure, created = plt.subplots(1, panels, figsize=(3.6 * panels, 3.4))
        axes = list(np.atleast_1d(created))
    else:
        axes = list(axes)
        figure = axes[0].figure if axes else None
    if len(axes) != panels:
        raise ValueError(f"axes must hold {panels} axes, got {len(axes)}.")
    drawn = list(axes)
    if image is not None:
        picture = to_hwc(image, index, layout=layout)
        if picture.shape[:2] != heat.shape:
            raise ValueError(
                f"image has size {picture.shape[:2]} but attributions {heat.shape}; pass the "
                "explained image."
            )
        if picture.max() > 1.0:
            picture = picture / 255.0
        first = drawn.pop(0)
        first.imshow(picture[:, :, 0] if picture.shape[2] == 1 else picture, cmap="gray")
        first.set_title("input")
    limit = float(np.abs(heat).max()) or 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit)
    shown = drawn[0].imshow(heat, cmap="RdBu_r", norm=norm)
    drawn[0].set_title("attribution")
    widths = drawn[1].imshow(spread, cmap="magma", vmin=0.0, vmax=float(spread.max()) or 1.0)
    drawn[1].set_title("half-width")
    if figure is not None:
        figure.colorbar(shown, ax=drawn[0], fraction=0.046, pad=0.04)
        figure.colorbar(widths, ax=drawn[1], fraction=0.046, pad=0.04)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    return list(axes)


def _vector(values: Any, name: str, index: int) -> npt.NDArray[np.float64]:
    if isinstance(values, Tensor):
        array = values.detach().to("cpu", torch.float64).numpy()
    else:
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name} must be a tensor or an array of numbers.") from error
    if array.ndim == 2:
        if not -array.shape[0] <= index < array.shape[0]:
            raise ValueError(f"index {index} is out of range for a batch of {array.shape[0]}.")
        array = array[index]
    if array.ndim != 1:
        raise ValueError(
            f"{name} must be per-feature values of shape (d,) or (N, d), got shape "
            f"{tuple(array.shape)}; sum or select features first."
        )
    return array


def _check_pair(values: npt.NDArray[np.float64], widths: npt.NDArray[np.float64]) -> None:
    if values.shape != widths.shape:
        raise ValueError(
            f"attributions has {values.size} features but half_width has {widths.size}; pass "
            "the pair that return_uncertainty=True returned."
        )
    if bool(np.any(widths < 0)) or not bool(np.all(np.isfinite(widths))):
        raise ValueError("half_width must be finite and non-negative.")


def _names(feature_names: Sequence[str] | None, count: int) -> list[str]:
    if feature_names is None:
        return [f"feature {i}" for i in range(count)]
    names = [str(name) for name in feature_names]
    if len(names) != count:
        raise ValueError(f"feature_names has {len(names)} entries for {count} features.")
    return names


def _colours(values: npt.NDArray[np.float64]) -> list[str]:
    return [_POSITIVE if value >= 0 else _NEGATIVE for value in values]
