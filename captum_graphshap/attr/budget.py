"""``budget=``: the one cost knob of the sampled methods.

A budget is the number of model evaluations per example, counted after
deduplication, with derivative passes as forward equivalents. Each method
turns it into its own ``n_samples`` with a worst-case cost formula, so the
evaluations made never exceed it (deduplication only lowers them); the
evaluations actually made come back as ``n_evaluations``.
"""

from __future__ import annotations

from typing import Any

from .._compat import _is_int


def check_budget(budget: Any, n_samples: Any) -> int | None:
    """``budget`` is None or a positive int, and not given with ``n_samples``."""
    if budget is None:
        return None
    if n_samples is not None:
        raise ValueError(
            f"pass either n_samples={n_samples!r} or budget={budget!r}, not both: budget "
            "(model evaluations per example) chooses n_samples for you."
        )
    if not _is_int(budget):
        raise TypeError(f"budget must be an int (evaluations per example), got {budget!r}.")
    if int(budget) < 1:
        raise ValueError(f"budget must be >= 1 evaluation per example, got {budget}.")
    return int(budget)


def samples_within(budget: int, fixed: int, per_sample: int, minimum: int, method: str) -> int:
    """The most samples with ``fixed + per_sample * n <= budget``, at least ``minimum``."""
    count = (budget - fixed) // max(1, per_sample)
    if count < minimum:
        raise ValueError(
            f"budget={budget} is too small for {method}: it needs at least "
            f"{fixed + per_sample * minimum} evaluations per example ({fixed} fixed + "
            f"{per_sample} per sample, at least {minimum} samples); raise budget."
        )
    return count
