"""Deduplication: each distinct coalition (or example, coalition, reference row) evaluated once.

Rows are compared by 64-bit keys computed from the stored form of a plan
(:func:`~.plan.coalition_keys`), so memory is a few words per row, never
``d`` bits. :class:`RowSource` then expands only the distinct rows, one chunk
at a time.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .plan import CoalitionSet, DenseCoalitions, coalition_keys


class RowSource:
    """The distinct coalitions of a plan, expanded to bool rows one chunk at a time."""

    def __init__(self, store: CoalitionSet, representative: Tensor | None) -> None:
        self.store = store
        self.representative = representative

    def __len__(self) -> int:
        return len(self.store) if self.representative is None else self.representative.shape[0]

    def take(self, index: Tensor) -> Tensor:
        """Bool rows of the distinct coalitions ``index``."""
        if self.representative is not None:
            index = self.representative[index]
        return self.store.take(index)


def distinct_keys(keys: Tensor) -> tuple[Tensor, Tensor]:
    """The first row of each distinct key and, per row, its distinct key's position.

    ``keys`` is ``(M, L)`` int64: a 1-D sort when ``L = 1``, lexicographic
    otherwise; memory is a few words per row, never ``d`` bits.
    """
    if keys.shape[1] == 1:
        unique, inverse = torch.unique(keys[:, 0], return_inverse=True)
    else:
        unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    count = keys.shape[0]
    representative = torch.full((unique.shape[0],), count, dtype=torch.long, device=keys.device)
    representative.scatter_reduce_(
        0, inverse, torch.arange(count, device=keys.device), reduce="amin"
    )
    return representative, inverse


def row_keys(
    store: CoalitionSet, example_index: Tensor, reference_index: Tensor | None, batch: int
) -> Tensor:
    """Keys of (example, coalition, reference) rows: one packed int64 when it fits."""
    example_bits = max(1, (batch - 1).bit_length())
    reference_bits = 0
    if reference_index is not None:
        reference_bits = max(1, int(reference_index.max().item()).bit_length())
    keys = coalition_keys(store, extra_bits=example_bits + reference_bits)
    d = store.num_features
    if keys.shape[1] == 1:
        packed = keys[:, 0] | (example_index << d)
        if reference_index is not None:
            packed = packed | (reference_index << (d + example_bits))
        return packed[:, None]
    columns = [keys, example_index[:, None]]
    if reference_index is not None:
        columns.append(reference_index[:, None])
    return torch.cat(columns, dim=1)


def unique_coalitions(coalitions: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct rows of a ``(M, d)`` bool matrix and the inverse index."""
    representative, inverse = distinct_keys(coalition_keys(DenseCoalitions(coalitions)))
    return coalitions[representative], inverse
