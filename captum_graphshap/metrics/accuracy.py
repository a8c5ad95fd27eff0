"""How close an estimated explanation is to the exact one, and how faithful to the model.

The metrics of the SHEAR paper (Wang et al., ICML 2023). The first three are
pure functions of per-feature tensors ``(N, d)`` (per-element attributions of
ungrouped features are the same thing, flattened); :func:`leave_one_out` and
:func:`monotonicity` query the model through the coalition engine and take
Captum's arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..engine.features import feature_sums


def absolute_error(attributions: Tensor, exact: Tensor) -> Tensor:
    """``(N,)``: the sum over features of ``|estimate - exact|`` per example (the paper's AE).

    Accumulated in float64 and returned in the inputs' dtype, at least float32
    (a half-precision sum would overflow above 65,504).
    """
    estimate, truth = _per_example(attributions, "attributions"), _per_example(exact, "exact")
    _same_shape(estimate, truth)
    dtype = torch.promote_types(torch.promote_types(attributions.dtype, exact.dtype), torch.float32)
    return (estimate - truth).abs().sum(dim=1).to(dtype)


def ranking_accuracy(attributions: Tensor, exact: Tensor) -> Tensor:
    """``(N,)``: weighted accuracy of the importance ranking (the paper's ACC).

    Features are ranked by value, largest first, in both explanations; rank
    ``k`` (from 0) scores ``1 / (k + 1)`` when both put the same feature there,
    and the score is normalised by the sum of the weights, so the top of the
    ranking counts most and 1 means the same ranking.
    """
    estimate, truth = _per_example(attributions, "attributions"), _per_example(exact, "exact")
    _same_shape(estimate, truth)
    d = estimate.shape[1]
    estimated_order = torch.sort(estimate, dim=1, descending=True, stable=True).indices
    true_order = torch.sort(truth, dim=1, descending=True, stable=True).indices
    weights = 1.0 / torch.arange(1, d + 1, dtype=torch.float64, device=estimate.device)
    hits = (estimated_order == true_order).to(torch.float64)
    return (hits * weights).sum(dim=1) / weights.sum()


def faithfulness(attributions: Tensor, differences: Tensor) -> Tensor:
    """``(N,)``: Pearson correlation between attributions and leave-one-out differences.

    ``differences`` come from :func:`leave_one_out`. An example whose
    attributions or differences are constant has no correlation and scores 0
    (as in the SHEAR authors' evaluation).
    """
    a, b = _per_example(attributions, "attributions"), _per_example(differences, "differences")
    _same_shape(a, b)
    a = a.to(torch.float64) - a.to(torch.float64).mean(dim=1, keepdim=True)
    b = b.to(torch.float64) - b.to(torch.float64).mean(dim=1, keepdim=True)
    scale = a.norm(dim=1) * b.norm(dim=1)
    correlation = (a * b).sum(dim=1) / scale
    return torch.where(scale > 0, correlation, torch.zeros_like(correlation))


def leave_one_out(
    forward_func: Callable[..., Any],
    inputs: Tensor | tuple[Tensor, ...],
    baselines: BaselineType = None,
    target: TargetType = None,
    additional_forward_args: Any = None,
    feature_mask: Tensor | tuple[Tensor, ...] | None = None,
) -> Tensor:
    """``(N, d)``: ``v(D) - v(D without i)``, each feature's leave-one-out difference.

    ``d + 1`` coalitions, evaluated in one batched engine call.
    """
    game, _ = prepare_game(
        forward_func, inputs, baselines, target, additional_forward_args, feature_mask
    )
    d = game.num_features
    full = torch.ones(1, d, dtype=torch.bool, device=game.device)
    without = ~torch.eye(d, dtype=torch.bool, device=game.device)
    values = game.evaluate(torch.cat([full, without]), distinct=True)
    return values[:, :1] - values[:, 1:]


def monotonicity(
    forward_func: Callable[..., Any],
    inputs: Tensor | tuple[Tensor, ...],
    attributions: Tensor | tuple[Tensor, ...],
    baselines: BaselineType = None,
    target: TargetType = None,
    additional_forward_args: Any = None,
    feature_mask: Tensor | tuple[Tensor, ...] | None = None,
) -> Tensor:
    """``(N,)``: how consistently larger attributions mean larger output changes.

    Starting from the baseline, features are added in decreasing order of
    ``|attribution|``; each step changes the output by ``|delta_k|``. The
    score is the fraction of consecutive steps with ``|delta_k| >=
    |delta_(k+1)|`` (1: the ranking orders the effects perfectly), as in the
    SHEAR authors' evaluation.

    Args:
        attributions: in the form :meth:`attribute` returns them (the
            inputs' shapes); a feature's value is the mean over its elements.
    """
    game, _ = prepare_game(
        forward_func, inputs, baselines, target, additional_forward_args, feature_mask
    )
    scores = feature_attributions(game, attributions).abs()
    d = game.num_features
    if d < 2:
        raise ValueError("monotonicity needs at least two features.")
    ranks = torch.sort(scores, dim=1, descending=True, stable=True).indices.argsort(dim=1)
    sizes = torch.arange(d + 1, device=game.device)
    prefixes = ranks.unsqueeze(1) < sizes[:, None]  # (N, d + 1, d)
    batch = game.batch_size
    values = game.evaluate_rows(
        torch.arange(batch, device=game.device).repeat_interleave(d + 1),
        prefixes.reshape(-1, d),
    ).view(batch, d + 1)
    steps = values.diff(dim=1).abs()
    return (steps[:, :-1] >= steps[:, 1:]).to(torch.float64).mean(dim=1)


def feature_attributions(game: CoalitionGame, attributions: Tensor | tuple[Tensor, ...]) -> Tensor:
    """``(N, d)`` per-feature values of attributions in the inputs' form (mean over elements)."""
    parts = attributions if isinstance(attributions, tuple) else (attributions,)
    if len(parts) != len(game.inputs) or any(
        p.shape != x.shape for p, x in zip(parts, game.inputs)
    ):
        raise ValueError(
            "attributions must have the shapes of inputs (what attribute returns), got "
            f"{[tuple(p.shape) for p in parts]} for inputs {[tuple(x.shape) for x in game.inputs]}."
        )
    masks, d = game.features.masks, game.num_features
    wide = tuple(part.to(torch.float64) for part in parts)
    if not all(bool(torch.isfinite(part).all()) for part in wide):
        # a ranking of NaN scores is arbitrary: refuse as the other metrics do
        raise ValueError(
            "attributions contains NaN or infinite values; a metric of them would be meaningless."
        )
    totals = feature_sums(wide, masks, d)
    counts = feature_sums(tuple(torch.ones_like(part) for part in wide), masks, d)
    return totals / counts.clamp(min=1)


def _per_example(tensor: Any, name: str) -> Tensor:
    """``(N, d)`` in float64 (fp16 attributions may exceed 65,504 once compared)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{name} must be a tensor (batch first), got {type(tensor).__name__}.")
    if tensor.dim() < 2:
        raise ValueError(
            f"{name} must be batch first, (N, d) or (N, ...), got {tuple(tensor.shape)}."
        )
    flat = tensor.reshape(tensor.shape[0], -1).to(torch.float64)
    if not bool(torch.isfinite(flat).all()):
        raise ValueError(
            f"{name} contains NaN or infinite values; a metric of them would be meaningless."
        )
    return flat


def _same_shape(a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"the two explanations must have the same shape, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}."
        )
