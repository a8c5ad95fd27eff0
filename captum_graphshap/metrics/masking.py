"""The masking experiment of L-Shapley/C-Shapley (Chen et al., 2019, Fig. 3).

Rank the features of each example by attribution, replace the top fraction by
the baseline and record how much the model's confidence in the explained class
falls. A better attribution finds the evidence sooner, so its curve drops
faster: **lower is better**, both for the curve and for its area.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

#: The paper's grid: 0 %, 5 %, ..., 50 % of the features masked.
DEFAULT_FRACTIONS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(11))

#: the scores a masking curve can record (``value=``); the engine's game values are
#: ``engine.prepare.VALUE_KINDS``, a subset without "log_odds"
MASKING_SCORES = ("log_odds", "log_prob", "output")


def masking_curve(
    forward_func: Callable[..., Any],
    inputs: Tensor,
    attributions: Tensor,
    *,
    feature_mask: Tensor | None = None,
    baselines: Tensor | float | int = 0,
    target: int | Sequence[int] | Tensor | None = None,
    fractions: Sequence[float] | Tensor | int = DEFAULT_FRACTIONS,
    value: str = "log_odds",
    additional_forward_args: Any = None,
) -> Tensor:
    """Change of the target's score as the top-ranked features are masked.

    For each fraction ``f`` the ``round(f * d)`` features with the largest
    attributions are set to the baseline (``d`` = the features present in that
    example; ties keep feature-id order) and the model is evaluated once on the
    whole batch.

    Args:
        forward_func:
            The model: ``(N, ...) -> (N, C)`` scores (logits). An ``(N,)`` or
            ``(N, 1)`` output is read as the logit of a binary classifier.
        inputs:
            ``(N, ...)`` batch of examples.
        attributions:
            Attributions with the shape of ``inputs``.
        feature_mask:
            Integer feature ids broadcastable to ``inputs`` (e.g. ``(1, 1, H, W)``
            or ``(H, W)`` to group the channels of a pixel, or a patch mask).
            Default: every element is a feature. A feature's score is the mean of
            its elements' attributions (perturbation methods repeat the feature's
            value on each element; the mean recovers it).
        baselines:
            Value of masked elements: a number, or a tensor broadcastable to
            ``inputs``. Default 0.
        target:
            Class explained per example: an int, a sequence or tensor of ``N``
            ints, or None for the class predicted on the full input.
        fractions:
            Fractions of the features to mask, each in ``[0, 1]``; an int ``n``
            means ``n + 1`` equal steps from 0 to 0.5. Default 0, 0.05, ..., 0.5.
        value:
            ``"log_odds"`` (``log p - log(1 - p)`` of the softmax, the paper's
            score), ``"log_prob"`` (``log p``) or ``"output"`` (the raw score).
        additional_forward_args:
            Further arguments passed unchanged to every call of ``forward_func``.

    Returns:
        ``(N, len(fractions))`` float64 tensor: score after masking minus score of
        the full input (so the column of fraction 0 is 0).
    """
    if not callable(forward_func):
        raise TypeError(f"forward_func must be callable, got {type(forward_func).__name__}.")
    if value not in MASKING_SCORES:
        raise ValueError(f"value must be one of {MASKING_SCORES}, got {value!r}.")
    inputs = _check_inputs(inputs)
    attributions = _check_attributions(attributions, inputs)
    flat_mask, num_features = _check_feature_mask(feature_mask, inputs)
    background = _check_baselines(baselines, inputs)
    grid = _check_fractions(fractions)
    args = _as_args(additional_forward_args)
    n = inputs.shape[0]

    # Per-feature score = mean attribution of its elements; features that own
    # no element (unused ids) rank last and never count towards d.
    flat_attr = attributions.detach().reshape(n, -1).to(torch.float64)
    sums = torch.zeros(n, num_features, dtype=torch.float64, device=inputs.device)
    sums.scatter_add_(1, flat_mask, flat_attr)
    sizes = torch.zeros_like(sums).scatter_add_(1, flat_mask, torch.ones_like(flat_attr))
    present = sizes > 0
    scores = torch.where(present, sums / sizes.clamp(min=1), float("-inf"))
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(
        1, order, torch.arange(num_features, device=inputs.device).expand(n, -1)
    )
    rank_of_element = rank.gather(1, flat_mask)  # (N, elements)
    num_present = present.sum(dim=1)

    with torch.no_grad():
        full = _scores(forward_func, inputs, args, n)
        classes = _check_target(target, full, n)
        reference = _score_of(full, classes, value)
        curve = torch.zeros(n, len(grid), dtype=torch.float64, device=inputs.device)
        for j, fraction in enumerate(grid):
            # floor(x + 0.5): round half up, not Python's half-to-even.
            counts = torch.floor(fraction * num_present.to(torch.float64) + 0.5).long()
            if not bool((counts > 0).any()):
                continue  # nothing masked: the change is exactly 0
            hidden = (rank_of_element < counts[:, None]).reshape(inputs.shape)
            masked = torch.where(hidden, background, inputs)
            out = _scores(forward_func, masked, args, n)
            curve[:, j] = _score_of(out, classes, value) - reference
    return curve


def curve_area(curve: Tensor | np.ndarray, fractions: Sequence[float] | Tensor | int) -> float:
    """Area under masking curves (trapezoid rule), averaged over examples.

    Args:
        curve:
            ``(N, F)`` curves from :func:`masking_curve`, or one ``(F,)`` curve.
        fractions:
            The ``F`` fractions the curve was measured at (or the int given to
            :func:`masking_curve`).

    Returns:
        The mean area, a float; with log-odds curves, lower is better.
    """
    grid = torch.tensor(_check_fractions(fractions), dtype=torch.float64)
    values = torch.as_tensor(curve).detach().to("cpu", torch.float64)
    if values.dim() == 1:
        values = values[None]
    if values.dim() != 2:
        raise ValueError(f"curve must be (N, F) or (F,), got shape {tuple(values.shape)}.")
    if values.shape[1] != grid.numel():
        raise ValueError(
            f"curve has {values.shape[1]} points per example but fractions has "
            f"{grid.numel()}; pass the fractions the curve was measured at."
        )
    if grid.numel() < 2:
        raise ValueError("fractions needs at least 2 points to have an area.")
    if bool((grid[1:] <= grid[:-1]).any()):
        raise ValueError(
            f"fractions must increase strictly for an area, got {grid.tolist()}; sort them "
            "(and the curve's columns with them)."
        )
    if not bool(torch.isfinite(values).all()):
        raise ValueError("curve contains NaN or infinite values.")
    return float(torch.trapezoid(values, grid, dim=1).mean())


def _check_inputs(inputs: Any) -> Tensor:
    if not isinstance(inputs, Tensor):
        raise TypeError(f"inputs must be a tensor, got {type(inputs).__name__}.")
    if inputs.dim() < 2 or inputs.shape[0] == 0:
        raise ValueError(
            f"inputs must be a non-empty batch (N, ...) with at least one feature dimension, "
            f"got shape {tuple(inputs.shape)}."
        )
    if inputs.is_floating_point() and not bool(torch.isfinite(inputs).all()):
        raise ValueError("inputs contains NaN or infinite values.")
    return inputs


def _check_attributions(attributions: Any, inputs: Tensor) -> Tensor:
    if not isinstance(attributions, Tensor):
        raise TypeError(f"attributions must be a tensor, got {type(attributions).__name__}.")
    if attributions.shape != inputs.shape:
        raise ValueError(
            f"attributions has shape {tuple(attributions.shape)} but inputs has "
            f"{tuple(inputs.shape)}; they must match."
        )
    if attributions.device != inputs.device:
        raise ValueError(
            f"attributions is on {attributions.device} but inputs is on {inputs.device}."
        )
    if attributions.is_complex() or not bool(torch.isfinite(attributions.double()).all()):
        raise ValueError("attributions must be real and finite (found NaN, inf or complex).")
    return attributions


def _check_feature_mask(feature_mask: Tensor | None, inputs: Tensor) -> tuple[Tensor, int]:
    """Return the mask as ``(N, elements)`` long ids and the number of ids."""
    n = inputs.shape[0]
    elements = inputs[0].numel()
    if feature_mask is None:
        ids = torch.arange(elements, device=inputs.device).expand(n, -1)
        return ids, elements
    if not isinstance(feature_mask, Tensor):
        raise TypeError(f"feature_mask must be a tensor, got {type(feature_mask).__name__}.")
    if feature_mask.is_floating_point() or feature_mask.is_complex():
        raise TypeError(f"feature_mask must hold integer ids, got dtype {feature_mask.dtype}.")
    if feature_mask.device != inputs.device:
        raise ValueError(
            f"feature_mask is on {feature_mask.device} but inputs is on {inputs.device}."
        )
    _check_broadcasts(
        feature_mask,
        "feature_mask",
        inputs,
        "use e.g. (1, *inputs.shape[1:]) or a shape with 1 for grouped dimensions",
    )
    ids = feature_mask.long().expand(inputs.shape).reshape(n, -1)
    if bool((ids < 0).any()):
        raise ValueError("feature_mask has negative ids; ids must be 0, 1, ..., d-1.")
    return ids, int(ids.max()) + 1


def _check_baselines(baselines: Any, inputs: Tensor) -> Tensor:
    if isinstance(baselines, numbers.Real) and not isinstance(baselines, bool):
        if not math.isfinite(float(baselines)):
            raise ValueError(f"baselines must be finite, got {baselines}.")
        scalar = torch.tensor(float(baselines), dtype=torch.float64, device=inputs.device)
        return _integral_for(scalar, inputs).to(inputs.dtype)
    if not isinstance(baselines, Tensor):
        raise TypeError(f"baselines must be a number or a tensor, got {type(baselines).__name__}.")
    _check_broadcasts(
        baselines, "baselines", inputs, "use batch size 1 or N and the inputs' other dimensions"
    )
    if baselines.device != inputs.device:
        raise ValueError(f"baselines is on {baselines.device} but inputs is on {inputs.device}.")
    if baselines.is_floating_point() and not bool(torch.isfinite(baselines).all()):
        raise ValueError("baselines contains NaN or infinite values.")
    return _integral_for(baselines, inputs).to(inputs.dtype)


def _check_broadcasts(tensor: Tensor, name: str, inputs: Tensor, fix: str) -> None:
    """Refuse a tensor that does not broadcast to the inputs' shape, saying how to fix it."""
    try:
        shape = torch.broadcast_shapes(tensor.shape, inputs.shape)
    except RuntimeError:
        shape = None
    if shape != inputs.shape:
        raise ValueError(
            f"{name} of shape {tuple(tensor.shape)} does not broadcast to inputs "
            f"{tuple(inputs.shape)}; {fix}."
        )


