r"""The odd surrogate's kernel-weighted least squares from Gram matrices, batched.

What: the cubic estimator fits ``u(S) = (v(S) - v(D - S)) / 2`` by the
parities ``[s_i, s_i s_j s_k]`` under ``sum f = u(D)``, for several triple
counts (prefixes of one ranking), and picks the count per example by its
held-out error over folds of the pairs. :func:`select_and_fit` does every
count and fold of a batch of examples at once, on the inputs' device.

Why it is cheap: no ``(N, P, p)`` design is held beyond a chunk of pairs.

* Grams come per fold, either streamed from chunks of the design or, for
  ``d <= 20``, gathered from the fold's Walsh table: every entry of a Gram of
  parities is ``F_f(A xor B)``, the fast Walsh-Hadamard transform of the
  fold's weight histogram (``O(d 2^d)`` per fold, shared by the batch);
* a fit without fold ``f`` uses ``G - G_f``; the held-out error is
  ``u^T W u - 2 c^T b + c^T G_f c``: no design for it either;
* one Jacobi-scaled Cholesky factor serves every count of a split (a prefix's
  factor is the leading block of the full one), so the counts are
  right-hand sides of two triangular solves; without triples one Gram serves
  the whole batch;
* nothing is read back from the device until the end of a fit: one read-back
  says whether a system was rank-deficient (scaled pivot below
  :data:`PIVOT_FLOOR`, or no constraint direction), and only then is the fit
  solved again with the pseudo-inverse where needed.

The results equal the fit-by-fit pseudo-inverse solution wherever the Gram
has full rank, to rounding. Cost and history: ``benchmarks/README.md``
("The odd fit") and ``benchmarks/estimator_speed.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._compat import host_to_device
from .surrogates import all_triples, cubic_rows, odd_features
from .walsh_kernel import NULL_EIGENVALUE

#: rows of the design built at once (pairs per chunk x parameters x examples)
CHUNK_ELEMENTS = 1 << 22
#: a scaled Cholesky pivot below this (squared) means rank deficiency: pinv then
PIVOT_FLOOR = 1e-10
#: Grams from Walsh tables up to this many features (a table holds ``2^d`` entries
#: per fold), when the transforms cost less than the products
WALSH_MAX_FEATURES = 20


def coalition_codes(sampled: Tensor) -> Tensor:
    """``(P,)`` int64: coalition ``z`` as ``sum_i z_i 2^i``."""
    bits = torch.ones((), dtype=torch.long, device=sampled.device) << torch.arange(
        sampled.shape[1], device=sampled.device
    )
    return (sampled.long() * bits).sum(dim=1)


def column_masks(d: int, triples: Tensor) -> Tensor:
    """``(N, d + k)`` int64 bit masks of the odd basis's columns (``triples`` ``(N, k, 3)``)."""
    bits = torch.ones((), dtype=torch.long, device=triples.device) << torch.arange(
        d, device=triples.device
    )
    cubic = bits[triples].sum(dim=-1)  # distinct members: the sum is the union
    return torch.cat([bits.expand(triples.shape[0], d), cubic], dim=1)


