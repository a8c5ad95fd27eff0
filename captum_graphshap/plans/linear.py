"""Stage 3: turn coalition values into attributions.

Pure tensor functions with no model in sight, so they can be checked against
brute-force formulas on synthetic games. Every estimator here is linear in the
values; :class:`SparseLinearMap` is the general form (a sparse ``d x M``
matrix), and :func:`shapley_from_all_coalitions` exploits the hypercube
layout of the exact plan to avoid materialising the dense ``d x 2^d`` matrix.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from .._compat import host_to_device


def shapley_weights(d: int) -> list[float]:
    """``w[s] = s! (d - s - 1)! / d!``: the weight of a coalition of size s
    (without the player) in the Shapley value of a d-player game."""
    return [
        float(Fraction(math.factorial(s) * math.factorial(d - s - 1), math.factorial(d)))
        for s in range(d)
    ]


def myerson_weight(size: int, boundary: int) -> float:
    """``(|U| - 1)! b! / (|U| + b)!``: the probability, in a random order of the
    players, that a player of U comes after the rest of U and before all b
    boundary nodes of U. It is the Shapley weight summed over every coalition
    whose component containing the player is exactly U."""
    return float(
        Fraction(
            math.factorial(size - 1) * math.factorial(boundary), math.factorial(size + boundary)
        )
    )


def shapley_from_all_coalitions(values: Tensor) -> Tensor:
    """Exact Shapley values from the values of all ``2^d`` coalitions.

    Args:
        values:
            ``(N, 2^d)``; column m is the value of the coalition whose members
            are the set bits of m (the order of
            :func:`~captum_graphshap.plans.exact.all_coalitions`).

    Returns:
        ``(N, d)`` in the dtype of ``values``. O(d 2^d) per example.
    """
    batch, count = values.shape
    d = count.bit_length() - 1
    if count != 1 << d:
        raise ValueError(f"values must have 2^d columns, got {count}.")
    if d == 0:
        return values.new_zeros(batch, 0)
    if d <= DENSE_SHAPLEY_MAX_D:
        return values @ _shapley_matrix(d, values.device, values.dtype)
    codes = torch.arange(count, device=values.device)
    sizes = popcount(codes, d)
    weights = torch.tensor(shapley_weights(d), dtype=values.dtype, device=values.device)
    phi = values.new_empty(batch, d)
    for i in range(d):
        # Viewing the columns as (high bits, bit i, low bits) pairs every S
        # without i with S + {i}.
        paired = values.view(batch, count >> (i + 1), 2, 1 << i)
        gains = paired[:, :, 1, :] - paired[:, :, 0, :]
        size_without_i = sizes.view(count >> (i + 1), 2, 1 << i)[:, 0, :]
        phi[:, i] = (gains * weights[size_without_i]).sum(dim=(1, 2))
    return phi


#: Up to this d the exact estimator is one matmul with a cached ``2^d x d``
#: matrix (8 MB in float64 at d = 16); above it the matrix would be too large
#: and the per-axis pairing below takes over.
DENSE_SHAPLEY_MAX_D = 16


@functools.lru_cache(maxsize=16)
def _shapley_matrix(d: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``W[m, i]``: +w(|m| - 1) if i is in coalition m, else -w(|m|)."""
    codes = torch.arange(2**d, device=device)
    members = ((codes[:, None] >> torch.arange(d, device=device)) & 1).bool()
    sizes = members.sum(dim=1)
    weights = torch.tensor([*shapley_weights(d), 0.0], dtype=dtype, device=device)
    with_i = weights[(sizes - 1).clamp(min=0)][:, None]
    without_i = weights[sizes][:, None]
    return torch.where(members, with_i, -without_i)


@dataclass(frozen=True)
class SparseLinearMap:
    """``phi[n, i] = sum_k coeffs[k] * values[n, cols[k]]`` over entries with ``rows[k] = i``.

    A ``num_outputs x M`` sparse matrix stored as coordinate triplets; applying
    it is one gather and one ``index_add_``, on any device.
    """

    rows: Tensor
    cols: Tensor
    coeffs: Tensor
    num_outputs: int

    def to(self, device: torch.device, dtype: torch.dtype) -> SparseLinearMap:
        # built on the host; moved without blocking it (pinned, non_blocking)
        return SparseLinearMap(
            host_to_device(self.rows, device),
            host_to_device(self.cols, device),
            host_to_device(self.coeffs.to(dtype), device),
            self.num_outputs,
        )

    def __call__(self, values: Tensor) -> Tensor:
        return self.apply(values)

    def apply(self, values: Tensor) -> Tensor:
        """``(N, M)`` values -> ``(N, num_outputs)``."""
        linear = self.to(values.device, values.dtype)
        out = values.new_zeros(values.shape[0], self.num_outputs)
        return out.index_add_(1, linear.rows, values[:, linear.cols] * linear.coeffs)


def popcount(codes: Tensor, bits: int) -> Tensor:
    """Set bits of each int64 code among its low ``bits`` bits."""
    if 0 < bits <= 16 and codes.numel() > 2**bits:
        # one gather from a table of every code (stencil plans: millions of codes)
        table = popcount(torch.arange(2**bits, device=codes.device), bits)
        return table[codes & (2**bits - 1)]
    counts = torch.zeros_like(codes)
    for bit in range(bits):
        counts += (codes >> bit) & 1
    return counts
