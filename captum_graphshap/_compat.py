"""Captum's input conventions, re-implemented and validated.

Captum keeps these helpers in ``captum._utils``, which is private and changes
between releases, so the few we need live here. Unlike Captum's versions every
check raises a ``ValueError``/``TypeError`` that names the argument and the fix
(Captum uses ``assert``), and every check runs before any model call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np
import torch
from torch import Tensor

BaselineType = None | Tensor | int | float | tuple[Tensor | int | float, ...]
TargetType = None | int | tuple[int, ...] | Tensor | list[int] | list[tuple[int, ...]]


def host_to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """``tensor`` on ``device``; a host tensor goes to a GPU without blocking the host.

    A copy from pageable host memory synchronises with the GPU; from pinned
    memory with ``non_blocking`` it is queued on the stream (the caching host
    allocator keeps the pinned block until the copy has run). Plans and
    targets built on the host reach the GPU this way, once per call.
    """
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def format_inputs(inputs: Any) -> tuple[tuple[Tensor, ...], bool]:
    """Return ``inputs`` as a tuple of tensors and whether it was a tuple.

    All tensors must share the batch size and the device; floating tensors must
    be finite.
    """
    is_tuple = isinstance(inputs, tuple)
    tensors = inputs if is_tuple else (inputs,)
    if len(tensors) == 0:
        raise ValueError("inputs is an empty tuple; pass a tensor or a tuple of tensors.")
    for position, tensor in enumerate(tensors):
        if not isinstance(tensor, Tensor):
            raise TypeError(
                f"inputs must be a tensor or a tuple of tensors, got {_describe(tensor)}"
                + (f" at position {position}" if is_tuple else "")
                + "."
            )
        if tensor.dim() == 0:
            raise ValueError(
                "inputs must have a batch dimension first; got a 0-dim tensor. "
                "Use x.unsqueeze(0) for a single example."
            )
        if tensor.is_complex():
            raise TypeError(
                f"inputs has dtype {tensor.dtype}; use a floating, integer or bool tensor."
            )
        if tensor.device.type == "meta":
            raise ValueError(
                "inputs are on the meta device, which holds no values to explain; move them "
                "to a real device (cpu, cuda) first."
            )
    batch = tensors[0].shape[0]
    device = tensors[0].device
    for position, tensor in enumerate(tensors):
        if tensor.shape[0] != batch:
            raise ValueError(
                f"inputs[{position}] has batch size {tensor.shape[0]} but inputs[0] has "
                f"{batch}; every tensor of inputs must share the first (batch) dimension."
            )
        if tensor.device != device:
            raise ValueError(
                f"inputs[{position}] is on {tensor.device} but inputs[0] is on {device}; "
                "move all inputs to one device."
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            kind = "NaN" if bool(torch.isnan(tensor).any()) else "an infinite value"
            raise ValueError(
                f"inputs{f'[{position}]' if is_tuple else ''} contains {kind}; "
                "attributions of non-finite inputs are undefined. Clean the input first."
            )
    if batch == 0:
        raise ValueError("inputs has batch size 0; pass at least one example.")
    return tensors, is_tuple


def format_baselines(
    baselines: BaselineType, inputs: tuple[Tensor, ...], name: str = "baselines"
) -> tuple[Tensor, ...]:
    """Return one baseline tensor per input, shaped ``(1 or N, *input.shape[1:])``.

    ``None`` means zero, a scalar is broadcast, a tensor must have batch size 1
    or N and the input's other dimensions. Integer inputs (token ids) need an
    integer-valued baseline (a pad or mask id).
    """
    if baselines is None:
        baselines = tuple(0 for _ in inputs)
    elif not isinstance(baselines, tuple):
        baselines = (baselines,)
    if len(baselines) != len(inputs):
        raise ValueError(
            f"{name} has {len(baselines)} entries but inputs has {len(inputs)} tensors; "
            f"pass one baseline per input tensor."
        )
    formatted = []
    for position, (baseline, tensor) in enumerate(zip(baselines, inputs)):
        label = f"{name}[{position}]" if len(inputs) > 1 else name
        if (isinstance(baseline, bool) and tensor.dtype != torch.bool) or not isinstance(
            baseline, (Tensor, numbers.Real)
        ):
            raise TypeError(
                f"{label} must be None, a number or a tensor, got {_describe(baseline)}."
            )
        from_number = isinstance(baseline, numbers.Real)
        if isinstance(baseline, numbers.Real):
            baseline = _number_baseline(baseline, tensor, label)
        elif baseline.device != tensor.device:
            raise ValueError(
                f"{label} is on {baseline.device} but inputs are on {tensor.device}; "
                f"move it with .to(inputs.device)."
            )
        baseline = _baseline_shaped(baseline, inputs, position, label)
        if not from_number:  # a number was checked in Python, without reading the device
            _check_tensor_baseline_values(baseline, tensor, label)
        formatted.append(baseline.to(tensor.dtype))
    return tuple(formatted)


def _number_baseline(baseline: numbers.Real, tensor: Tensor, label: str) -> Tensor:
    """A checked number baseline as a 0-dim tensor on the input's device."""
    if not math.isfinite(float(baseline)):
        raise ValueError(f"{label} is {baseline}; use a finite baseline value.")
    _check_number_baseline(baseline, tensor, label)
    # filled on the device: no host-to-device copy (a copy would synchronise)
    value = (
        baseline
        if isinstance(baseline, bool)
        else int(baseline)
        if isinstance(baseline, numbers.Integral)
        else float(baseline)
    )
    return torch.full((), value, device=tensor.device)


