"""The odd fit as it was before the batched rewrite (commit 3ebc1d9), kept as a reference.

``plans/odd_fit.py`` replaced these per-fold streamed Grams, one Cholesky per
split and one solve per triple count by Walsh-table Grams, a Gram shared by
the batch without triples and all counts as right-hand sides of one
factorisation; tests/test_odd_fit.py checks that the two agree to rounding on
random games. Verbatim but for the imports and names (``Reference*``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from captum_graphshap.plans.surrogates import odd_features

#: rows of the design built at once (pairs per chunk x parameters x examples)
CHUNK_ELEMENTS = 1 << 22
#: a scaled Cholesky pivot below this (squared) means rank deficiency: pinv then
PIVOT_FLOOR = 1e-10


def reference_fold_grams(
    sampled: Tensor, weights: Tensor, odd: Tensor, triples: Tensor, folds: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-fold ``(F, N, p, p)`` Grams, ``(F, N, p)`` targets and ``(F, N)`` norms.

    Pair ``r`` belongs to fold ``r % folds`` (``folds=1``: one fold, the whole fit).
    """
    pairs, d = sampled.shape
    batch, p = odd.shape[0], d + triples.shape[1]
    dtype = odd.dtype
    grams = odd.new_zeros(folds, batch, p, p)
    targets = odd.new_zeros(folds, batch, p)
    norms = odd.new_zeros(folds, batch)
    step = max(1, CHUNK_ELEMENTS // max(1, batch * p))
    for f in range(folds):
        # the fold's pairs are a strided slice: no boolean indexing, no copy
        members = torch.arange(f, pairs, folds, device=sampled.device)
        for start in range(0, members.shape[0], step):
            rows = members[start : start + step]
            design = odd_features(sampled[rows], triples, dtype)  # (N, c, p)
            w, u = weights[rows].to(dtype), odd[:, rows]
            weighted = design * w[None, :, None]
            grams[f] += weighted.transpose(1, 2) @ design
            targets[f] += (weighted.transpose(1, 2) @ u[..., None])[..., 0]
            norms[f] += (u.square() * w).sum(dim=1)
    return grams, targets, norms


class ReferencePrefixFactor:
    """Jacobi-scaled Cholesky factors of Grams ``(..., p, p)``, serving every leading block.

    The Cholesky factor of a leading block is the leading block of the
    factor, so one factorisation serves every triple count of a ranking.
    """

    def __init__(self, gram: Tensor) -> None:
        self.gram = gram
        diagonal = gram.diagonal(dim1=-2, dim2=-1)
        self.scale = diagonal.clamp_min(torch.finfo(gram.dtype).tiny).rsqrt()
        scaled = gram * self.scale[..., :, None] * self.scale[..., None, :]
        self.factor, self.info = torch.linalg.cholesky_ex(scaled)
        self.pivots = self.factor.diagonal(dim1=-2, dim2=-1).square()

    def solve(self, target: Tensor, total: Tensor, size: int) -> Tensor:
        """``(..., p)`` coefficients of the constrained fit on the first ``size`` parameters.

        ``min (u - X c)^T W (u - X c)`` subject to ``sum c = total``, with ``X``
        the first ``size`` columns; the coefficients beyond are 0.
        """
        p = self.gram.shape[-1]
        scale = self.scale[..., :size]
        rhs = torch.stack([target[..., :size], torch.ones_like(target[..., :size])], dim=-1)
        factor = self.factor[..., :size, :size]
        solution = torch.cholesky_solve(rhs * scale[..., None], factor) * scale[..., None]
        # a leading minor that is not positive definite (info counts from 1), or a
        # scaled pivot near 0: rank-deficient (few pairs, repeated columns)
        valid = (self.info == 0) | (self.info > size)
        good = valid & (self.pivots[..., :size].amin(dim=-1) > PIVOT_FLOOR)
        if not bool(good.all()):
            # the minimum-norm solution there, as the pseudo-inverse gives
            bad = ~good
            block = self.gram[bad][:, :size, :size]
            solution[bad] = torch.linalg.pinv(block, hermitian=True) @ rhs[bad]
        free, pull = solution[..., 0], solution[..., 1]
        denominator = pull.sum(dim=-1)
        gap = (free.sum(dim=-1) - total) / denominator
        coefficients = free - gap[..., None] * pull
        # the constraint's direction unseen by the data (1 outside the Gram's range:
        # d = 2 has one pair, s = (1, -1)): the projection formula divides by 0
        unseen = ~(denominator.abs() > 1e-12 * pull.abs().sum(dim=-1))
        if bool(unseen.any()):
            block = self.gram[unseen][:, :size, :size]
            coefficients[unseen] = reference_constrained_min_norm(
                block, target[unseen][:, :size], total.expand(unseen.shape)[unseen]
            )
        return torch.nn.functional.pad(coefficients, (0, p - size))


def reference_constrained_min_norm(gram: Tensor, target: Tensor, total: Tensor) -> Tensor:
    """``(B, p)``: the least-squares solution with ``sum c = total``, any Gram rank.

    ``c = (total / p) 1 + Q z`` with ``Q`` an orthonormal basis of the sums-to-0
    space and ``z`` the minimum-norm least-squares solution of the reduced
    normal equations ``Q^T G Q z = Q^T (b - G c_0)``: always defined, and the
    constrained solution itself when the Gram has full rank.
    """
    p = gram.shape[-1]
    ones = torch.ones(p, 1, dtype=gram.dtype, device=gram.device)
    # the last p - 1 columns of a complete QR of 1 span its orthogonal complement
    basis = torch.linalg.qr(ones, mode="complete").Q[:, 1:]
    start = (total / p)[:, None] * ones[:, 0]
    reduced = basis.T @ gram @ basis
    rhs = basis.T @ (target - (gram @ start[..., None])[..., 0])[..., None]
    z = torch.linalg.pinv(reduced, hermitian=True) @ rhs
    return start + (basis @ z)[..., 0]


def reference_select_and_fit(
    sampled: Tensor,
    weights: Tensor,
    odd: Tensor,
    total: Tensor,
    triples: Tensor,
    counts: list[int],
    folds: int,
) -> tuple[Tensor, Tensor]:
    """The constrained fit with the triple count of least held-out error, per example.

    Args:
        triples: ``(N, k, 3)`` ranked best first, ``k >= max(counts)``.
        counts: candidate triple counts (prefixes of ``triples``); one count: no selection.

    Returns:
        ``(N, d + k)`` coefficients (0 beyond each example's chosen count) and
        ``(N,)`` the chosen count.
    """
    d = sampled.shape[1]
    batch = odd.shape[0]
    triples = triples[:, : max(counts)]
    if len(counts) == 1:
        grams, targets, _ = reference_fold_grams(sampled, weights, odd, triples, 1)
        coefficients = ReferencePrefixFactor(grams[0]).solve(targets[0], total, d + counts[0])
        return coefficients, torch.full((batch,), counts[0], device=odd.device)
    grams, targets, norms = reference_fold_grams(sampled, weights, odd, triples, folds)
    whole, whole_target = grams.sum(dim=0), targets.sum(dim=0)
    # every training split (all folds but one) factored once, for every count
    train = ReferencePrefixFactor(whole - grams)
    train_target = whole_target - targets
    errors = []
    for k in counts:
        c = train.solve(train_target, total.expand(folds, batch), d + k)  # (F, N, p)
        # held-out weighted squared error from the fold's Gram: u'Wu - 2 c'b + c'Gc
        quadratic = (c[..., None, :] @ grams @ c[..., None])[..., 0, 0]
        errors.append((norms - 2 * (c * targets).sum(dim=-1) + quadratic).sum(dim=0))
    best = torch.stack(errors).argmin(dim=0)  # (N,): the first of equal errors
    full = ReferencePrefixFactor(whole)
    coefficients = whole.new_zeros(batch, whole.shape[-1])
    for index, k in enumerate(counts):
        rows = best == index
        if bool(rows.any()):
            coefficients[rows] = full.solve(whole_target, total, d + k)[rows]
    chosen = torch.tensor(counts, device=odd.device)[best]
    return coefficients, chosen
