"""Rows per model call learnt by earlier runs, remembered per model, device and row layout.

The automatic batching (:class:`~.batching.Pacer`) grows calls from a few
rows while they get faster. Probing costs: on a GPU the first sizes (16
rows of a 224 x 224 image, 3 rows per example) run at a fraction of the
model's speed, and a method that makes several engine runs (a pilot and the
main plan, the rounds of the budgeted Owen walk) would probe again in each,
as would every later call on the same model. So a run that has found its size
leaves it here, and the next run on the same model, device and row layout
starts there.

Entries hold a weak reference to the model (or to the object a bound method
belongs to): a model that is gone, or another one at the same address, finds
nothing. A model that cannot be weakly referenced is not remembered. A
remembered size is only a start: running out of memory halves it as before.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: Entries kept (least recently used dropped first).
MAX_ENTRIES = 256


@dataclass(frozen=True)
class LearntSize:
    """Rows per call, and whether measurement settled them (else: a lower bound).

    ``final``: larger calls were measured and were no faster (or the memory
    cap was reached), so a run may start there and stop probing. Otherwise
    the run that left it ran out of work while calls were still getting
    faster, and a later run goes on growing from it.
    """

    rows: int
    final: bool


Key = tuple[Any, ...]
#: a key and the weak reference to the model it belongs to (:func:`sizing_key`)
SizingKey = tuple[Key, "weakref.ref[Any]"]
_learnt: OrderedDict[Key, tuple[weakref.ref[Any], LearntSize]] = OrderedDict()


def sizing_key(
    forward_func: Callable[..., Any], device: torch.device, inputs: Sequence[Tensor]
) -> SizingKey | None:
    """The memory's key for a model on a device and its row layout, and the weak
    reference that must still point to the model; None when it cannot be held weakly."""
    owner = getattr(forward_func, "__self__", None)
    target = forward_func if owner is None else owner
    try:
        ref = weakref.ref(target)
    except TypeError:
        return None
    method = getattr(forward_func, "__func__", None)
    layout = tuple((tuple(t.shape[1:]), t.dtype) for t in inputs)
    return (id(target), id(method), str(device), layout), ref


def recall(key: SizingKey | None) -> LearntSize | None:
    """The size learnt for ``key``, if its model is still the one that left it."""
    if key is None:
        return None
    entry = _learnt.get(key[0])
    if entry is None:
        return None
    ref, size = entry
    if ref() is None or ref() is not key[1]():
        del _learnt[key[0]]
        return None
    _learnt.move_to_end(key[0])
    return size


def remember(key: SizingKey | None, size: LearntSize) -> None:
    """Keep ``size`` for ``key``; a lower bound never replaces a larger or final size."""
    if key is None:
        return
    known = recall(key)
    if known is not None and not size.final and (known.final or known.rows >= size.rows):
        return
    _learnt[key[0]] = (key[1], size)
    _learnt.move_to_end(key[0])
    while len(_learnt) > MAX_ENTRIES:
        _learnt.popitem(last=False)


def forget_all() -> None:
    """Drop every learnt size (tests; a model changed in place)."""
    _learnt.clear()