def _baseline_shaped(
    baseline: Tensor, inputs: tuple[Tensor, ...], position: int, label: str
) -> Tensor:
    """A 0-dim baseline as ``(1, 1, ...)``; else check it is ``(1 or N, *input.shape[1:])``."""
    tensor = inputs[position]
    batch = inputs[0].shape[0]
    if baseline.dim() == 0:
        return baseline.reshape((1,) * tensor.dim())
    if baseline.shape[1:] != tensor.shape[1:] or baseline.shape[0] not in (1, batch):
        raise ValueError(
            f"{label} has shape {tuple(baseline.shape)} but inputs"
            f"{f'[{position}]' if len(inputs) > 1 else ''} has shape "
            f"{tuple(tensor.shape)}; a baseline must be a scalar or have shape "
            f"(1, {', '.join(map(str, tensor.shape[1:]))}) or "
            f"({batch}, {', '.join(map(str, tensor.shape[1:]))})."
        )
    return baseline


def _check_tensor_baseline_values(baseline: Tensor, tensor: Tensor, label: str) -> None:
    """A tensor baseline's values: finite, 0/1 for bool inputs, integers for integer inputs."""
    if baseline.is_floating_point() and not bool(torch.isfinite(baseline).all()):
        raise ValueError(f"{label} contains NaN or infinite values; use finite values.")
    if tensor.dtype == torch.bool and not bool(((baseline == 0) | (baseline == 1)).all()):
        raise ValueError(f"{label} must be True/False (or 0/1) for bool inputs.")
    if not tensor.is_floating_point():
        if baseline.is_floating_point() and not bool((baseline == baseline.round()).all()):
            raise ValueError(
                f"{label} has non-integer values but inputs are integer (token ids, "
                f"dtype {tensor.dtype}); use an integer baseline such as the pad or "
                "mask token id."
            )


def _check_number_baseline(baseline: numbers.Real, tensor: Tensor, label: str) -> None:
    """The checks of a tensor baseline, for a number: bool inputs take 0/1, integer inputs
    integers."""
    if tensor.is_floating_point() and abs(float(baseline)) > torch.finfo(tensor.dtype).max:
        raise ValueError(
            f"{label} is {baseline}, beyond the largest {tensor.dtype} value of the inputs: "
            "it would be infinite; use a finite baseline value."
        )
    if tensor.dtype == torch.bool and float(baseline) not in (0.0, 1.0):
        raise ValueError(f"{label} must be True/False (or 0/1) for bool inputs.")
    if not tensor.is_floating_point() and not float(baseline).is_integer():
        raise ValueError(
            f"{label} has non-integer values but inputs are integer (token ids, "
            f"dtype {tensor.dtype}); use an integer baseline such as the pad or "
            "mask token id."
        )


