"""Training labels: unbiased per-example Shapley estimates from the engine's plans.

The explainer network learns the conditional mean of its labels, so what it
converges to is the labels' *mean*: unbiased labels (antithetic orderings,
regression-adjusted Monte Carlo) let it average their noise away across
examples and become more accurate than the labels themselves (stochastic
amortization, Covert et al. 2024); a biased estimate (a shrunk posterior, a
regression fitted on few coalitions) caps it at its own error.

The engine's sampled plans are shared by a batch (one set of coalitions for
every example). Labels for amortization want the opposite: noise independent
across examples, which the network can average. A shared plan is made
per-example here by relabelling the features of each example by its own
uniform permutation: the plans' designs are symmetric in the features, and
``phi(v o pi) = phi(v) o pi`` for any game, so each example's estimate stays
unbiased while its coalitions (and its noise) differ from its neighbours'.

``"fastshap"`` draws the ``"kernel"`` labels and keeps each example's kernel
matrix too (:class:`~.objective.KernelMetric`): with both, training minimises
FastSHAP's objective on the example's coalitions (``objective.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..attr.paired_kernel_shap import auto_plan
from ..engine.coalition_game import CoalitionGame, MultipleOutputs
from ..engine.plan import Plan
from ..plans.draws import uniform
from ..plans.exact import exact_shapley_plan
from ..plans.paired_designs import (
    filled_kernel_design,
    filled_kernel_plan,
    kernel_design_plan,
    kernel_gram,
)
from ..plans.permutation_fill import filled_permutation_plan
from ..plans.permutations import filled_orderings
from ..plans.regression_adjusted import cubic_kernel_plan
from ..plans.regression_mc import regression_mc_plan
from .objective import KernelMetric, normalised_gram

#: labels that are the whole training signal (``ShapleyLabels``, ``fit(labels=...)``):
#: the unbiased estimators of the engine, and the consistent (slightly biased)
#: paired kernel fit
STANDALONE_ESTIMATORS: tuple[str, ...] = ("permutation", "regression_mc", "kernel", "default")
#: ``label_estimator=`` choices of ``fit``: those, ``"fastshap"`` (the kernel
#: labels with each example's kernel matrix: FastSHAP's objective) and
#: ``"potential"`` (no labels: a potential network trained on the coalitions'
#: values, ``potential.py``)
LABEL_ESTIMATORS: tuple[str, ...] = (*STANDALONE_ESTIMATORS, "fastshap", "potential")


def minimum_evaluations(estimator: str, d: int) -> int:
    """The fewest evaluations per example (endpoints included) ``estimator`` can spend."""
    if estimator == "permutation":
        return 2 * d  # one antithetic pair of orderings
    return 2 * d + 2  # d complementary pairs pin the fit


def check_label_budget(budget: int, estimator: str, d: int) -> None:
    """Refuse a budget below :func:`minimum_evaluations` (unless it covers all ``2^d``
    coalitions), naming the least that works; no model call."""
    needed = minimum_evaluations(estimator, d)
    if budget < needed and 2**d > budget:
        raise ValueError(
            f"budget={budget} is too small for label_estimator={estimator!r} with d = {d} "
            f"features: raise it to at least {needed}."
        )


def label_design(
    estimator: str,
    d: int,
    evaluations: int,
    generator: torch.Generator | None,
    device: torch.device,
) -> tuple[Plan, Tensor | None]:
    """A shared plan of ``estimator`` spending at most ``evaluations`` distinct rows per
    example, and for ``"fastshap"`` its ``(d, d)`` kernel matrix in plan positions,
    scaled to trace ``d`` (:func:`~.objective.normalised_gram`; None for the others).

    Every coalition (exact Shapley) when the ``2^d`` fit the evaluations; the
    matrix is then the identity (exact labels: a plain squared error).

    ``"fastshap"`` draws exactly ``"kernel"``'s plan: the same generator gives both
    the same labels.
    """
    fastshap = estimator == "fastshap"
    if d < evaluations.bit_length():  # 2^d <= evaluations
        exact = exact_shapley_plan(d, device, method="AmortizedShapley")
        return exact, torch.eye(d, dtype=torch.float64, device=device) if fastshap else None
    if estimator == "permutation":
        ranks = filled_orderings(d, evaluations, True, generator, device, minimum=2, even=True)
        return filled_permutation_plan(ranks, evaluations, generator, device), None
    pairs = (evaluations - 2) // 2
    if estimator == "default":  # PairedKernelShap's own choice (biased: a shrunk posterior)
        plan, _ = auto_plan(d, 2 * pairs, generator, device)
        fallback = plan if plan is not None else cubic_kernel_plan(d, pairs, generator, device)
        return fallback, None
    if estimator == "regression_mc":
        return regression_mc_plan(d, pairs, generator, device), None
    if fastshap:
        coalitions, weights = filled_kernel_design(d, pairs, generator, device)
        gram = normalised_gram(kernel_gram(coalitions, weights))
        return kernel_design_plan(coalitions, weights), gram
    return filled_kernel_plan(d, pairs, generator, device), None


def relabelled_rows(coalitions: Tensor, order: Tensor) -> Tensor:
    """``(N * M, d)`` rows: coalition ``m`` of a plan with example ``n``'s features relabelled.

    ``order[n, j]`` is the feature that plan position ``j`` stands for in example
    ``n``, so row ``(n, m)`` holds feature ``order[n, j]`` when the plan's
    coalition ``m`` holds ``j``.
    """
    batch, d = order.shape
    count = coalitions.shape[0]
    rows = torch.empty(batch, count, d, dtype=torch.bool, device=order.device)
    rows.scatter_(
        2, order[:, None, :].expand(batch, count, d), coalitions[None].expand(batch, -1, -1)
    )
    return rows.reshape(batch * count, d)


def every_output_values(
    game: CoalitionGame, example_index: Tensor, rows: Tensor, distinct: bool = False
) -> Tensor:
    """``(R, K)`` values of rows for every output explained (K = 1 with a target).

    Without a target, a model with several outputs per example has each
    explained at once: the game is switched to its multi-output mode on the
    first call (no model row is evaluated twice: the probe is replayed).
    ``distinct``: no (example, row) pair repeats (the engine skips its search).
    """
    desc = "Shapley labels"  # the engine's progress bar and forecast name it
    try:
        return game.evaluate_rows(
            example_index, rows, every_output=True, desc=desc, distinct=distinct
        )
    except MultipleOutputs as multiple:
        game.outputs = int(torch.Size(multiple.shape).numel())
        game.tape.position = 0
        return game.evaluate_rows(
            example_index, rows, every_output=True, desc=desc, distinct=distinct
        )


def sampled_labels(
    game: CoalitionGame, estimator: str, evaluations: int, generator: torch.Generator | None
) -> Tensor:
    """``(N, d, K)`` float64 unbiased estimates of each example's Shapley values.

    At most ``evaluations`` distinct model rows per example (counted in
    ``game.evaluations``), each example's coalitions drawn afresh
    (:func:`relabelled_rows`). Efficient: each example's values sum to
    ``v(D) - v(empty)``.
    """
    return labels_and_metric(game, estimator, evaluations, generator)[0]


def labels_and_metric(
    game: CoalitionGame, estimator: str, evaluations: int, generator: torch.Generator | None
) -> tuple[Tensor, KernelMetric | None]:
    """:func:`sampled_labels`, and for ``"fastshap"`` each example's kernel matrix
    (:class:`~.objective.KernelMetric`; None for the other estimators)."""
    d, batch, device = game.num_features, game.batch_size, game.device
    plan, gram = label_design(estimator, d, evaluations, generator, device)
    coalitions = plan.coalitions.dense().to(device)
    order = uniform((batch, d), generator, device).argsort(dim=1)
    rows = relabelled_rows(coalitions, order)
    example_index = torch.arange(batch, device=device).repeat_interleave(coalitions.shape[0])
    values = every_output_values(game, example_index, rows)  # (N * M, K)
    values = values.reshape(batch, coalitions.shape[0], -1)
    per_output = [plan.estimator(values[..., k]) for k in range(values.shape[-1])]
    relabelled = torch.stack(per_output, dim=-1)  # (N, d, K) in plan positions
    # position j of example n is feature order[n, j]
    labels = torch.empty_like(relabelled)
    labels.scatter_(1, order[..., None].expand_as(relabelled), relabelled)
    if gram is None:
        return labels, None
    one = torch.zeros(batch, dtype=torch.long, device=device)  # every example: the plan's
    return labels, KernelMetric(gram[None], one, order)


def exact_values(game: CoalitionGame) -> Tensor:
    """``(N, d, K)`` exact Shapley values (``2^d`` rows per example; refuses d > 20)."""
    d, batch, device = game.num_features, game.batch_size, game.device
    plan = exact_shapley_plan(d, device, method="AmortizedShapley")
    coalitions = plan.coalitions.dense().to(device)
    rows = coalitions.repeat(batch, 1)
    example_index = torch.arange(batch, device=device).repeat_interleave(coalitions.shape[0])
    values = every_output_values(game, example_index, rows).reshape(batch, coalitions.shape[0], -1)
    return torch.stack([plan.estimator(values[..., k]) for k in range(values.shape[-1])], dim=-1)


def gaps(game: CoalitionGame, shared_empty: bool) -> Tensor:
    """``(N, K)``: ``v(D) - v(empty)`` of each example, every output explained.

    ``shared_empty``: the baseline and target are the same for every example,
    so ``v(empty)`` is too and costs one row for the batch (``N + 1`` rows in
    all), not one per example.
    """
    d, batch, device = game.num_features, game.batch_size, game.device
    every = torch.arange(batch, device=device)
    empty_rows = every[:1] if shared_empty else every  # example 0's empty row serves all
    # one call: a full row per example and the empty rows, distinct (no search for repeats)
    present = torch.zeros(batch + len(empty_rows), d, dtype=torch.bool, device=device)
    present[:batch] = True
    values = every_output_values(game, torch.cat([every, empty_rows]), present, distinct=True)
    full, empty = values[:batch], values[batch:]
    return full - empty
