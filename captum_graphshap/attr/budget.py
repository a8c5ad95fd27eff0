"""``budget=``: the one cost knob of the sampled methods, and a cap for the graph methods.

A budget is the number of model evaluations per example, counted after
deduplication, with derivative passes as forward equivalents. Each method
turns it into its own ``n_samples`` with a worst-case cost formula, so the
evaluations made never exceed it; the samplers whose draws repeat
(PairedKernelShap's ``"kernel"`` and permutations, BayesShap,
ShapleySampling) then draw on until their distinct rows fill it
(``plans/paired_designs.py`` ``filled_kernel_pairs``, ``plans/permutations.py``
``filled_orderings``). The
evaluations actually made come back as ``n_evaluations``.

The graph methods (Myerson, L-/C-Shapley) have no samples to choose: their
plan is fixed by the graph and ``k``. For them ``budget`` is a cap: a plan
over it is refused with its count, or, with ``over_budget="kernel"``,
replaced by C-Shapley's kernel variant within the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._compat import is_int
from ..engine.plan import Plan
from ..graphs import FeatureGraph, GridGraph
from ..plans import stencils
from ..plans.l_c_shapley import c_shapley_regression_plan
from ..plans.limits import MAX_COALITIONS


def check_budget(budget: Any, n_samples: Any) -> int | None:
    """``budget`` is None or a positive int, and not given with ``n_samples``."""
    if budget is None:
        return None
    if n_samples is not None:
        raise ValueError(
            f"pass either n_samples={n_samples!r} or budget={budget!r}, not both: budget "
            "(model evaluations per example) chooses n_samples for you."
        )
    if not is_int(budget):
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


# ------------------------------------------------------------------ graph methods

#: What a graph method does when its plan needs more evaluations than ``budget``.
OVER_BUDGET = ("refuse", "kernel")
#: The kernel variant solves a ``d x d`` system over a dense ``(M, d)``
#: design: above this many features it is refused instead.
REGRESSION_MAX_FEATURES = 4096


def check_graph_budget(budget: Any, over_budget: Any) -> int | None:
    """``budget`` is None or a positive int; ``over_budget`` one of :data:`OVER_BUDGET`."""
    if over_budget not in OVER_BUDGET:
        raise ValueError(f"over_budget must be one of {OVER_BUDGET}, got {over_budget!r}.")
    if budget is None:
        if over_budget != "refuse":
            raise ValueError(
                "over_budget='kernel' needs budget= (the most model evaluations per "
                "example) to know when to switch."
            )
        return None
    return check_budget(budget, None)


def graph_plans_within(
    build: Callable[..., Plan],
    graphs: list[FeatureGraph],
    *,
    budget: int | None,
    over_budget: str,
    per_plan_extra: int,
    references: int,
    who: str,
    order: int,
) -> list[Plan]:
    """The plan of each graph, or a refusal or the kernel variant above ``budget``.

    Every plan is built first (plans are cheap next to their evaluation, and
    the refusal then gives the exact count). A plan costs ``len(plan) *
    references + per_plan_extra`` evaluations per example. Without ``budget``
    the builders' limits hold (``2^22`` coalitions on grids and lines, ``2^20``
    on graphs enumerated set by set); a larger ``budget`` raises them. With
    ``over_budget="kernel"`` a plan over the budget is replaced by
    C-Shapley's kernel variant (Chen et al. Sec. 4.3.2) over the connected
    sets of the largest size bound ``k' <= max(order, 1)`` that fits.
    """
    limit = budget if budget is not None and budget > MAX_COALITIONS else None
    plans = []
    for graph in graphs:
        try:
            plan: Plan | None = build(graph, limit=limit)
            needed = len(plan) * references + per_plan_extra  # type: ignore[arg-type]
            refusal = ""
        except ValueError as error:
            if budget is None or over_budget == "refuse":
                raise
            plan, needed, refusal = None, -1, str(error)
        if plan is not None and (budget is None or needed <= budget):
            plans.append(plan)
            continue
        assert budget is not None
        if over_budget == "refuse":
            raise ValueError(
                f"{who} would make {needed:,} model evaluations per example, above "
                f"budget={budget:,}. Pass a larger budget, a smaller k, fewer features "
                "(feature_mask: patches, superpixels), or over_budget='kernel' for C-Shapley's "
                "kernel variant within the budget."
            )
        plans.append(_kernel_within(graph, budget, references, per_plan_extra, who, order, refusal))
    return plans


def _kernel_within(
    graph: FeatureGraph,
    budget: int,
    references: int,
    extra: int,
    who: str,
    order: int,
    refusal: str,
) -> Plan:
    """C-Shapley's kernel-variant plan with the largest size bound that fits ``budget``."""
    d = graph.num_nodes
    why = f" ({refusal})" if refusal else ""
    if d > REGRESSION_MAX_FEATURES:
        raise ValueError(
            f"{who} is over budget={budget:,}{why}, and the kernel variant solves a "
            f"d x d system: d = {d:,} features is above {REGRESSION_MAX_FEATURES:,}. Group "
            "elements into fewer features (patches, superpixels) or raise budget."
        )
    for size in range(max(order, 1), 0, -1):
        count = regression_family_size(graph, size)
        if count is not None and count * references + extra > budget:
            continue
        try:
            plan = c_shapley_regression_plan(graph, size, limit=budget)
        except ValueError:
            continue
        if len(plan) * references + extra <= budget:
            return plan
    raise ValueError(
        f"{who} is over budget={budget:,}{why}, and even its kernel variant with "
        f"single features needs {(d + 2) * references + extra:,} evaluations per example; "
        "raise budget."
    )


def regression_family_size(graph: FeatureGraph, k: int) -> int | None:
    """Coalitions of the kernel variant on a grid or a line (None: other graphs).

    Squares of side ``<= k`` (windows on a line), the empty set and the full set.
    """
    shape = stencils.grid_shape(graph)
    if shape is None or (not isinstance(graph, GridGraph) and shape[0] != 1):
        return None
    height, width = shape
    sides = range(1, k + 1)
    if isinstance(graph, GridGraph):
        squares = sum(max(height - s + 1, 0) * max(width - s + 1, 0) for s in sides)
    else:
        squares = sum(max(width - s + 1, 0) for s in sides)
    return squares + 2
