"""Surrogate games whose Shapley values are known in closed form.

A surrogate ``g`` of the coalition game ``v`` serves two estimators:

* a **control variate**: estimate the Shapley value of the residual game
  ``v - g`` by sampling and add ``phi(g)`` back (unbiased when ``g`` does not
  depend on the samples, e.g. a Taylor expansion from derivatives);
* **regression adjustment**: ``g`` is fitted to the sampled coalitions
  themselves with the Shapley kernel weights; with the linear features among
  its basis the kernel-weighted residual has Shapley value 0 in the limit, so
  ``phi(g)`` is a consistent estimate whose error is that of the residual.

Two families, both pure tensor maths on bool coalitions ``z`` ``(..., d)``:

* :class:`QuadraticSurrogate`
  ``q(S) = c + sum_i a_i 1[i in S] + sum_{i<j} B_ij 1[i, j in S]``, with
  ``phi_i(q) = a_i + 1/2 sum_j B_ij``; :func:`quadratic_from_taylor` builds it
  from the gradient and Hessian blocks of the model at a point of the path
  from the baseline to the input (ControlSHAP's control variate), which
  :func:`~captum_graphshap.engine.derivatives.taylor_expansion` computes;
* :class:`OddCubicSurrogate`: the odd part of a game in the ``+-1``
  coordinates ``s = 2 z - 1`` up to order three,
  ``u(s) = sum_i f_i s_i + sum_{(i,j,k) in T} f_ijk s_i s_j s_k``. The
  Shapley value of the parity ``prod_{i in T} s_i`` is ``2 / |T|`` for each
  member of an odd ``T`` and 0 for an even ``T``; the even part of any game
  has Shapley value 0 (``phi(v(D - S)) = -phi(v)``), so
  ``phi_i = 2 f_i + 2/3 sum_{T ni i} f_T``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class QuadraticSurrogate:
    """``q(S) = c + a . z + sum_{i<j} B_ij z_i z_j`` per example.

    Attributes:
        constant: ``(N,)`` ``c = q(empty)``.
        linear: ``(N, d)`` ``a``.
        pairwise: ``(N, d, d)`` symmetric ``B`` with a zero diagonal.
    """

    constant: Tensor
    linear: Tensor
    pairwise: Tensor

    def shapley(self) -> Tensor:
        """``(N, d)`` ``phi_i(q) = a_i + 1/2 sum_j B_ij``."""
        return self.linear + self.pairwise.sum(dim=2) / 2

    def values(self, coalitions: Tensor, example_index: Tensor | None = None) -> Tensor:
        """``q`` on bool coalitions: ``(N, M)`` for shared ``(M, d)`` rows, or ``(R,)``
        for per-example rows ``(R, d)`` with ``example_index`` ``(R,)``."""
        z = coalitions.to(self.linear.dtype)
        if example_index is None:
            pair = torch.einsum("md,nde,me->nm", z, self.pairwise, z) / 2
            return self.constant[:, None] + self.linear @ z.T + pair
        a = self.linear[example_index]
        b = self.pairwise[example_index]
        pair = torch.einsum("rd,rde,re->r", z, b, z) / 2
        return self.constant[example_index] + (z * a).sum(dim=1) + pair


def quadratic_from_taylor(
    value: Tensor, gradient: Tensor, hessian: Tensor, t: float
) -> QuadraticSurrogate:
    """The quadratic game of a second-order expansion at ``z0 = t 1``.

    With ``g_i = delta_i . grad`` and ``H_ij = delta_i^T H delta_j`` at the
    point ``b + t (x - b)``, ``v(z) ~ value + g . (z - t) + 1/2 (z - t)^T H
    (z - t)``; on binary ``z`` (``z_i^2 = z_i``) that is ``c + a . z +
    sum_{i<j} H_ij z_i z_j`` with ``a_i = g_i + H_ii / 2 - t sum_j H_ij``, so
    ``phi_i = g_i + (1/2 - t) sum_j H_ij`` (the midpoint gradient at ``t = 1/2``).
    """
    hessian = (hessian + hessian.transpose(1, 2)) / 2
    diagonal = torch.diagonal(hessian, dim1=1, dim2=2)
    row = hessian.sum(dim=2)
    d = gradient.shape[1]
    constant = value - t * gradient.sum(dim=1) + t * t * hessian.sum(dim=(1, 2)) / 2
    linear = gradient + diagonal / 2 - t * row
    pairwise = hessian * (1 - torch.eye(d, dtype=hessian.dtype, device=hessian.device))
    return QuadraticSurrogate(constant, linear, pairwise)


# ----------------------------------------------------------------- odd cubic


def all_triples(d: int, device: torch.device | None = None) -> Tensor:
    """``(C(d, 3), 3)`` long: every triple ``i < j < k``."""
    rows = list(itertools.combinations(range(d), 3))
    return torch.tensor(rows, dtype=torch.long, device=device).view(-1, 3)


def odd_features(coalitions: Tensor, triples: Tensor, dtype: torch.dtype) -> Tensor:
    """The odd basis on coalitions ``(M, d)``: ``(M, d + k)`` ``[s_i, s_i s_j s_k]`` for
    shared triples ``(k, 3)`` or, with per-example triples ``(N, k, 3)``, ``(N, M, d + k)``."""
    s = 2 * coalitions.to(dtype) - 1
    # the parities are gathered as rows of s^T (contiguous), not columns of s
    columns = s.T.contiguous()
    if triples.dim() == 2:
        cubic = columns[triples[:, 0]] * columns[triples[:, 1]] * columns[triples[:, 2]]
        return torch.cat([columns, cubic], dim=0).T
    return torch.cat([s.expand(triples.shape[0], *s.shape), cubic_rows(columns, triples).mT], 2)


def cubic_rows(columns: Tensor, triples: Tensor) -> Tensor:
    """``(N, k, M)`` parities ``s_i s_j s_k`` from ``s^T`` ``(d, M)`` and triples ``(N, k, 3)``."""
    # whole rows by index_select and products in place: half the time of indexing
    members = triples.reshape(-1, 3)
    product = columns.index_select(0, members[:, 0])
    product *= columns.index_select(0, members[:, 1])
    product *= columns.index_select(0, members[:, 2])
    return product.view(*triples.shape[:-1], columns.shape[1])


@dataclass(frozen=True)
class OddCubicSurrogate:
    """``u(s) = sum_i f_i s_i + sum_T f_T prod_{i in T} s_i`` per example (odd in ``s``).

    Attributes:
        linear: ``(N, d)`` ``f_i``.
        cubic: ``(N, k)`` ``f_T``.
        triples: ``(N, k, 3)`` long, the members of each ``T``.
    """

    linear: Tensor
    cubic: Tensor
    triples: Tensor

    def shapley(self) -> Tensor:
        """``(N, d)`` ``phi_i = 2 f_i + 2/3 sum_{T ni i} f_T``."""
        phi = 2 * self.linear
        if self.cubic.shape[1]:
            share = (2.0 / 3.0) * self.cubic[:, :, None].expand(-1, -1, 3)
            phi = phi.scatter_add(
                1,
                self.triples.reshape(self.triples.shape[0], -1),
                share.reshape(share.shape[0], -1),
            )
        return phi

    def values(self, coalitions: Tensor) -> Tensor:
        """``(N, M)`` values on shared coalitions ``(M, d)``."""
        s = 2 * coalitions.to(self.linear.dtype) - 1
        values = self.linear @ s.T
        if self.cubic.shape[1]:
            # no (N, M, d + k) design: the triples' parities as (N, k, M) rows
            cubic = cubic_rows(s.T.contiguous(), self.triples)
            values = values + (self.cubic[:, None, :] @ cubic)[:, 0]
        return values


def select_triples(strength: Tensor, count: int) -> Tensor:
    """``(N, count, 3)``: the triples whose pairs interact most.

    ``strength`` ``(N, d, d)`` is a symmetric interaction score (the even
    part's pairwise coefficients, or SHEAR's cross-contributions). As SHEAR
    gives each feature its cooperators, the candidates are each feature with
    two of its ``p`` strongest partners (``p`` grows with ``count``); a
    candidate scores the geometric mean of ``|S_ij|, |S_ik|, |S_jk|`` (a
    genuine three-way interaction shows in all three pairs, so a strong pair
    with an unrelated third feature scores low) and the best ``count``
    distinct ones are kept. The cost stays near ``d p^2`` for any ``d``.
    """
    batch, d, _ = strength.shape
    if count <= 0 or d < 3:
        return torch.zeros(batch, 0, 3, dtype=torch.long, device=strength.device)
    score = strength.abs()
    partners = max(2, min(d - 1, math.isqrt(9 * count // d) + 2))
    masked = score.clone()
    masked.diagonal(dim1=1, dim2=2).fill_(-1)
    # rows of a 2-d view: torch's topk over the last of three dimensions is slower
    top = torch.topk(masked.reshape(-1, d), partners, dim=1).indices.view(batch, d, partners)
    pairs = torch.triu_indices(partners, partners, 1, device=score.device)
    first = torch.arange(d, device=score.device)[None, :, None].expand(batch, d, pairs.shape[1])
    a = first.reshape(batch, -1)
    b, c = top[:, :, pairs[0]].reshape(batch, -1), top[:, :, pairs[1]].reshape(batch, -1)
    # members in order (three of them: min, max and the rest, not a sort)
    low, high = torch.minimum(torch.minimum(a, b), c), torch.maximum(torch.maximum(a, b), c)
    codes = (low * d + (a + b + c - low - high)) * d + high
    codes = codes.sort(dim=1).values
    i, k = codes.div(d * d, rounding_mode="floor"), codes % d
    j = codes.div(d, rounding_mode="floor") % d
    triples = torch.stack([i, j, k], dim=2)
    flat = score.reshape(batch, d * d)
    product = flat.gather(1, i * d + j) * flat.gather(1, i * d + k) * flat.gather(1, j * d + k)
    total = product.pow(1.0 / 3.0)
    repeated = torch.zeros_like(codes, dtype=torch.bool)
    repeated[:, 1:] = codes[:, 1:] == codes[:, :-1]
    total = total.masked_fill(repeated, -math.inf)
    keep = min(count, int((~repeated).sum(dim=1).min()))
    top_scores = torch.topk(total, keep, dim=1).indices
    return triples.gather(1, top_scores[..., None].expand(-1, -1, 3))
