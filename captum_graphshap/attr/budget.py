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

Two costs come before any coalition: with ``references=`` (a background set
of ``B`` rows) a coalition's value is the mean over the references, ``B``
model evaluations; with ``value="log_prob"`` and no target, the class to
explain is the one predicted on the input, one forward per example first.
:func:`coalition_budget` takes both off before a class plans its coalitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._compat import is_int
from ..engine.plan import Plan
from ..graphs import FeatureGraph, GridGraph
from ..plans import stencils
from ..plans.l_c_shapley import c_shapley_regression_plan
from ..plans.limits import MAX_COALITIONS

if TYPE_CHECKING:
    from ..engine.coalition_game import CoalitionGame

#: How a class's ``budget=`` pays for the references and the target's forward:
#: ``"coalition"``, the class plans coalitions and each costs one evaluation per
#: reference (:func:`coalition_budget` converts); ``"row"``, each row carries one
#: sampled reference (only the target's forward is taken off); ``"own"``, the
#: class counts both itself (the graph methods, OwenValue).
BudgetAccounting = Literal["coalition", "row", "own"]


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


def coalition_budget(
    options: Any, game: CoalitionGame, accounting: BudgetAccounting
) -> tuple[Any, str | None]:
    """``options`` with ``budget`` what is left for the coalitions, and the sentence
    that says so (None where nothing is taken off).

    Refuses a budget that leaves no coalition, before any model call.
    """
    budget = getattr(options, "budget", None)
    if budget is None or accounting == "own":
        return options, None
    target_forward = int(game.value == "log_prob" and game.target is None)
    per_coalition = game.num_references if accounting == "coalition" else 1
    if per_coalition == 1 and target_forward == 0:
        return options, None
    left = (budget - target_forward) // per_coalition
    costs = []
    if per_coalition > 1:
        costs.append(f"each coalition costs {per_coalition} evaluations (one per reference)")
    if target_forward:
        costs.append(
            'one forward finds the predicted class first (value="log_prob" without a target)'
        )
    note = (
        f"budget={budget} counts model evaluations per example: {' and '.join(costs)}, "
        f"so {left} are left for the coalitions"
    )
    if left < 1:
        raise ValueError(f"{note}; raise budget to {per_coalition + target_forward} or more.")
    back = [f"multiply by {per_coalition}"] if per_coalition > 1 else []
    back += ["add 1"] if target_forward else []
    return dataclasses.replace(options, budget=left), (
        f"({note}: the budgets above count those; {' and '.join(back)} for budget=.)"
    )


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
        f"single features needs {(d + 2 if d > 1 else 2) * references + extra:,} evaluations "
        "per example; raise budget."
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
