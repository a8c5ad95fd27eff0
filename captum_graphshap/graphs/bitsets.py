"""Node sets as Python ``int`` bitmasks (bit ``i`` is node ``i``).

Union, intersection and "lowest member" are single C-level operations on
arbitrarily many nodes, which is what makes the set algorithms of
:mod:`~captum_graphshap.graphs.connected_sets` fast in pure Python. This
module converts between bitmasks, node ids and boolean rows.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ._validation import as_numpy

__all__ = [
    "MASK_CHUNK",
    "NodesLike",
    "bits",
    "grow_balls",
    "mask_members",
    "masks_to_rows",
    "nodes_to_mask",
    "pack",
    "sorted_rows",
    "unpack",
]

#: A node set: node ids, or a boolean membership mask of length ``num_nodes``.
NodesLike = Iterable[int] | np.ndarray | Tensor

#: Masks converted to member ids at once (bounds the bool buffer).
MASK_CHUNK = 2**16

_REVERSED_BYTE = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint8)
_POPCOUNT_BYTE = np.array([b.bit_count() for b in range(256)], dtype=np.int64)


def bits(mask: int) -> list[int]:
    """Ids of the set bits of ``mask``, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def pack(masks: Sequence[int], n: int) -> npt.NDArray[np.uint8]:
    """Bitmasks as little-endian packed rows ``(len(masks), ceil(n / 8))``."""
    width = max((n + 7) // 8, 1)
    buffer = b"".join(mask.to_bytes(width, "little") for mask in masks)
    return np.frombuffer(buffer, dtype=np.uint8).reshape(len(masks), width)


def unpack(packed: npt.NDArray[np.uint8], n: int) -> npt.NDArray[np.bool_]:
    """Boolean ``(m, n)`` rows of packed rows (the inverse of :func:`pack`)."""
    # unpackbits yields 0/1 bytes, which are valid bools: view, don't copy.
    return np.unpackbits(packed, axis=1, count=n, bitorder="little").view(np.bool_)


def masks_to_rows(masks: Sequence[int], n: int) -> npt.NDArray[np.bool_]:
    """Boolean ``(len(masks), n)`` rows of bitmasks, via one packed buffer."""
    return unpack(pack(masks, n), n)


def sorted_rows(masks: Sequence[int], n: int) -> Tensor:
    """Bitmasks as a bool ``(m, n)`` tensor, sorted by size then lexicographically.

    Among sets of one size, the lexicographically smaller sorted id list is
    the one holding the lowest node where the two differ. With the bits of
    each byte reversed, the packed rows read big-endian (node 0 most
    significant), so that order is "descending 64-bit words", i.e. ascending
    ``~word``. The sort keys only cover the bytes of nodes that occur, which
    keeps the neighbourhoods of big graphs cheap, and rows are unpacked once,
    already sorted.
    """
    packed = pack(masks, n)
    if packed.shape[0] > 1:
        used = np.flatnonzero(packed.any(axis=0))
        span = packed[:, used[0] : used[-1] + 1]
        sizes = _POPCOUNT_BYTE[span].sum(axis=1)
        big = _REVERSED_BYTE[span]
        big = np.pad(big, ((0, 0), (0, -big.shape[1] % 8)))
        words = np.ascontiguousarray(big).view(">u8")
        keys = [~words[:, j] for j in range(words.shape[1] - 1, -1, -1)]
        keys.append(sizes)
        packed = packed[np.lexsort(keys)]
    return torch.from_numpy(unpack(packed, n))


def mask_members(masks: Sequence[int], width: int) -> tuple[Tensor, Tensor]:
    """``(row, bit)`` of every set bit of ``width``-bit masks, row-major (bits ascending)."""
    rows, found = [], []
    for start in range(0, len(masks), MASK_CHUNK):
        part = masks[start : start + MASK_CHUNK]
        dense: np.ndarray
        if width <= 63:
            packed = np.asarray(part, dtype="<u8").view(np.uint8).reshape(len(part), 8)
            dense = np.unpackbits(packed, axis=1, count=max(width, 1), bitorder="little")
        else:
            dense = unpack(pack(part, width), width)
        row, bit = np.nonzero(dense)
        rows.append(torch.from_numpy(row.astype(np.int64) + start))
        found.append(torch.from_numpy(bit.astype(np.int64)))
    if not rows:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(rows), torch.cat(found)


def nodes_to_mask(nodes: NodesLike, n: int, name: str = "nodes") -> int:
    """Bitmask of a node set given as ids or as a boolean mask of length ``n``."""
    if isinstance(nodes, (Tensor, np.ndarray)):
        array = as_numpy(nodes, name)
    else:
        array = np.asarray(list(nodes))
    if array.dtype == np.bool_:
        if array.shape != (n,):
            raise ValueError(
                f"{name} as a boolean mask must have shape ({n},), got {tuple(array.shape)}."
            )
        packed = np.packbits(array, bitorder="little")
        return int.from_bytes(packed.tobytes(), "little")
    if array.size == 0:
        return 0
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must be node ids (ints) or a boolean mask of length {n}, got an array "
            f"of dtype {array.dtype} and shape {tuple(array.shape)}."
        )
    if array.min() < 0 or array.max() >= n:
        bad = array[(array < 0) | (array >= n)][:5].tolist()
        raise ValueError(f"{name} must be node ids in 0..{n - 1}, got e.g. {bad}.")
    mask = 0
    for node in set(array.tolist()):
        mask |= 1 << node
    return mask


def grow_balls(balls: list[int], lists: Sequence[Sequence[int]]) -> list[int]:
    """Every node's ball one hop larger: ``balls[v]`` OR its neighbours' balls.

    ``lists[v]`` holds the neighbours of ``v``; ``balls`` (one bitmask per
    node) is not modified.
    """
    return [
        functools.reduce(operator.or_, (balls[u] for u in lists[v]), balls[v])
        for v in range(len(balls))
    ]
