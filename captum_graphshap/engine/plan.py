"""The plan type: which coalitions to evaluate, and the estimator that reads their values.

A plan never holds a dense ``(M, d)`` matrix unless it is small: coalitions are
stored in the form whose memory grows with what defines them, and the engine
expands them into boolean rows one chunk at a time (:meth:`CoalitionSet.take`).

* :class:`DenseCoalitions`: a ``(M, d)`` bool matrix, for plans that are
  small by construction (exact Shapley up to ``d = 20``, sampled kernels);
* :class:`MemberCoalitions`: member ids per coalition (CSR), optionally
  complemented (``D`` minus the members), for graph plans whose coalitions
  have a few members each, or all but a few;
* :class:`PrefixCoalitions`: the ``d + 1`` prefixes of sampled orderings,
  stored as the orderings' ranks;
* :class:`IntervalCoalitions`: index ranges ``[start, end]`` (the connected
  sets of a line), two ids per coalition.

Deduplication works on 64-bit keys computed from the stored form
(:meth:`CoalitionSet.weighted_sums`), so its memory is a few words per
coalition, never ``d`` bits per coalition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._compat import host_to_device

#: Coalitions expanded at once when a key is computed from dense rows.
KEY_CHUNK_ELEMENTS = 2**24


class CoalitionSet:
    """``M`` coalitions over ``d`` features, expandable to bool rows on demand."""

    num_features: int

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        raise NotImplementedError

    def take(self, index: Tensor) -> Tensor:
        """Bool ``(len(index), d)`` rows of the coalitions ``index``, on ``index``'s device."""
        raise NotImplementedError

    def to(self, device: torch.device) -> CoalitionSet:
        """The same coalitions stored on ``device`` (the engine moves a plan once, so
        expanding a chunk copies nothing between host and GPU)."""
        return self

    def dense(self) -> Tensor:
        """Every coalition as a bool ``(M, d)`` matrix (tests and small plans only)."""
        return self.take(torch.arange(len(self), device=self.device))

    def weighted_sums(self, weights: Tensor) -> Tensor:
        """``out[m, l] = sum_{i in S_m} weights[i, l]`` with int64 wrap-around.

        ``weights`` is ``(d, L)`` int64. With ``weights[i] = 2^i`` the sum is
        the exact bit code of ``S_m``; with random words it is a Zobrist hash.
        The default expands chunks of rows; subclasses compute it from their
        stored form.
        """
        count = len(self)
        out = torch.empty((count, weights.shape[1]), dtype=torch.long, device=weights.device)
        step = max(1, KEY_CHUNK_ELEMENTS // max(1, self.num_features * weights.shape[1]))
        for start in range(0, count, step):
            index = torch.arange(start, min(start + step, count), device=weights.device)
            rows = self.take(index).long()
            out[start : start + len(index)] = (rows.unsqueeze(-1) * weights).sum(dim=1)
        return out


class DenseCoalitions(CoalitionSet):
    """A bool ``(M, d)`` matrix, one row a coalition."""

    def __init__(self, matrix: Tensor) -> None:
        if matrix.dim() != 2:
            raise ValueError(f"coalitions must be a (M, d) matrix, got {tuple(matrix.shape)}.")
        self.matrix = matrix.to(torch.bool)
        self.num_features = matrix.shape[1]

    def __len__(self) -> int:
        return self.matrix.shape[0]

    @property
    def device(self) -> torch.device:
        return self.matrix.device

    def take(self, index: Tensor) -> Tensor:
        return self.matrix.to(index.device)[index]

    def to(self, device: torch.device) -> DenseCoalitions:
        return (
            self if self.device == device else DenseCoalitions(host_to_device(self.matrix, device))
        )

    def dense(self) -> Tensor:
        return self.matrix


class MemberCoalitions(CoalitionSet):
    """Coalitions stored by their members: ``members[offsets[m]:offsets[m + 1]]``.

    With ``complement[m]`` True, coalition ``m`` is every feature *except*
    those members (C-/L-Shapley with ``context="input"``: the ball's absent
    members, all else present). Memory is one id per listed member.
    """

    def __init__(
        self,
        members: Tensor,
        offsets: Tensor,
        num_features: int,
        complement: Tensor | None = None,
    ) -> None:
        self.members = members.to(torch.long)
        self.offsets = offsets.to(device=self.members.device, dtype=torch.long)
        self.num_features = num_features
        self.complement = (
            None if complement is None else complement.to(self.members.device, torch.bool)
        )

    @classmethod
    def from_padded(
        cls, padded: Tensor, num_features: int, complement: Tensor | None = None
    ) -> MemberCoalitions:
        """From a ``(M, w)`` long matrix of member ids, ``-1`` for none."""
        valid = padded >= 0
        offsets = torch.zeros(padded.shape[0] + 1, dtype=torch.long, device=padded.device)
        offsets[1:] = valid.sum(dim=1).cumsum(0)
        return cls(padded[valid], offsets, num_features, complement)

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def device(self) -> torch.device:
        return self.members.device

    def _row_members(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """``(row, member)`` pairs of the coalitions ``index``, row in ``0..len(index)``."""
        index = index.to(self.device)
        starts = self.offsets[index]
        lengths = self.offsets[index + 1] - starts
        row = torch.repeat_interleave(torch.arange(len(index), device=self.device), lengths)
        first = torch.cumsum(lengths, 0) - lengths
        position = starts[row] + torch.arange(row.shape[0], device=self.device) - first[row]
        return row, self.members[position]

    @functools.cached_property
    def width(self) -> int:
        """The most members of one coalition (computed once, before any chunk)."""
        lengths = self.offsets[1:] - self.offsets[:-1]
        return int(lengths.max()) if lengths.numel() else 0

    def to(self, device: torch.device) -> MemberCoalitions:
        if self.device == device:
            return self
        width = self.width
        moved = MemberCoalitions(
            host_to_device(self.members, device),
            host_to_device(self.offsets, device),
            self.num_features,
            None if self.complement is None else host_to_device(self.complement, device),
        )
        moved.__dict__["width"] = width
        return moved

    def take(self, index: Tensor) -> Tensor:
        # Padded to the widest coalition, so no output size depends on the
        # data: no host synchronisation on a GPU (repeat_interleave would sync).
        width = self.width
        index = index.to(self.device)
        count, d = index.shape[0], self.num_features
        out = torch.zeros((count, d + 1), dtype=torch.bool, device=self.device)
        if width and self.members.numel():
            starts = self.offsets[index]
            lengths = self.offsets[index + 1] - starts
            slot = torch.arange(width, device=self.device)
            position = (starts[:, None] + slot).clamp_(max=self.members.numel() - 1)
            ids = torch.where(slot < lengths[:, None], self.members[position], d)
            out.scatter_(1, ids, True)  # absent slots land in the spare column d
        rows = out[:, :d]
        if self.complement is not None:
            rows ^= self.complement[index][:, None]
        return rows.to(index.device)

    def weighted_sums(self, weights: Tensor) -> Tensor:
        weights = weights.to(self.device)
        everything = torch.arange(len(self), device=self.device)
        row, member = self._row_members(everything)
        out = torch.zeros((len(self), weights.shape[1]), dtype=torch.long, device=self.device)
        out.index_add_(0, row, weights[member])
        if self.complement is not None:
            total = weights.sum(dim=0, keepdim=True)
            out = torch.where(self.complement[:, None], total - out, out)
        return out


class PrefixCoalitions(CoalitionSet):
    """The ``d + 1`` prefixes of each sampled ordering, ordering-major.

    ``ranks[o, i]`` is the position of feature i in ordering o; row
    ``o * (d + 1) + m`` is the set of the first ``m`` features of ordering o.
    """

    def __init__(self, ranks: Tensor) -> None:
        self.ranks = ranks.reshape(-1, ranks.shape[-1])
        self.num_features = self.ranks.shape[1]

    def __len__(self) -> int:
        return self.ranks.shape[0] * (self.num_features + 1)

    @property
    def device(self) -> torch.device:
        return self.ranks.device

    def to(self, device: torch.device) -> PrefixCoalitions:
        return self if self.device == device else PrefixCoalitions(self.ranks.to(device))

    def take(self, index: Tensor) -> Tensor:
        index = index.to(self.device)
        ordering = index // (self.num_features + 1)
        size = index % (self.num_features + 1)
        return self.ranks[ordering] < size[:, None]

    def weighted_sums(self, weights: Tensor) -> Tensor:
        weights = weights.to(self.device)
        order = torch.argsort(self.ranks, dim=1)  # features in the order they join
        joined = weights[order]  # (O, d, L)
        sums = torch.cumsum(joined, dim=1)
        zeros = torch.zeros_like(sums[:, :1])
        return torch.cat([zeros, sums], dim=1).reshape(-1, weights.shape[1])


class IntervalCoalitions(CoalitionSet):
    """Coalitions that are index ranges ``[starts[m], ends[m]]`` (empty when start > end).

    The connected sets of a line; memory is two ids per coalition.
    """

    def __init__(self, starts: Tensor, ends: Tensor, num_features: int) -> None:
        self.starts = starts.to(torch.long)
        self.ends = ends.to(device=self.starts.device, dtype=torch.long)
        self.num_features = num_features

    def __len__(self) -> int:
        return self.starts.shape[0]

    @property
    def device(self) -> torch.device:
        return self.starts.device

    def to(self, device: torch.device) -> IntervalCoalitions:
        if self.device == device:
            return self
        return IntervalCoalitions(self.starts.to(device), self.ends.to(device), self.num_features)

    def take(self, index: Tensor) -> Tensor:
        position = torch.arange(self.num_features, device=index.device)
        starts = self.starts.to(index.device)[index]
        ends = self.ends.to(index.device)[index]
        return (position[None, :] >= starts[:, None]) & (position[None, :] <= ends[:, None])

    def weighted_sums(self, weights: Tensor) -> Tensor:
        weights = weights.to(self.device)
        cumulative = torch.cat([torch.zeros_like(weights[:1]), torch.cumsum(weights, dim=0)])
        empty = self.starts > self.ends
        ends = torch.where(empty, self.starts - 1, self.ends)
        return cumulative[ends + 1] - cumulative[self.starts.clamp(max=self.num_features)]


#: values -> per-feature attributions ``(N, d)``; a method whose estimate has
#: several parts (Bivariate Shapley: the matrix and the univariate values)
#: returns them as a tuple
Estimator = Callable[[Tensor], Any]


@dataclass(frozen=True, eq=False)
class Plan:
    """A coalition plan and its estimator: the whole method, less the model.

    ``estimator`` maps the plan's values to per-feature attributions: for a
    plan shared by the batch (``example_index`` None), ``(N, M)`` values to
    ``(N, d)``; for a plan whose rows belong to single examples, the
    ``(M,)`` values to ``(N, d)``. ``distinct`` promises the coalitions (per
    example) are distinct, which skips deduplication.
    """

    coalitions: CoalitionSet
    estimator: Estimator
    example_index: Tensor | None = None
    distinct: bool = False

    def __len__(self) -> int:
        return len(self.coalitions)

    @property
    def shared(self) -> bool:
        return self.example_index is None


def as_coalition_set(coalitions: Tensor | CoalitionSet) -> CoalitionSet:
    """A :class:`CoalitionSet` from a dense bool matrix or an existing set."""
    return coalitions if isinstance(coalitions, CoalitionSet) else DenseCoalitions(coalitions)


def coalition_keys(coalitions: CoalitionSet, extra_bits: int = 0) -> Tensor:
    """Keys equal exactly when coalitions are equal: ``(M, 1)`` or ``(M, 2)`` int64.

    Up to ``62 - extra_bits`` features the key is the bit code itself (exact);
    beyond, two independent 64-bit Zobrist hashes (a collision among a
    million coalitions has probability about ``2^-88``).
    """
    d = coalitions.num_features
    device = coalitions.device
    if d + extra_bits <= 62:
        return coalitions.weighted_sums(_bit_words(d, device))
    return coalitions.weighted_sums(_zobrist_words(d, device))


@functools.lru_cache(maxsize=64)
def _bit_words(d: int, device: torch.device) -> Tensor:
    """``2^i`` for feature ``i``, as a ``(d, 1)`` int64 column (cached: keys are per call)."""
    return (torch.ones(d, dtype=torch.long) << torch.arange(d))[:, None].to(device)


@functools.lru_cache(maxsize=16)
def _zobrist_words(d: int, device: torch.device) -> Tensor:
    """Two fixed random int64 words per feature (the same every call: keys are comparable)."""
    generator = torch.Generator(device="cpu").manual_seed(0x5EED)
    words = torch.randint(-(2**63), 2**63 - 1, (d, 2), dtype=torch.long, generator=generator)
    return words.to(device)


def stack_coalitions(stores: list[CoalitionSet], num_features: int) -> CoalitionSet:
    """One store holding the coalitions of several stores, in order, over ``num_features``.

    Per-example plans (one graph per example) are concatenated this way;
    each store may have fewer features than ``num_features`` (ids beyond its
    own are absent, or present in a complemented row: features an example
    lacks occur nowhere in its mask, so their state does not matter).
    """
    members, lengths, complements = [], [], []
    for store in stores:
        if isinstance(store, MemberCoalitions):
            members.append(store.members)
            lengths.append(store.offsets[1:] - store.offsets[:-1])
            flags = store.complement
        else:
            rows, ids = store.dense().nonzero(as_tuple=True)
            members.append(ids)
            lengths.append(torch.bincount(rows, minlength=len(store)))
            flags = None
        complements.append(
            torch.zeros(len(store), dtype=torch.bool, device=store.device)
            if flags is None
            else flags
        )
    device = members[0].device
    length = torch.cat([x.to(device) for x in lengths])
    offsets = torch.zeros(length.shape[0] + 1, dtype=torch.long, device=device)
    offsets[1:] = length.cumsum(0)
    complement = torch.cat([c.to(device) for c in complements])
    return MemberCoalitions(
        torch.cat([m.to(device) for m in members]),
        offsets,
        num_features,
        complement if bool(complement.any()) else None,
    )
