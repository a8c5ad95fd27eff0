"""Post-hoc accuracy: does the model keep its prediction once chosen features are masked?

Masoomi et al. (ICLR 2022, Table 2) mask the features an explanation calls
redundant (the sinks of the redundancy graph) and check that the model's
prediction survives, against masking the features it calls essential.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


def mask_features(
    inputs: Tensor,
    masked: Tensor,
    *,
    feature_mask: Tensor | None = None,
    baselines: Tensor | float | int = 0,
) -> Tensor:
    """``inputs`` with the chosen features of each example set to the baseline.

    Args:
        inputs:
            ``(N, ...)`` batch (floats or token ids).
        masked:
            ``(N, d)`` bool: ``masked[n, f]`` hides feature ``f`` of example ``n``.
        feature_mask:
            Integer feature ids broadcastable to ``inputs`` (batch size 1 or N).
            Default: one feature per element of an example.
        baselines:
            Value of hidden elements: a number or a tensor broadcastable to
            ``inputs``.
    """
    if not isinstance(inputs, Tensor):
        raise TypeError(f"inputs must be a tensor, got {type(inputs).__name__}.")
    n = inputs.shape[0]
    if feature_mask is None:
        ids = torch.arange(inputs[0].numel(), device=inputs.device).reshape(1, *inputs.shape[1:])
    else:
        if not isinstance(feature_mask, Tensor) or feature_mask.is_floating_point():
            raise TypeError("feature_mask must be an integer tensor of feature ids.")
        ids = feature_mask.to(inputs.device).long()
        while ids.dim() < inputs.dim():
            ids = ids.unsqueeze(0)
        try:
            torch.broadcast_shapes(ids.shape, inputs.shape)
        except RuntimeError:
            raise ValueError(
                f"feature_mask of shape {tuple(feature_mask.shape)} does not broadcast to inputs "
                f"of shape {tuple(inputs.shape)}."
            ) from None
        if ids.numel() and int(ids.min()) < 0:
            raise ValueError("feature_mask has negative ids; feature ids must be 0, 1, 2, ...")
    d = int(ids.max()) + 1 if ids.numel() else 0
    if not isinstance(masked, Tensor) or masked.dtype != torch.bool or masked.shape != (n, d):
        shape = tuple(masked.shape) if isinstance(masked, Tensor) else type(masked).__name__
        raise ValueError(f"masked must be a bool tensor of shape ({n}, {d}), got {shape}.")
    ids = ids.expand(inputs.shape)
    hidden = masked.to(inputs.device).gather(1, ids.reshape(n, -1)).reshape(inputs.shape)
    background = torch.as_tensor(baselines, dtype=inputs.dtype, device=inputs.device)
    return torch.where(hidden, background, inputs)


def post_hoc_accuracy(
    forward_func: Callable[..., Any],
    inputs: Tensor,
    masked: Tensor,
    *,
    feature_mask: Tensor | None = None,
    baselines: Tensor | float | int = 0,
    labels: Tensor | None = None,
    additional_forward_args: Any = None,
) -> Tensor:
    """Whether each example keeps its class after masking (``(N,)`` bool).

    The accuracy is the mean of the result. ``labels`` default to the classes
    the model predicts on the unmasked inputs (the paper's post-hoc accuracy:
    agreement with the model, not with the ground truth). Arguments as in
    :func:`mask_features`; ``forward_func`` returns ``(N, C)`` scores.
    """
    if not callable(forward_func):
        raise TypeError(f"forward_func must be callable, got {type(forward_func).__name__}.")
    hidden = mask_features(inputs, masked, feature_mask=feature_mask, baselines=baselines)
    args = () if additional_forward_args is None else additional_forward_args
    args = args if isinstance(args, tuple) else (args,)
    with torch.no_grad():
        if labels is None:
            labels = _classes(forward_func(inputs, *args), inputs.shape[0])
        elif labels.shape != (inputs.shape[0],):
            raise ValueError(
                f"labels must have shape ({inputs.shape[0]},), got {tuple(labels.shape)}."
            )
        predicted = _classes(forward_func(hidden, *args), inputs.shape[0])
    return predicted == labels.to(predicted.device)


def _classes(output: Any, n: int) -> Tensor:
    if not isinstance(output, Tensor) or output.dim() != 2 or output.shape[0] != n:
        shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
        raise ValueError(f"forward_func must return (N, C) = ({n}, C) scores, got {shape}.")
    return output.argmax(dim=1)
