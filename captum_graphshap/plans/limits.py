"""Plan-size limits and option checks shared by every plan, before any model call."""

from __future__ import annotations

import math

from ..graphs import FeatureGraph

#: Largest plan a call may build, per example (DESIGN.md section 2).
MAX_COALITIONS = 2**20


def check_plan_size(count: int, limit: int, method: str, advice: str) -> None:
    """Refuse a plan above ``limit`` coalitions, giving the count."""
    if count > limit:
        raise ValueError(
            f"{method} would evaluate {count:,} coalitions per example, above the limit of "
            f"{limit:,} (2^{int(math.log2(limit))}); {advice}"
        )


def check_neighbourhood_plan_size(graph: FeatureGraph, k: int, limit: int, method: str) -> None:
    """Refuse a plan over every subset of every ball ``N_k(i)`` above ``limit``.

    The count is ``sum_i 2^|N_k(i)|`` before deduplication, known before any
    enumeration (L-Shapley, local residuals, graph-local bivariate).
    """
    sizes = (graph.balls(k) >= 0).sum(dim=1).tolist()
    check_plan_size(
        sum(2**m for m in sizes),
        limit,
        method,
        f"its largest neighbourhood has {max(sizes, default=0)} features. Use a smaller k "
        "or group elements into fewer features (patches, superpixels) with feature_mask.",
    )


def check_choice(value: object, choices: tuple[str, ...], name: str) -> None:
    """Refuse an unknown option, listing the known ones."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
