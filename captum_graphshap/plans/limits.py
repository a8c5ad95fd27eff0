"""Plan-size limits and option checks shared by every plan, before any model call."""

from __future__ import annotations

import math

from ..graphs import FeatureGraph

#: Largest plan a call may build, per example: bigger plans are refused with their count.
MAX_COALITIONS = 2**20

#: Largest L-/C-Shapley or Myerson plan on a grid or a line built without
#: ``budget=``. Such plans are stored by members (a few ids per coalition),
#: counted before they are built, and evaluated one chunk at a time, so memory
#: does not grow with the plan: at k = 1 on a 224 x 224 pixel grid, 1,141,983
#: coalitions take 34 MiB and build in 0.65 s of CPU; the evaluations take
#: time, which the cost forecast reports. 2^22 admits that plan and refuses
#: the next size (C-Shapley k = 2 there). Plans on other graphs are enumerated
#: set by set, so they keep :data:`MAX_COALITIONS` unless ``budget`` raises it.
MAX_GRAPH_COALITIONS = 2**22


#: Counts up to this are written out in digits; larger ones as powers of two.
DIGITS_UP_TO = 10**15


def count_text(count: int) -> str:
    """A count as a reader takes it in: ``234,952``, or ``2^784`` rather than 237 digits.

    Above :data:`DIGITS_UP_TO` a power of two is written exactly (``2^784``)
    and any other count as ``about 2^k`` with one decimal.
    """
    if count <= DIGITS_UP_TO:
        return f"{count:,}"
    if count & (count - 1) == 0:
        return f"2^{count.bit_length() - 1}"
    return f"about 2^{math.log2(count):.1f}"


def check_plan_size(count: int, limit: int, method: str, advice: str) -> None:
    """Refuse a plan above ``limit`` coalitions, giving the count."""
    if count > limit:
        raise ValueError(
            f"{method} would evaluate {count_text(count)} coalitions per example, above the "
            f"limit of {limit:,} (2^{int(math.log2(limit))}); {advice}"
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
