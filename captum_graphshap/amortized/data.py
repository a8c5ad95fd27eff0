"""Training data in the forms ``fit`` takes: a tensor, a tuple of tensors, a DataLoader."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


def as_tensors(data: Any, name: str) -> tuple[Tensor, ...]:
    """``data`` as a tuple of tensors with one batch dimension.

    A DataLoader (any iterable of batches) is read once: each batch a tensor or
    a tuple/list of tensors, the model's inputs only (a dataset that also
    yields labels would pass them to the model as a second input).
    """
    if isinstance(data, Tensor):
        return (data,)
    if isinstance(data, tuple) and data and all(isinstance(t, Tensor) for t in data):
        return data
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, list, tuple)):
        batches = [
            as_tensors(batch if not isinstance(batch, list) else tuple(batch), name)
            for batch in data
        ]
        if not batches:
            raise ValueError(f"{name} yielded no batches; give it at least one example.")
        if len({len(b) for b in batches}) != 1:
            raise ValueError(f"{name}'s batches have different numbers of tensors.")
        return tuple(torch.cat(parts) for parts in zip(*batches))
    raise TypeError(
        f"{name} must be a tensor, a tuple of tensors (the model's inputs) or a DataLoader "
        f"yielding them, got {type(data).__name__}."
    )


def check_same_batch(tensors: tuple[Tensor, ...], name: str) -> int:
    """The common batch size of ``tensors`` (a ValueError naming ``name`` otherwise)."""
    sizes = {t.shape[0] if t.dim() else -1 for t in tensors}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            f"{name}'s tensors must share one batch dimension, got shapes "
            f"{[tuple(t.shape) for t in tensors]}."
        )
    return sizes.pop()


def rows(tensors: tuple[Tensor, ...], index: Tensor | slice) -> tuple[Tensor, ...]:
    """The examples ``index`` of every tensor."""
    return tuple(t[index] for t in tensors)
