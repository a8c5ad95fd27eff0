"""The argument checks of :func:`~.coalition_game.prepare_game`, each before any model call.

Every bad argument is a ``TypeError`` or ``ValueError`` naming the argument
and the fix; the steps run in the order ``prepare_game`` calls them, so the
first bad argument is the one reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor

from .._compat import BaselineType, format_baselines, format_references
from .features import FeatureMasks, format_feature_mask

ValueKind = Literal["output", "log_prob"]
VALUE_KINDS: tuple[str, ...] = ("output", "log_prob")
NAN_POLICIES: tuple[str, ...] = ("raise", "propagate")


def check_forward_func(forward_func: Callable[..., Any]) -> None:
    """``forward_func`` must be callable."""
    if not callable(forward_func):
        raise TypeError(f"forward_func must be callable, got {type(forward_func).__name__}.")


def check_options(
    value: str, on_nan: str, reuse_buffers: bool, perturbations_per_eval: int | None
) -> None:
    """The game's options: ``value``, ``on_nan``, ``reuse_buffers``, ``perturbations_per_eval``."""
    if value not in VALUE_KINDS:
        raise ValueError(f"value must be one of {VALUE_KINDS}, got {value!r}.")
    if on_nan not in NAN_POLICIES:
        raise ValueError(f"on_nan must be one of {NAN_POLICIES}, got {on_nan!r}.")
    if not isinstance(reuse_buffers, bool):
        raise TypeError(f"reuse_buffers must be True or False, got {reuse_buffers!r}.")
    if perturbations_per_eval is not None:
        if isinstance(perturbations_per_eval, bool) or not isinstance(perturbations_per_eval, int):
            raise TypeError(
                f"perturbations_per_eval must be a positive int or None, got "
                f"{type(perturbations_per_eval).__name__}."
            )
        if perturbations_per_eval < 1:
            raise ValueError(f"perturbations_per_eval must be >= 1, got {perturbations_per_eval}.")


def format_backgrounds(
    baselines: BaselineType, references: Any, tensors: tuple[Tensor, ...]
) -> tuple[Tensor, ...]:
    """One ``(B, 1 or N, *S)`` tensor per input: B = 1 for a baseline, the
    number of references for a background set."""
    if references is not None:
        if baselines is not None:
            raise ValueError(
                "pass either baselines (one reference point) or references (a background "
                "set to average over), not both."
            )
        return tuple(r.unsqueeze(1) for r in format_references(references, tensors))
    return tuple(b.unsqueeze(0) for b in format_baselines(baselines, tensors))


def format_features(feature_mask: Any, tensors: tuple[Tensor, ...]) -> FeatureMasks:
    """The validated feature masks; at least one feature."""
    features = format_feature_mask(feature_mask, tensors)
    if features.num_features == 0:
        raise ValueError(
            "inputs have no elements to attribute (d = 0 features); pass inputs with at "
            "least one element per example."
        )
    return features


def can_blend(tensors: tuple[Tensor, ...], backgrounds: tuple[Tensor, ...]) -> tuple[bool, ...]:
    """Per input, whether ``lerp`` reproduces ``where`` exactly: floating values whose
    differences cannot overflow (``max|x| + max|b|`` below the dtype's max).

    Every input's answer is read back at once: one host synchronisation.
    """
    floating = [i for i, t in enumerate(tensors) if t.is_floating_point() and t.numel()]
    flags = [False] * len(tensors)
    if not floating:
        return tuple(flags)
    below = torch.stack(
        [
            tensors[i].detach().abs().amax().double()
            + backgrounds[i].detach().abs().amax().double()
            < torch.finfo(tensors[i].dtype).max
            for i in floating
        ]
    ).tolist()
    for i, fits in zip(floating, below):
        flags[i] = bool(fits)
    return tuple(flags)