def _integral_for(baselines: Tensor, inputs: Tensor) -> Tensor:
    # Integer inputs are token ids: a fractional baseline would be silently truncated.
    if not inputs.is_floating_point() and bool((baselines != baselines.round()).any()):
        raise ValueError(
            f"inputs hold integers ({inputs.dtype}, e.g. token ids) but baselines is not a "
            "whole number; pass a pad or mask id."
        )
    return baselines


def _check_fractions(fractions: Sequence[float] | Tensor | int) -> list[float]:
    if isinstance(fractions, bool):
        raise TypeError("fractions must be a sequence of numbers in [0, 1] or an int, not a bool.")
    if isinstance(fractions, (int, np.integer)):
        steps = int(fractions)
        if steps < 1:
            raise ValueError(f"fractions as an int is a number of steps >= 1, got {steps}.")
        return [0.5 * i / steps for i in range(steps + 1)]
    if isinstance(fractions, Tensor):
        if fractions.dim() != 1:
            raise ValueError(
                f"fractions must be 1-dimensional, got shape {tuple(fractions.shape)}."
            )
        grid = [float(f) for f in fractions]
    else:
        try:
            grid = [float(f) for f in fractions]
        except (TypeError, ValueError) as error:
            raise TypeError(
                "fractions must be a sequence of numbers in [0, 1] or an int number of steps."
            ) from error
    if not grid:
        raise ValueError("fractions is empty; pass at least one fraction.")
    bad = [f for f in grid if not 0.0 <= f <= 1.0]  # also catches NaN
    if bad:
        raise ValueError(f"fractions must lie in [0, 1], got {bad}.")
    return grid