def format_references(references: Any, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Return a background set as one ``(B, *input.shape[1:])`` tensor per input."""
    refs = references if isinstance(references, tuple) else (references,)
    if len(refs) != len(inputs):
        raise ValueError(
            f"references has {len(refs)} tensors but inputs has {len(inputs)}; "
            "pass one background tensor per input tensor."
        )
    count = None
    out = []
    for position, (ref, tensor) in enumerate(zip(refs, inputs)):
        label = f"references[{position}]" if len(inputs) > 1 else "references"
        if not isinstance(ref, Tensor):
            raise TypeError(f"{label} must be a tensor, got {_describe(ref)}.")
        if ref.dim() != tensor.dim() or ref.shape[1:] != tensor.shape[1:]:
            raise ValueError(
                f"{label} has shape {tuple(ref.shape)}; a background set for inputs of "
                f"shape {tuple(tensor.shape)} must have shape (B, "
                f"{', '.join(map(str, tensor.shape[1:]))})."
            )
        if ref.device != tensor.device:
            raise ValueError(
                f"{label} is on {ref.device} but inputs are on {tensor.device}; "
                "move it with .to(inputs.device)."
            )
        if count is not None and ref.shape[0] != count:
            raise ValueError(
                f"{label} has {ref.shape[0]} references but references[0] has {count}."
            )
        count = ref.shape[0]
        if count == 0:
            raise ValueError(f"{label} is empty; pass at least one reference.")
        if ref.is_floating_point() and not bool(torch.isfinite(ref).all()):
            raise ValueError(f"{label} contains NaN or infinite values.")
        out.append(ref.to(tensor.dtype))
    return tuple(out)


def format_additional_forward_args(args: Any) -> tuple[Any, ...]:
    """Captum's convention: anything that is not a tuple is one argument."""
    if args is None:
        return ()
    return args if isinstance(args, tuple) else (args,)


def format_target(target: TargetType, batch: int, device: torch.device) -> Tensor | None:
    """Turn a Captum target into a ``(N, t)`` long tensor of output indices.

    ``t`` is the number of indexed output dimensions after the batch (0 when
    ``target`` is None). Ranges are checked later against the real output shape.
    """
    if target is None:
        return None
    if isinstance(target, bool):
        raise TypeError("target must be an int, a tuple of ints, a tensor or a list; got a bool.")
    if isinstance(target, int):
        rows: list[tuple[int, ...]] = [(target,)] * batch
    elif isinstance(target, tuple):
        if not target or not all(is_int(t) for t in target):
            raise TypeError(f"target tuple must hold ints, got {target!r}.")
        rows = [tuple(int(t) for t in target)] * batch
    elif isinstance(target, Tensor):
        if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
            raise TypeError(f"target tensor must hold integer class indices, got {target.dtype}.")
        flat = target.reshape(-1).to(device=device, dtype=torch.long)
        if flat.numel() == 1:
            return flat.reshape(1, 1).expand(batch, 1)
        if target.dim() != 1 or flat.numel() != batch:
            raise ValueError(
                f"target tensor has shape {tuple(target.shape)}; pass one element or one "
                f"index per example, shape ({batch},)."
            )
        return flat.reshape(batch, 1)
    elif isinstance(target, list):
        if len(target) != batch:
            raise ValueError(
                f"target list has {len(target)} entries but inputs has {batch} examples; "
                "give one target per example."
            )
        rows = []
        for entry in target:
            if is_int(entry):
                rows.append((int(entry),))
            elif isinstance(entry, tuple) and entry and all(is_int(t) for t in entry):
                rows.append(tuple(int(t) for t in entry))
            else:
                raise TypeError(
                    f"target list entries must be ints or tuples of ints, got {entry!r}."
                )
        if len({len(r) for r in rows}) != 1:
            raise ValueError("target list mixes tuples of different lengths.")
    else:
        raise TypeError(
            f"target must be None, an int, a tuple, a tensor or a list, got {_describe(target)}."
        )
    return host_to_device(torch.tensor(rows, dtype=torch.long), device)


def output_flat_index(target: Tensor, output_shape: Sequence[int]) -> Tensor:
    """Flat index into ``output.reshape(R, -1)`` for ``(N, t)`` targets.

    Raises the ``target`` error here, with the real output shape, when an index
    is out of range.
    """
    dims = list(output_shape)
    if target.shape[1] > len(dims):
        raise ValueError(
            f"target has {target.shape[1]} indices but the model output per example has "
            f"shape {tuple(dims)}; pass target with at most {len(dims)} indices."
        )
    if target.device.type == "cpu" and target.numel() <= 64:
        # The usual small CPU target: Python checks cost a fraction of the
        # tensor ops below, which dominate calls of about a millisecond.
        return _small_flat_index(target, dims)
    dims_t = torch.tensor(dims[: target.shape[1]], device=target.device)
    out_of_range = (target >= dims_t) | (target < -dims_t)
    if bool(out_of_range.any()):
        bad = target[out_of_range.any(dim=1)][0].tolist()
        raise ValueError(
            f"target {bad if len(bad) > 1 else bad[0]} is out of range for model output of "
            f"shape {tuple(dims)} per example; valid indices are 0..{dims[0] - 1}"
            + (" along the first output dimension." if len(dims) > 1 else ".")
        )
    target = torch.where(target < 0, target + dims_t, target)
    trailing = math.prod(dims[target.shape[1] :])
    if trailing != 1:
        raise ValueError(
            f"the model output per example has shape {tuple(dims)}; after target it still "
            f"has {trailing} values. Pass a target that selects one scalar per example."
        )
    strides = [math.prod(dims[j + 1 : target.shape[1]]) for j in range(target.shape[1])]
    stride_t = torch.tensor(strides, device=target.device, dtype=torch.long)
    return (target * stride_t).sum(dim=1)


def _small_flat_index(target: Tensor, dims: list[int]) -> Tensor:
    """:func:`output_flat_index` in Python, for a small CPU target (same errors)."""
    width = target.shape[1]
    trailing = math.prod(dims[width:])
    strides = [math.prod(dims[j + 1 : width]) for j in range(width)]
    flat = []
    for row in target.tolist():
        if any(not -n <= t < n for t, n in zip(row, dims)):
            raise ValueError(
                f"target {row if len(row) > 1 else row[0]} is out of range for model output "
                f"of shape {tuple(dims)} per example; valid indices are 0..{dims[0] - 1}"
                + (" along the first output dimension." if len(dims) > 1 else ".")
            )
        flat.append(sum((t % n) * s for t, n, s in zip(row, dims, strides)))
    if trailing != 1:
        raise ValueError(
            f"the model output per example has shape {tuple(dims)}; after target it still "
            f"has {trailing} values. Pass a target that selects one scalar per example."
        )
    return torch.tensor(flat, dtype=torch.long)


def float64_array(value: Any, name: str, expected: str) -> np.ndarray:
    """A tensor or array-like of real numbers as a float64 numpy array.

    ``expected`` completes the TypeError raised for anything else: "{name} must be {expected}".
    """
    if isinstance(value, Tensor):
        if value.is_complex():
            raise TypeError(f"{name} must be real, got a complex tensor.")
        # float64 first: numpy has no bfloat16, and .numpy() refuses tensors needing grad.
        return value.detach().to("cpu", torch.float64).numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}.") from error


def is_int(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _describe(value: object) -> str:
    return type(value).__name__
