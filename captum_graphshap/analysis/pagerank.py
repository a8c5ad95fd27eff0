"""Personalised PageRank of a weighted directed graph, solved exactly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def pagerank(
    weights: npt.ArrayLike,
    personalization: npt.ArrayLike | None = None,
    damping: float = 0.85,
) -> npt.NDArray[np.float64]:
    """PageRank of the graph with ``weights[u, v]`` on edge ``u -> v``.

    The walker follows an out-edge of ``u`` with probability proportional to
    its weight, and with probability ``1 - damping`` (or always, from a node
    without out-weight) jumps to a node drawn from ``personalization``
    (uniform by default) — the conventions of ``networkx.pagerank``. The
    stationary distribution solves the ``n x n`` linear system
    ``(I - damping M) r = (1 - damping) p`` exactly instead of iterating, so
    it does not depend on a tolerance.

    Args:
        weights:
            ``(n, n)`` non-negative finite weights; 0 means no edge.
        personalization:
            ``(n,)`` non-negative, not all zero; normalised to sum to 1.
        damping:
            In ``[0, 1)``.

    Returns:
        ``(n,)`` float64 scores summing to 1.
    """
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"weights must be a square (n, n) matrix, got shape {matrix.shape}.")
    if not np.isfinite(matrix).all() or (matrix < 0).any():
        raise ValueError("weights must be finite and non-negative.")
    n = matrix.shape[0]
    if not isinstance(damping, (int, float)) or not 0 <= damping < 1:
        raise ValueError(f"damping must be a number in [0, 1), got {damping!r}.")
    if n == 0:
        return np.zeros(0)
    if personalization is None:
        jump = np.full(n, 1.0 / n)
    else:
        jump = np.asarray(personalization, dtype=np.float64).reshape(-1)
        if jump.shape != (n,) or not np.isfinite(jump).all() or (jump < 0).any():
            raise ValueError(
                f"personalization must hold {n} finite non-negative numbers, got shape "
                f"{jump.shape}."
            )
        if jump.sum() <= 0:
            raise ValueError("personalization must not be all zero.")
        jump = jump / jump.sum()
    out_weight = matrix.sum(axis=1)
    dangling = out_weight <= 0
    # transition[v, u]: probability of stepping from u to v (columns sum to 1).
    transition = np.where(
        dangling[:, None], 0.0, matrix / np.where(dangling, 1.0, out_weight)[:, None]
    ).T
    transition[:, dangling] = jump[:, None]
    system = np.eye(n) - damping * transition
    scores = np.linalg.solve(system, (1 - damping) * jump)
    return scores / scores.sum()
