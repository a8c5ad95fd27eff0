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
    ``linear``: the leading columns that are the linear parities.
    """

    def __init__(self, gram: Tensor, linear: int) -> None:
        self.gram, self.linear = gram, linear
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
        free, pull = solution[..., 0], solution[..., 1]
        denominator = pull.sum(dim=-1)
        gap = (free.sum(dim=-1) - total) / denominator
        coefficients = free - gap[..., None] * pull
        # the constraint's direction unseen by the data (1 outside the Gram's range:
        # d = 2 has one pair, s = (1, -1)): the projection formula divides by 0
        unseen = ~(denominator.abs() > 1e-12 * pull.abs().sum(dim=-1))
        redo = unseen | ~good
        if bool(redo.any()):
            block = self.gram[redo][:, :size, :size]
            totals = total.expand(redo.shape)[redo]
            coefficients[redo] = torch.stack([
                reference_lexicographic_fit(g, b, t, self.linear)
                for g, b, t in zip(block, target[redo][:, :size], totals)
            ])  # fmt: skip
        return torch.nn.functional.pad(coefficients, (0, p - size))


def _null(matrix: Tensor) -> Tensor:
    _, singular, right = torch.linalg.svd(matrix, full_matrices=True)
    rank = int((singular > 1e-7 * singular[:1].clamp_min(1e-300)).sum())
    return right[rank:].T


def reference_lexicographic_fit(gram: Tensor, target: Tensor, total: Tensor, linear: int) -> Tensor:
    """``(p,)``: among the least-squares solutions with ``sum c = total``, the least norm
    of the coefficients beyond ``linear``, then of all (any rank).

    Written as a KKT system solved by ``lstsq`` (gelsd), the solutions' free
    directions the null space of ``[G; 1']`` by an SVD, and each least norm a
    ``lstsq`` along them: a different route from the library's (the reduced
    Gram's eigenvectors).
    """
    p = gram.shape[-1]
    ones = torch.ones(1, p, dtype=gram.dtype)
    kkt = torch.cat([torch.cat([gram, ones.T], 1), torch.cat([ones, ones.new_zeros(1, 1)], 1)])
    rhs = torch.cat([target, total.reshape(1)])
    c = torch.linalg.lstsq(kkt, rhs[:, None], driver="gelsd").solution[:p, 0]
    free = _null(torch.cat([gram, ones]))
    if free.shape[1] == 0:
        return c
    c = (
        c
        + free @ torch.linalg.lstsq(free[linear:], -c[linear:, None], driver="gelsd").solution[:, 0]
    )
    rest = free @ _null(free[linear:])
    if rest.shape[1] == 0:
        return c
    return c + rest @ torch.linalg.lstsq(rest, -c[:, None], driver="gelsd").solution[:, 0]


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
        coefficients = ReferencePrefixFactor(grams[0], d).solve(targets[0], total, d + counts[0])
        return coefficients, torch.full((batch,), counts[0], device=odd.device)
    grams, targets, norms = reference_fold_grams(sampled, weights, odd, triples, folds)
    whole, whole_target = grams.sum(dim=0), targets.sum(dim=0)
    # every training split (all folds but one) factored once, for every count
    train = ReferencePrefixFactor(whole - grams, d)
    train_target = whole_target - targets
    errors = []
    for k in counts:
        c = train.solve(train_target, total.expand(folds, batch), d + k)  # (F, N, p)
        # held-out weighted squared error from the fold's Gram: u'Wu - 2 c'b + c'Gc
        quadratic = (c[..., None, :] @ grams @ c[..., None])[..., 0, 0]
        errors.append((norms - 2 * (c * targets).sum(dim=-1) + quadratic).sum(dim=0))
    best = torch.stack(errors).argmin(dim=0)  # (N,): the first of equal errors
    full = ReferencePrefixFactor(whole, d)
    coefficients = whole.new_zeros(batch, whole.shape[-1])
    for index, k in enumerate(counts):
        rows = best == index
        if bool(rows.any()):
            coefficients[rows] = full.solve(whole_target, total, d + k)[rows]
    chosen = torch.tensor(counts, device=odd.device)[best]
    return coefficients, chosen
