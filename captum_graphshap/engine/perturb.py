"""Perturbed model inputs: coalition masks turned into rows, and the arguments that go with them.

Features in a coalition keep the input, the rest take the baseline (or a
reference of the background set): ``torch.where`` on a mask expanded from the
``(P, d)`` coalitions, or ``lerp`` with 0/1 weights where that gives the same
bits faster. :class:`RowBuilder` writes one chunk's rows, shared by the batch
(:meth:`RowBuilder.shared`) or one per (coalition, example) pair
(:meth:`RowBuilder.rows`); :func:`expand_args_repeat` and
:func:`expand_args_index` give the additional forward arguments the same rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from .features import FeatureMasks


@dataclasses.dataclass(eq=False)
class RowBuilder:
    """The perturbed inputs of one engine run's chunks.

    Args:
        inputs: the game's input tensors, ``(N, *S)`` each.
        features: the game's feature masks.
        backgrounds: one ``(B, 1 or N, *S)`` tensor per input.
        blend: per input, build rows with ``lerp`` instead of ``where``.
        reuse: write every chunk into one reused buffer per input.
    """

    inputs: tuple[Tensor, ...]
    features: FeatureMasks
    backgrounds: tuple[Tensor, ...]
    blend: tuple[bool, ...]
    reuse: dataclasses.InitVar[bool]
    buffers: _RowBuffers = dataclasses.field(init=False)

    def __post_init__(self, reuse: bool) -> None:
        self.buffers = _RowBuffers(self.inputs, reuse=reuse)

    def release(self) -> None:
        """Drop the reused buffers (after out of memory: the next chunk is smaller)."""
        self.buffers.release()

    def shared(self, coalitions: Tensor, reference_id: Tensor) -> tuple[Tensor, ...]:
        """``(P, d)`` coalitions x whole batch -> tensors of ``P * N`` rows."""
        count = coalitions.shape[0]
        weights = _Weights(coalitions)
        out = []
        for position, (tensor, mask, background) in enumerate(
            zip(self.inputs, self.features.masks, self.backgrounds)
        ):
            source = weights.as_type(tensor.dtype if self.blend[position] else torch.bool)
            keep = _keep(source, mask, self.features.id_ranges[position]).view(count, *mask.shape)
            base = background[reference_id] if background.shape[0] > 1 else background
            rows = self.buffers.take(position, count * tensor.shape[0])
            _fill(rows.view(count, *tensor.shape), keep, tensor.unsqueeze(0), base)
            out.append(rows)
        return tuple(out)

    def rows(self, coalitions: Tensor, example: Tensor, reference_id: Tensor) -> tuple[Tensor, ...]:
        """One row per (coalition, example) pair."""
        weights = _Weights(coalitions)
        out = []
        for position, (tensor, mask, background) in enumerate(
            zip(self.inputs, self.features.masks, self.backgrounds)
        ):
            source = weights.as_type(tensor.dtype if self.blend[position] else torch.bool)
            if mask.shape[0] == 1:
                keep = _keep(source, mask, self.features.id_ranges[position]).view(
                    len(example), *mask.shape[1:]
                )
            else:
                flat_mask = mask.reshape(mask.shape[0], -1)[example]
                keep = source.gather(1, flat_mask).view(len(example), *mask.shape[1:])
            ref = background[reference_id]  # (R, 1 or N, *S)
            if ref.shape[1] == 1:
                base = ref[:, 0]
            else:
                base = ref[torch.arange(len(example), device=example.device), example]
            rows = self.buffers.take(position, len(example))
            _fill(rows, keep, tensor[example], base)
            out.append(rows)
        return tuple(out)


def expand_args_repeat(args: tuple[Any, ...], batch_size: int, repeats: int) -> tuple[Any, ...]:
    """The additional forward arguments of ``repeats`` stacked copies of the batch."""
    return tuple(
        torch.cat([arg] * repeats, dim=0) if is_batched(arg, batch_size) else arg for arg in args
    )


def expand_args_index(args: tuple[Any, ...], batch_size: int, example: Tensor) -> tuple[Any, ...]:
    """The additional forward arguments of rows that belong to examples ``example``."""
    return tuple(arg[example] if is_batched(arg, batch_size) else arg for arg in args)


def is_batched(arg: Any, batch_size: int) -> bool:
    """Whether an additional forward argument has one entry per example."""
    # Captum repeats every non-scalar tensor; we also leave alone tensors
    # whose first dimension is not the batch (shared weights, lookup tables).
    return isinstance(arg, Tensor) and arg.dim() > 0 and arg.shape[0] == batch_size


def _keep(coalitions: Tensor, mask: Tensor, id_range: tuple[int, int] | None) -> Tensor:
    """``keep[p, e] = coalitions[p, mask[e]]`` for a shared mask.

    A mask numbering its elements in order is a slice (a view, no copy).
    Otherwise ``gather`` with an expanded index, several times faster than
    advanced indexing ``coalitions[:, mask]``, which dominated the
    perturbation cost of image inputs.
    """
    if id_range is not None:
        return coalitions[:, id_range[0] : id_range[1]]
    flat = mask.reshape(-1)
    return coalitions.gather(1, flat.expand(coalitions.shape[0], -1))


class _Weights:
    """The chunk's coalitions as bool or as a 0/1 float of an input's dtype.

    Converting the small ``(P, d)`` block once, before it is expanded to
    every element, is cheaper than converting the expanded mask per input.
    """

    def __init__(self, coalitions: Tensor) -> None:
        self.by_dtype: dict[torch.dtype, Tensor] = {torch.bool: coalitions}

    def as_type(self, dtype: torch.dtype) -> Tensor:
        if dtype not in self.by_dtype:
            self.by_dtype[dtype] = self.by_dtype[torch.bool].to(dtype)
        return self.by_dtype[dtype]


def _fill(out: Tensor, keep: Tensor, present: Tensor, absent: Tensor) -> None:
    """``out = where(keep, present, absent)``, broadcasting.

    A floating ``keep`` (0/1 of the input's dtype) selects ``lerp(absent,
    present, keep)``: the same bits (ATen evaluates weight 1 as
    ``end - diff * 0`` and weight 0 as ``start + 0 * diff``, exact whenever
    ``diff`` is finite, which :func:`~.prepare.can_blend` checks) at about
    twice the speed of ``where`` with a broadcast condition on CPU.
    """
    if keep.dtype == torch.bool:
        torch.where(keep, present, absent, out=out)
    else:
        torch.lerp(absent, present, keep, out=out)


class _RowBuffers:
    """One reusable input buffer per input tensor.

    A fresh multi-megabyte tensor per model call costs page faults comparable
    to a small model's forward pass; writing every chunk into the same
    buffer (``torch.where(..., out=)``) keeps it warm. Each chunk's output is
    reduced to values before the next chunk overwrites the buffer.
    """

    def __init__(self, inputs: tuple[Tensor, ...], reuse: bool) -> None:
        self.inputs = inputs
        self.reuse = reuse
        self.buffers: list[Tensor | None] = [None] * len(inputs)

    def release(self) -> None:
        self.buffers = [None] * len(self.inputs)

    def take(self, position: int, rows: int) -> Tensor:
        buffer = self.buffers[position]
        if not self.reuse or buffer is None or buffer.shape[0] < rows:
            template = self.inputs[position]
            buffer = template.new_empty((rows, *template.shape[1:]))
            self.buffers[position] = buffer
        return buffer[:rows]