def _as_args(additional_forward_args: Any) -> tuple[Any, ...]:
    if additional_forward_args is None:
        return ()
    if isinstance(additional_forward_args, tuple):
        return additional_forward_args
    return (additional_forward_args,)


def _scores(forward_func: Callable[..., Any], x: Tensor, args: tuple[Any, ...], n: int) -> Tensor:
    out = forward_func(x, *args)
    if not isinstance(out, Tensor):
        raise TypeError(f"forward_func must return a tensor, got {type(out).__name__}.")
    if out.dim() == 1:
        out = out[:, None]
    if out.dim() != 2 or out.shape[0] != n:
        raise ValueError(
            f"forward_func must return scores of shape (N, C) = ({n}, C), got {tuple(out.shape)}."
        )
    return out.detach().to(torch.float64)


def _check_target(target: Any, full: Tensor, n: int) -> Tensor:
    classes = full.shape[1]
    if target is None:
        return full.argmax(dim=1)
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        picked = torch.full((n,), int(target), dtype=torch.long, device=full.device)
    else:
        try:
            picked = torch.as_tensor(target, device=full.device)
        except (TypeError, ValueError) as error:
            raise TypeError(
                "target must be None, an int, or a sequence/tensor of N ints."
            ) from error
        if picked.is_floating_point() or picked.dtype == torch.bool or picked.is_complex():
            raise TypeError(f"target must hold integer class ids, got dtype {picked.dtype}.")
        if picked.shape != (n,):
            raise ValueError(
                f"target must be an int or hold one class per example ({n}), got shape "
                f"{tuple(picked.shape)}."
            )
        picked = picked.long()
    if bool(((picked < 0) | (picked >= classes)).any()):
        raise ValueError(f"target holds a class outside 0..{classes - 1} (the model's outputs).")
    return picked


def _score_of(out: Tensor, classes: Tensor, value: str) -> Tensor:
    """Score of ``classes`` in ``out`` (``(N, C)`` float64 logits)."""
    picked = out.gather(1, classes[:, None])[:, 0]
    if value == "output":
        return picked
    if out.shape[1] == 1:
        # A single logit z: p = sigmoid(z), so log-odds = z and log p = -softplus(-z).
        return picked if value == "log_odds" else -torch.nn.functional.softplus(-picked)
    if value == "log_prob":
        return picked - torch.logsumexp(out, dim=1)
    # log p - log(1 - p) = z_c - logsumexp_{j != c} z_j, stable where p is near 1
    # (1 - softmax would round to 0 and give inf).
    others = out.scatter(1, classes[:, None], float("-inf"))
    return picked - torch.logsumexp(others, dim=1)
