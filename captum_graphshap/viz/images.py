"""Bridge from PyTorch image layouts to Captum's image visualisation."""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt
from torch import Tensor

from .._compat import float64_array

LAYOUTS = ("NCHW", "NHW", "CHW", "HW")


def to_hwc(
    attributions: Tensor | npt.ArrayLike, index: int | None = None, *, layout: str | None = None
) -> npt.NDArray[np.float64]:
    """One image (or its attributions) as the ``(H, W, C)`` numpy array Captum draws.

    :func:`captum.attr.visualization.visualize_image_attr` takes channels-last
    numpy arrays; models and attribution methods give channels-first tensors.

    Args:
        attributions:
            A tensor (or array) laid out ``NCHW``, ``NHW``, ``CHW`` or ``HW``:
            attributions, or the images themselves.
        index:
            Which example of a batch (``NCHW``/``NHW``) to take; negative counts
            from the end. Ignored for single images. Default: the only image of
            a batch of one; for a larger batch, image 0 with a warning that says
            so (pass ``index=0`` to take it quietly).
        layout:
            The layout of ``attributions``. Default: from the rank — 4 is
            ``NCHW``, 2 is ``HW``, and 3 is ``CHW`` when the first dimension is 1
            or 3 (grey or RGB) and ``index`` is 0 or None, otherwise ``NHW``. Pass it when
            a 3-dim tensor is ambiguous (e.g. a batch of 3 grey maps).

    Returns:
        A float64 ``(H, W, C)`` array on the host; a single channel stays as
        ``(H, W, 1)``, which Captum accepts for both attributions and images.

    Example:
        >>> import torch
        >>> from captum_graphshap.viz import to_hwc
        >>> batch = torch.rand(4, 3, 8, 8)
        >>> to_hwc(batch, 2).shape  # the third image, channels last
        (8, 8, 3)
    """
    array = float64_array(attributions, "attributions", "a tensor or an array of numbers")
    layout = _resolve_layout(array.shape, index, layout)
    if array.ndim != len(layout):
        raise ValueError(
            f"attributions has {array.ndim} dimensions (shape {tuple(array.shape)}) but "
            f"layout {layout!r} needs {len(layout)}."
        )
    if layout.startswith("N"):
        size = array.shape[0]
        if index is None:
            if size > 1:
                warnings.warn(
                    f"to_hwc took image 0 of a batch of {size} (shape {tuple(array.shape)}); "
                    "pass index=n to choose the image (index=0 takes the first quietly).",
                    UserWarning,
                    stacklevel=2,
                )
            index = 0
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__}.")
        if not -size <= index < size:
            raise ValueError(
                f"index {index} is out of range for a batch of {size} (shape {tuple(array.shape)})."
            )
        array = array[index]
        layout = layout[1:]
    if layout == "HW":
        array = array[:, :, None]
    else:  # "CHW"
        array = np.moveaxis(array, 0, -1)
    return np.ascontiguousarray(array, dtype=np.float64)


def _resolve_layout(shape: tuple[int, ...], index: int | None, layout: str | None) -> str:
    if layout is not None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}.")
        return layout
    rank = len(shape)
    if rank == 4:
        return "NCHW"
    if rank == 2:
        return "HW"
    if rank == 3:
        return "CHW" if shape[0] in (1, 3) and index in (0, None) else "NHW"
    raise ValueError(
        f"attributions must have 2, 3 or 4 dimensions (HW, CHW/NHW, NCHW), got shape "
        f"{tuple(shape)}."
    )