def walsh_tables(
    sampled: Tensor,
    weights: Tensor,
    folds: int,
    dtype: torch.dtype,
    labels: Tensor | None = None,
) -> Tensor | None:
    """``(F, 2^d)`` ``F_f(M) = sum_{r in f} w_r (-1)^{|M & z_r|}``.

    Pair ``r`` is in fold ``labels[r]``, by default ``r % F``. For ``|M|``
    even that is ``sum w_r chi_M(s_r)``, the Gram entry of two odd columns
    whose masks' xor is ``M``. None where it cannot be done deterministically
    (repeated coalitions in a fold off the CPU, whose atomic additions vary
    in order).
    """
    pairs, d = sampled.shape
    size = 1 << d
    codes = coalition_codes(sampled)
    if labels is None:
        labels = torch.arange(pairs, device=sampled.device) % folds
    keys = labels * size + codes
    if sampled.device.type != "cpu" and torch.unique(keys).shape[0] < pairs:
        return None
    histogram = torch.zeros(folds * size, dtype=dtype, device=sampled.device)
    histogram.index_put_((keys,), weights.to(dtype), accumulate=True)
    difference = histogram.new_empty(folds * size // 2)
    for level in range(d):  # in-place butterflies on bit `level`
        halves = histogram.view(folds, -1, 2, 1 << level)
        low, high = halves[:, :, 0], halves[:, :, 1]
        spare = difference.view(low.shape)
        torch.sub(low, high, out=spare)
        low.add_(high)
        high.copy_(spare)
    return histogram.view(folds, size)


def use_walsh(d: int, tables: int, grams: int, batch: int, pairs: int, parameters: int) -> bool:
    """Whether ``tables`` Walsh transforms and ``grams`` gathered ``(batch, p, p)`` Grams
    cost less than products streaming ``grams`` Grams from ``pairs`` pairs.

    The unit costs (a butterfly 1, a gathered entry 3, a product's
    multiply-add 0.12) are relative CPU timings, in ``benchmarks/README.md``.
    """
    if d > WALSH_MAX_FEATURES:
        return False
    walsh = tables * d * (1 << d) + 3 * grams * batch * parameters**2
    return walsh < 0.12 * grams * batch * pairs * parameters**2


def shares_triple_design(d: int, batch: int, parameters: int) -> bool:
    """Whether the design of all ``d + C(d, 3)`` columns is no larger than the batch's."""
    return d + d * (d - 1) * (d - 2) // 6 <= batch * parameters


def triple_columns(d: int, triples: Tensor) -> Tensor:
    """``(N, d + k)``: where each example's columns sit among ``d`` linear terms and
    every triple in :func:`~captum_graphshap.plans.surrogates.all_triples` order."""
    every = all_triples(d, triples.device)
    lookup = torch.zeros(d, d, d, dtype=torch.long, device=triples.device)
    lookup[every[:, 0], every[:, 1], every[:, 2]] = torch.arange(
        every.shape[0], device=triples.device
    )
    ordered = triples.sort(dim=-1).values
    linear = torch.arange(d, device=triples.device).expand(triples.shape[0], d)
    return torch.cat([linear, d + lookup[ordered[..., 0], ordered[..., 1], ordered[..., 2]]], 1)


def every_column_targets(
    sampled: Tensor, weights: Tensor, odd: Tensor, labels: Tensor, parts: int
) -> Tensor:
    """``(parts, N, d + C(d, 3))``: ``X^T W u`` of every column on each part's pairs.

    Pair ``r`` is in part ``labels[r]``; one design of every column, streamed
    over chunks of pairs, serves every part and every example.
    """
    d = sampled.shape[1]
    every = all_triples(d, odd.device)
    width = d + every.shape[0]
    out = odd.new_zeros(parts, odd.shape[0], width)
    step = max(1, CHUNK_ELEMENTS // max(1, width, odd.shape[0]))
    weighted = odd * weights.to(odd.dtype)
    for part in range(parts):
        members = (labels == part).nonzero()[:, 0]
        for start in range(0, members.shape[0], step):
            rows = members[start : start + step]
            out[part] += weighted[:, rows] @ odd_features(sampled[rows], every, odd.dtype)
    return out


def distinct_triples(triples: Tensor) -> tuple[Tensor, Tensor]:
    """``(U, 3)`` the distinct triples of a batch ``(N, k, 3)`` and ``(N, k)`` where
    each example's triples sit among them.

    Examples of one model share most of their triples (159 distinct of 16 x 32
    on a d = 49 MLP), so rows built for the distinct ones serve the batch. On
    the CPU only: elsewhere the rows are cheap and ``torch.unique`` would read
    its size back to the host; there every triple stands for itself.
    """
    batch, k = triples.shape[:2]
    flat = triples.reshape(-1, 3)
    if triples.device.type != "cpu" or flat.shape[0] == 0:
        return flat, torch.arange(batch * k, device=triples.device).view(batch, k)
    d = int(triples.max()) + 1
    codes = (flat[:, 0] * d + flat[:, 1]) * d + flat[:, 2]
    unique, where = torch.unique(codes, return_inverse=True)
    distinct = torch.stack(
        [unique.div(d * d, rounding_mode="floor"), unique // d % d, unique % d], 1
    )
    return distinct, where.view(batch, k)


def blocked_normal_equations(
    sampled: Tensor, weights: Tensor, odd: Tensor, triples: Tensor
) -> tuple[Tensor, Tensor]:
    """The whole fit's ``(N, p, p)`` Grams and ``(N, p)`` targets, per-example triples.

    The linear block ``S' W S`` is the batch's, computed once; the triples'
    rows ``T`` ``(U, P)`` are built once for the batch's distinct triples
    (:func:`distinct_triples`) and meet the pairs there (``T W S``, ``T W u``),
    never an ``(N, P, d + k)`` design: at ``d = 49``, 511 pairs and 32 triples
    that design was most of the fit's time. ``T W T'`` is one ``(U, U)``
    product up to twice the multiply-adds of the examples' own ``(k, k)``
    blocks (one product ran at twice a batched product's rate here on the
    CPU), else those blocks in chunks of :data:`CHUNK_ELEMENTS` parity entries.
    """
    dtype = odd.dtype
    d = sampled.shape[1]
    batch, k = triples.shape[:2]
    signs = 2 * sampled.to(dtype) - 1
    weight = weights.to(dtype)
    weighted = signs * weight[:, None]  # W S
    grams = odd.new_empty(batch, d + k, d + k)
    targets = odd.new_empty(batch, d + k)
    grams[:, :d, :d] = weighted.T @ signs  # (d, d), the batch's
    targets[:, :d] = odd @ weighted
    if k == 0:
        return grams, targets
    distinct, where = distinct_triples(triples)
    rows = cubic_rows(signs.T.contiguous(), distinct[None])[0]  # (U, P)
    rows_weighted = rows * weight
    across = (rows_weighted @ signs)[where]  # (N, k, d)
    grams[:, d:, :d] = across
    grams[:, :d, d:] = across.mT
    targets[:, d:] = (odd @ rows_weighted.T).gather(1, where)
    if distinct.shape[0] ** 2 <= 2 * batch * k * k:
        every = rows_weighted @ rows.T  # (U, U)
        grams[:, d:, d:] = every[where[:, :, None], where[:, None, :]]
        return grams, targets
    step = max(1, CHUNK_ELEMENTS // max(1, k * sampled.shape[0]))
    for start in range(0, batch, step):
        chunk = where[start : start + step]
        cubic = rows[chunk]  # (n, k, P)
        grams[start : start + step, d:, d:] = torch.bmm(rows_weighted[chunk], cubic.mT)
    return grams, targets


class FoldSystems:
    """Per-fold normal equations of the odd fit: Grams, ``(F, N, p)`` targets, ``(F, N)`` norms.

    Pair ``r`` belongs to fold ``r % folds`` (``folds=1``: one fold, the whole
    fit). A Gram is ``(G, p, p)`` with ``G`` 1 when there are no triples
    (every example's design is the same) and ``N`` otherwise. With Walsh
    tables (:func:`walsh_tables`; ``tables`` when the caller has them) a Gram
    is gathered when asked for, fold by fold; otherwise the ``(F, G, p, p)``
    fold Grams are streamed from the design.
    """

    def __init__(
        self,
        sampled: Tensor,
        weights: Tensor,
        odd: Tensor,
        triples: Tensor,
        folds: int,
        tables: Tensor | None = None,
        every_targets: Tensor | None = None,
    ) -> None:
        pairs, d = sampled.shape
        batch, p = odd.shape[0], d + triples.shape[1]
        shared = triples.shape[1] == 0
        gram_batch = 1 if shared else batch
        dtype = odd.dtype
        # the fit gathers a Gram per fold and the whole one; the products stream them
        if tables is None and use_walsh(d, folds, folds + 1, gram_batch, pairs, p):
            tables = walsh_tables(sampled, weights, folds, dtype)
        self.tables = tables
        self.grams: Tensor | None = None
        self.whole: Tensor | None = None
        if tables is not None:
            masks = column_masks(d, triples[:1] if shared else triples)  # (G, p)
            self.index = masks[:, :, None] ^ masks[:, None, :]
            self.total_table = tables.sum(dim=0)
        else:
            self.grams = odd.new_zeros(folds, gram_batch, p, p)
        self.targets = odd.new_zeros(folds, batch, p)
        self.norms = odd.new_zeros(folds, batch)
        # without the Grams' products, the targets of every triple of the d features
        # from one design shared by the batch when it is smaller than the examples'
        if every_targets is not None and folds == 1 and not shared:
            # the caller's targets of every column (a subset's: its batch's less the rest)
            self.targets[0] = every_targets.gather(1, triple_columns(d, triples))
            self.norms[0] = (odd.square() * weights.to(dtype)).sum(dim=1)
            return
        if not shared and self.grams is None and shares_triple_design(d, batch, p):
            self._shared_targets(sampled, weights, odd, triples, folds)
            return
        # a chunk's design is (N, c, p), or (c, p) beside the (N, c) values when shared
        step = max(1, CHUNK_ELEMENTS // max(1, max(batch, p) if shared else batch * p))
        for f in range(folds):
            # the fold's pairs are a strided slice: no boolean indexing, no copy
            members = torch.arange(f, pairs, folds, device=sampled.device)
            for start in range(0, members.shape[0], step):
                rows = members[start : start + step]
                w, u = weights[rows].to(dtype), odd[:, rows]
                weighted_u = u * w
                self.norms[f] += (weighted_u * u).sum(dim=1)
                if shared:
                    design = odd_features(sampled[rows], triples.new_zeros(0, 3), dtype)
                    self.targets[f] += weighted_u @ design
                    if self.grams is not None:
                        self.grams[f, 0] += (design * w[:, None]).T @ design
                    continue
                design = odd_features(sampled[rows], triples, dtype)  # (N, c, p)
                self.targets[f] += (weighted_u[:, None, :] @ design)[:, 0]
                if self.grams is not None:
                    self.grams[f] += (design * w[None, :, None]).transpose(1, 2) @ design
        if self.grams is not None:
            self.whole = self.grams.sum(dim=0)

    def _shared_targets(
        self, sampled: Tensor, weights: Tensor, odd: Tensor, triples: Tensor, folds: int
    ) -> None:
        """The targets from the design of all ``d + C(d, 3)`` columns, picked per example."""
        pairs, d = sampled.shape
        dtype = odd.dtype
        every = all_triples(d, odd.device)
        columns = triple_columns(d, triples)  # (N, p)
        width = d + every.shape[0]
        step = max(1, CHUNK_ELEMENTS // max(1, width, odd.shape[0]))
        for f in range(folds):
            members = torch.arange(f, pairs, folds, device=sampled.device)
            combined = odd.new_zeros(odd.shape[0], width)
            for start in range(0, members.shape[0], step):
                rows = members[start : start + step]
                w, u = weights[rows].to(dtype), odd[:, rows]
                weighted_u = u * w
                self.norms[f] += (weighted_u * u).sum(dim=1)
                combined += weighted_u @ odd_features(sampled[rows], every, dtype)
            self.targets[f] = combined.gather(1, columns)

    def _gather(self, table: Tensor) -> Tensor:
        return table.take(self.index)

    def fold(self, f: int) -> Tensor:
        """``(G, p, p)``: fold ``f``'s Gram."""
        if self.grams is not None:
            return self.grams[f]
        assert self.tables is not None
        return self._gather(self.tables[f])

    def whole_gram(self) -> Tensor:
        """``(G, p, p)``: every fold's pairs."""
        if self.whole is not None:
            return self.whole
        return self._gather(self.total_table)

    def without(self, f: int) -> Tensor:
        """``(G, p, p)``: every fold's pairs but fold ``f``'s."""
        if self.whole is not None and self.grams is not None:
            return self.whole - self.grams[f]
        assert self.tables is not None
        return self._gather(self.total_table - self.tables[f])


def full_rank_fit(gram: Tensor, target: Tensor, total: Tensor) -> Tensor | None:
    """``(N, p)``: :meth:`PrefixFactor.solve` of every parameter, where every system
    has full rank; None (one read-back) where some has not.

    The same Jacobi-scaled Cholesky and the same tests of rank, without the
    machinery that serves several counts: with one count its bookkeeping
    outweighed the solve (16 systems of 81 parameters at d = 49).
    """
    scale = gram.diagonal(dim1=-2, dim2=-1).clamp_min(torch.finfo(gram.dtype).tiny).rsqrt()
    scaled = gram * scale[..., :, None]
    scaled *= scale[..., None, :]
    factor, info = torch.linalg.cholesky_ex(scaled)
    rhs = torch.stack([target, torch.ones_like(target)], dim=-1) * scale[..., None]
    half = torch.linalg.solve_triangular(factor, rhs, upper=False)
    solution = torch.linalg.solve_triangular(factor.mT, half, upper=True) * scale[..., None]
    free, pull = solution[..., 0], solution[..., 1]
    denominator = pull.sum(dim=-1)
    pivots = factor.diagonal(dim1=-2, dim2=-1).square().amin(dim=-1)
    # (G,) factors, G = 1 where the batch shares one Gram; (N,) constraint directions
    good = (info == 0) & (pivots > PIVOT_FLOOR)
    good = good & (denominator.abs() > 1e-12 * pull.abs().sum(dim=-1))
    if not bool(good.all()):
        return None
    gap = (free.sum(dim=-1) - total) / denominator
    return free - gap[..., None] * pull


def _triangular(factor: Tensor, rhs: Tensor, upper: bool) -> Tensor:
    """``L^{-1} B`` (``upper`` False) or ``L^{-T} B`` for ``L`` ``(..., G, p, p)``, ``B``
    ``(..., N, p, m)``; a factor shared by the batch (``G = 1``) takes every example's
    right-hand sides as columns of one solve."""
    matrix = factor.mT if upper else factor
    batch, p, m = rhs.shape[-3:]
    if factor.shape[-3] == 1 and batch != 1:
        columns = rhs.movedim(-3, -2).reshape(*rhs.shape[:-3], 1, p, batch * m)
        out = torch.linalg.solve_triangular(matrix, columns, upper=upper)
        return out.reshape(*rhs.shape[:-3], p, batch, m).movedim(-2, -3)
    return torch.linalg.solve_triangular(matrix, rhs, upper=upper)


class PrefixFactor:
    """Jacobi-scaled Cholesky factors of Grams ``(..., G, p, p)``, serving every leading block.

    The Cholesky factor of a leading block is the leading block of the
    factor, so one factorisation serves every triple count of a ranking.
    ``G`` is the batch or 1 (one Gram shared by the batch). ``linear``: the
    leading columns that are the linear parities (a rank-deficient system
    splits its unseen directions away from the others first,
    :func:`constrained_min_norm`).
    """

    def __init__(self, gram: Tensor, linear: int | None = None) -> None:
        self.gram, self.linear = gram, linear
        diagonal = gram.diagonal(dim1=-2, dim2=-1)
        self.scale = diagonal.clamp_min(torch.finfo(gram.dtype).tiny).rsqrt()
        scaled = gram * self.scale[..., :, None]
        scaled *= self.scale[..., None, :]  # one new (..., p, p) array, not two
        self.factor, self.info = torch.linalg.cholesky_ex(scaled)
        self.pivots = self.factor.diagonal(dim1=-2, dim2=-1).square()
        # the smallest scaled pivot of every leading block
        self.least = self.pivots.cummin(dim=-1).values
        # past a failing pivot the factor is not defined: an identity there keeps the
        # padded solves finite (those blocks are solved by pinv); applied without
        # asking whether any failed, which would wait for the device
        failed = self.info > 0
        p = gram.shape[-1]
        index = torch.arange(p, device=gram.device)
        beyond = failed[..., None] & (index >= (self.info - 1).clamp_min(0)[..., None])
        outside = beyond[..., :, None] | beyond[..., None, :]
        eye = torch.eye(p, dtype=gram.dtype, device=gram.device)
        self.factor = torch.where(outside, eye, self.factor)

    def solve(
        self, target: Tensor, total: Tensor, size: int, suspects: list[Tensor] | None = None
    ) -> Tensor:
        """``(..., N, p)`` coefficients of the constrained fit on the first ``size`` parameters.

        ``min (u - X c)^T W (u - X c)`` subject to ``sum c = total``, with ``X``
        the first ``size`` columns; the coefficients beyond are 0.
        """
        sizes = torch.full((*target.shape[:-1], 1), size, device=target.device)
        return self.solve_sizes(target, total, sizes, suspects)[..., 0, :]

    def solve_sizes(
        self, target: Tensor, total: Tensor, sizes: Tensor, suspects: list[Tensor] | None = None
    ) -> Tensor:
        """``(..., N, C, p)``: :meth:`solve` for the ``C`` block sizes ``sizes`` ``(..., N, C)``.

        One forward substitution serves every size; the back substitutions of
        all sizes are the columns of one solve (right-hand sides 0 beyond each
        size). With ``suspects`` (a list) nothing is read back from the device:
        a bool tensor, True when some system is rank-deficient or sees no
        constraint direction, is appended instead, and those systems' values are
        not to be used (the caller solves again without ``suspects``, which
        handles them).
        """
        p = self.gram.shape[-1]
        scale = self.scale[..., None, :]  # (..., G, 1, p)
        rhs = torch.stack([target, torch.ones_like(target)], dim=-1)  # (..., N, p, 2)
        forward = _triangular(self.factor, rhs * self.scale[..., :, None], upper=False)
        keep = torch.arange(p, device=target.device) < sizes[..., None]  # (..., N, C, p)
        padded = forward[..., None, :, :] * keep[..., None]  # (..., N, C, p, 2)
        count = sizes.shape[-1]
        columns = padded.movedim(-3, -2).reshape(*padded.shape[:-3], p, count * 2)
        back = _triangular(self.factor, columns, upper=True)
        solution = back.reshape(*padded.shape[:-3], p, count, 2).movedim(-3, -2)
        free = solution[..., 0] * scale
        pull = solution[..., 1] * scale  # (..., N, C, p)
        # a leading minor that is not positive definite (info counts from 1), or a
        # scaled pivot near 0: rank-deficient (few pairs, repeated columns)
        info = self.info[..., None]
        valid = (info == 0) | (info > sizes)
        least = self.least[..., None, :].expand(*sizes.shape, p)
        smallest = least.gather(-1, (sizes - 1).clamp_min(0)[..., None])[..., 0]
        good = valid & (smallest > PIVOT_FLOOR)
        denominator = pull.sum(dim=-1)
        gap = (free.sum(dim=-1) - total[..., None]) / denominator
        coefficients = free - gap[..., None] * pull
        # the constraint's direction unseen by the data (1 outside the Gram's range:
        # d = 2 has one pair, s = (1, -1)): the projection formula divides by 0
        unseen = ~(denominator.abs() > 1e-12 * pull.abs().sum(dim=-1))
        if suspects is not None:
            suspects.append((~good).any() | unseen.any())
            return torch.where(keep, coefficients, 0)
        # a rank-deficient Gram: the projection of its pseudo-inverse's solution onto
        # the constraint is not a least-squares fit where the constraint pins the
        # Gram's null direction (d = 8, 8 stratified pairs, an additive game: 0.29
        # relative error); the constrained fit of least norm is (exact there)
        redo = unseen | ~good
        if bool(redo.any()):
            totals = total[..., None].expand(redo.shape)
            for size in sizes[redo].unique().tolist():
                where = redo & (sizes == size)
                block = self._grams(where)[:, :size, :size]
                coefficients[where] = torch.nn.functional.pad(
                    constrained_min_norm(
                        block, self._targets(target, where)[:, :size], totals[where], self.linear
                    ),
                    (0, p - size),
                )
        return torch.where(keep, coefficients, 0)

    def _grams(self, where: Tensor) -> Tensor:
        """``(B, p, p)``: the Gram of each selected ``(..., N, C)`` system."""
        p = self.gram.shape[-1]
        return self.gram[..., :, None, :, :].expand(*where.shape, p, p)[where]

    @staticmethod
    def _targets(target: Tensor, where: Tensor) -> Tensor:
        return target[..., None, :].expand(*where.shape, target.shape[-1])[where]


def constrained_min_norm(
    gram: Tensor, target: Tensor, total: Tensor, linear: int | None = None
) -> Tensor:
    """``(B, p)``: the least-squares solution with ``sum c = total``, any Gram rank.

    ``c = (total / p) 1 + Q z`` with ``Q`` an orthonormal basis of the sums-to-0
    space and ``z`` the minimum-norm least-squares solution of the reduced
    normal equations ``Q^T G Q z = Q^T (b - G c_0)``: always defined, and the
    constrained solution itself when the Gram has full rank.

    With ``linear`` (the count of leading columns that are the linear parities)
    the least-squares solutions left free by the rank are split with the least
    norm of the coefficients beyond those first, then of all: the linear
    parities are fitted, not shrunk, so a game whose odd part is linear is
    fitted exactly whatever the rank of its triples (SHEAR's top-ranked triples
    on 111 pairs at d = 14 had rank 37 of 38, and the plain least norm put 0.10
    on a triple of a quadratic model: 0.019 relative error).
    """
    p = gram.shape[-1]
    ones = torch.ones(p, 1, dtype=gram.dtype, device=gram.device)
    # the last p - 1 columns of a complete QR of 1 span its orthogonal complement
    basis = torch.linalg.qr(ones, mode="complete").Q[:, 1:]
    start = (total / p)[:, None] * ones[:, 0]
    reduced = basis.T @ gram @ basis
    rhs = basis.T @ (target - (gram @ start[..., None])[..., 0])[..., None]
    solution = start + (basis @ (torch.linalg.pinv(reduced, hermitian=True) @ rhs))[..., 0]
    if linear is None or linear >= p:
        return solution
    values, vectors = torch.linalg.eigh(reduced)
    # eigenvalues of the reduced Gram below NULL_EIGENVALUE of its largest: directions
    # the pairs leave unseen, which the split below assigns
    floor = NULL_EIGENVALUE * values[..., -1:].abs().clamp_min(torch.finfo(gram.dtype).tiny)
    for row in range(len(solution)):  # rank-deficient systems only: few
        free = basis @ vectors[row][:, values[row] <= floor[row]]  # (p, f): unseen directions
        if free.shape[1] == 0:
            continue
        # least norm beyond the linear parities, then of all, along the free directions
        shift = -torch.linalg.pinv(free[linear:]) @ solution[row, linear:]
        moved = solution[row] + free @ shift
        rest = free @ _null_space(free[linear:])
        solution[row] = moved - rest @ (torch.linalg.pinv(rest) @ moved)
    return solution


def _null_space(matrix: Tensor) -> Tensor:
    """``(n, k)`` an orthonormal basis of the null space of ``matrix`` ``(m, n)``."""
    _, singular, right = torch.linalg.svd(matrix, full_matrices=True)
    rank = int((singular > NULL_EIGENVALUE**0.5 * singular[:1].clamp_min(1e-300)).sum())
    return right[rank:].T


def select_and_fit(
    sampled: Tensor,
    weights: Tensor,
    odd: Tensor,
    total: Tensor,
    triples: Tensor,
    counts: list[int],
    folds: int,
    tables: Tensor | None = None,
    every_targets: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The constrained fit with the triple count of least held-out error, per example.

    Args:
        triples: ``(N, k, 3)`` ranked best first, ``k >= max(counts)``.
        counts: candidate triple counts (prefixes of ``triples``); one count: no selection.
        tables: with one count, the Walsh table ``(1, 2^d)`` of these pairs
            (:func:`walsh_tables`) when the caller has it.
        every_targets: with one count, ``(N, d + C(d, 3))`` the targets of every
            column on these pairs (:func:`every_column_targets`) when the caller has them.

    Returns:
        ``(N, d + k)`` coefficients (0 beyond each example's chosen count) and
        ``(N,)`` the chosen count.

    Every example is fitted for every count and fold in batched solves; the
    counts are right-hand sides of the same factorisation (:class:`PrefixFactor`).
    """
    d = sampled.shape[1]
    batch = odd.shape[0]
    triples = triples[:, : max(counts)]
    if len(counts) == 1:
        if (
            tables is None
            and every_targets is None
            and triples.shape[1] > 0
            and d > WALSH_MAX_FEATURES
        ):
            gram, target = blocked_normal_equations(sampled, weights, odd, triples)
        else:
            single = FoldSystems(sampled, weights, odd, triples, 1, tables, every_targets)
            gram, target = single.whole_gram(), single.targets[0]
        coefficients = full_rank_fit(gram, target, total)
        if coefficients is None:  # rank-deficient systems: each solved as it needs
            coefficients = PrefixFactor(gram, d).solve(target, total, d + counts[0])
        return coefficients, torch.full((batch,), counts[0], device=odd.device)
    systems = FoldSystems(sampled, weights, odd, triples, folds)
    suspects: list[Tensor] = []
    fit = _selected_fit(systems, total, counts, d, folds, suspects)
    if bool(torch.stack(suspects).any()):  # the one read-back of the usual case
        # some system is rank-deficient: solve again, each solve checking its own
        fit = _selected_fit(systems, total, counts, d, folds, None)
    return fit


def _selected_fit(
    systems: FoldSystems,
    total: Tensor,
    counts: list[int],
    d: int,
    folds: int,
    suspects: list[Tensor] | None,
) -> tuple[Tensor, Tensor]:
    """:func:`select_and_fit`'s selection and final fit on the fold systems.

    With ``suspects`` (a list) every solve takes its fast path and reads
    nothing back, appending whether it met a rank-deficient system (its
    values are then not to be used); without, each solve checks its own.
    """
    targets, norms = systems.targets, systems.norms
    batch = targets.shape[1]
    device = targets.device
    whole_target = targets.sum(dim=0)
    sizes = host_to_device(torch.tensor([d + k for k in counts]), device).expand(batch, -1)
    errors = targets.new_zeros(batch, len(counts))
    whole = systems.whole_gram()
    # fold by fold (a few): one (N, p, p) Gram and factor at a time, not (F, N, p, p)
    for f in range(folds):
        # every training split (all folds but one) factored once, for every count
        train = systems.without(f)
        c = PrefixFactor(train, d).solve_sizes(whole_target - targets[f], total, sizes, suspects)
        # held-out weighted squared error from the fold's Gram: u'Wu - 2 c'b + c'Gc
        held = whole - train if systems.grams is None else systems.grams[f]
        quadratic = ((held @ c.mT).mT * c).sum(dim=-1)  # (N, C)
        linear = (c * targets[f][:, None, :]).sum(dim=-1)
        errors += norms[f][:, None] - 2 * linear + quadratic
    best = errors.argmin(dim=1)  # the first of equal errors
    coefficients = PrefixFactor(whole, d).solve_sizes(
        whole_target, total, sizes.gather(1, best[:, None]), suspects
    )
    return coefficients[:, 0], host_to_device(torch.tensor(counts), device)[best]
