"""What a fit fixes, and the checks that refuse a call unlike it before any model call."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame

#: ``target`` at fit: ``"fixed"`` (one output for every example), ``"per_example"``
#: (one per example, columns of a ``(N, C)`` output), ``"all"`` (None: every output)
TARGET_MODES = ("fixed", "per_example", "all")


@dataclasses.dataclass
class FitSettings:
    """The fit's inputs, masks, baselines and target, as ``attribute`` must match them."""

    #: per input: non-batch shape and whether it holds floats
    shapes: list[tuple[int, ...]]
    floating: list[bool]
    #: the shared feature masks ``(1, *S)`` and the number of features
    masks: list[Tensor]
    num_features: int
    #: the shared baselines ``(1, 1, *S)``, one per input
    baselines: list[Tensor]
    target_mode: str
    #: the fixed target as the engine holds it (``(1, ...)``), or None
    fixed_target: Tensor | None
    #: the model's output shape per example (``()`` for one value)
    output_shape: tuple[int, ...]
    #: the network's outputs: 1 for a fixed target, else the model's outputs
    columns: int
    #: model evaluations per training example, and the label estimator
    budget: int
    label_estimator: str
    confidence: float
    #: the split-conformal quantile of scaled residuals and the largest held-out score
    quantile: float
    largest_score: float
    #: the labels' scale the network's raw values are in
    scale: float
    #: token inputs: the vocabulary the explainer's embedding holds
    vocabulary: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain values and CPU tensors, for a ``state_dict``."""
        return {f.name: _to_cpu(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _to_cpu(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


def check_inputs_match(settings: FitSettings, inputs: tuple[Tensor, ...]) -> None:
    """Refuse inputs shaped or typed unlike the fit's (before the baselines are formatted)."""
    shapes = [tuple(t.shape[1:]) for t in inputs]
    if shapes != [tuple(s) for s in settings.shapes]:
        raise ValueError(
            f"inputs have per-example shapes {shapes}, but the explainer was fitted on "
            f"{[tuple(s) for s in settings.shapes]}; an amortized explainer explains inputs "
            "shaped as its training data (fit another one for these)."
        )
    floating = [t.is_floating_point() for t in inputs]
    if floating != settings.floating:
        raise TypeError(
            "inputs are floating where the training inputs were integer (or the other way "
            f"round): {floating} against {settings.floating}."
        )


def check_game_matches(settings: FitSettings, game: CoalitionGame) -> None:
    """Refuse masks or baselines unlike the fit's (ValueError naming them)."""
    if (
        game.features.per_example
        or game.features.num_features != settings.num_features
        or any(
            not torch.equal(m.cpu(), s.to(torch.long))
            for m, s in zip(game.features.masks, settings.masks)
        )
    ):
        raise ValueError(
            "feature_mask differs from the fit's; an amortized explainer attributes to the "
            "features it was trained on. Pass the fit's mask, or none."
        )
    if game.num_references != 1 or any(
        not _same_baseline(b, s) for b, s in zip(game.backgrounds, settings.baselines)
    ):
        raise ValueError(
            "baselines differ from the fit's; the explainer learnt the Shapley values of the "
            "game with the fit's baselines. Pass those, or None (which means the fit's)."
        )


def _same_baseline(background: Tensor, fitted: Tensor) -> bool:
    """Whether a call's ``(1, 1 or N, ...)`` baselines are the fit's ``(1, 1, *S)`` (both may
    be broadcast): one baseline per example is the fit's when each equals it."""
    try:
        shape = torch.broadcast_shapes(background.shape, fitted.shape)
    except RuntimeError:
        return False
    return torch.equal(background.cpu().expand(shape), fitted.to(background.dtype).expand(shape))
