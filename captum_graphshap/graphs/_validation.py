"""Argument checks shared by the graph modules.

Each raises ``TypeError`` or ``ValueError`` naming the argument and what it
must be, before any work is done.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from torch import Tensor


def check_count(value: Any, name: str, minimum: int) -> int:
    """An int ``>= minimum`` (numpy ints accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {int(value)}.")
    return int(value)


def check_limit(max_count: Any) -> int | None:
    """``max_count`` as an int ``>= 0``, or None for no limit."""
    return None if max_count is None else check_count(max_count, "max_count", minimum=0)


def check_node(i: Any, name: str, num_nodes: int) -> int:
    """A node id ``0 <= i < num_nodes`` (numpy ints accepted, bools refused)."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"{name} must be a node id (an int), got {type(i).__name__}.")
    if not 0 <= i < num_nodes:
        raise ValueError(f"{name} must be a node id in 0..{num_nodes - 1}, got {int(i)}.")
    return int(i)


def check_edge_range(edges: npt.NDArray[np.int64], n: int, name: str) -> None:
    """Refuse an ``(E, 2)`` edge array with an id outside ``0..n-1``."""
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        bad = edges[((edges < 0) | (edges >= n)).any(axis=1)][0].tolist()
        raise ValueError(
            f"{name} must only use node ids in 0..{n - 1} (num_nodes = {n}), got {tuple(bad)}."
        )


def as_numpy(value: Any, name: str) -> np.ndarray:
    """A numpy array of a tensor (detached, on the CPU), an array or a nested list."""
    if isinstance(value, Tensor):
        return value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a rectangular array (numpy array, torch tensor or nested list)."
        ) from None
