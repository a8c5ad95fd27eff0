r"""The prior covariance of the Walsh-basis process: symmetric sums of agreements.

Under the prior ``c_T ~ N(0, s^2 sigma_|T| prod_{j in T} r_j)`` on the parities
``chi_T(S) = prod_{j in T} x_j`` (``x_j = +1`` for members, ``-1`` otherwise),
the covariance of the odd parts of two coalitions is
``sum_k sigma_k e_k(r_j x_j x'_j)``, with ``e_k`` the elementary symmetric
polynomial of order ``k``: it depends only on where the two coalitions agree.
Up to ``2 log2(rows)`` features it is read from a table of the ``2^d``
agreement patterns (:func:`pattern_covariances`); above, from power sums
(:func:`built_covariances`). ``plans/walsh_gp.py`` fits the process.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..engine.batching import available_memory

#: Parities above this order are left out of the prior: each order costs a
#: pass over the ``(pairs, pairs)`` covariance, and from order three on the
#: likelihood mostly chose decays of 0.01-0.1 per two orders.
MAX_ORDER = 7
#: Eigenvalues of a normal matrix below this share of its largest are treated as
#: zero by :func:`pseudo_inverse` (a null direction of the design: left out
#: instead of amplifying rounding by 1e16).
NULL_EIGENVALUE = 1e-11
#: :func:`built_covariances`' ``e_k`` entries per block of rows on the CPU (16 MiB
#: of float64: the last-level cache of the machines measured)
BUILD_CHUNK_ELEMENTS = 1 << 21
#: ... and on an accelerator, where a block is a few launches: only memory bounds it
#: (512 MiB of float64 for the ``e_k`` of one block)
ACCELERATOR_BUILD_ELEMENTS = 1 << 26


def work_floats(device: torch.device, limits: dict[str, int]) -> int:
    """Floats of work memory a step may take on ``device``: ``limits["cpu"]`` on the
    CPU, else ``limits["accelerator"]``; on CUDA at most a quarter of what the caching
    allocator can still hand out (the device's free memory and its own cached, unused
    blocks), so that a model filling most of a smaller GPU leaves the process smaller
    chunks instead of an out-of-memory error."""
    if device.type == "cpu":
        return limits["cpu"]
    free = available_memory(device)  # None on an accelerator other than CUDA
    if free is None:
        return limits["accelerator"]
    return max(1, min(limits["accelerator"], free // (4 * 8)))


def add_feature(sums: Tensor, weight: Tensor) -> None:
    """One feature into elementary symmetric sums ``(K + 1, ...)``, in place.

    ``e_k <- e_k + w e_(k-1)`` for every ``k``, descending so that each
    ``e_(k-1)`` read is still the old one.
    """
    for k in range(sums.shape[0] - 1, 0, -1):
        sums[k].addcmul_(weight, sums[k - 1])


def elementary_symmetric(weights: Tensor, max_order: int) -> Tensor:
    """``(..., max_order + 1)``: ``e_0 .. e_max_order`` of the last axis of ``weights``."""
    sums = weights.new_zeros(max_order + 1, *weights.shape[:-1])
    sums[0] = 1.0
    for j in range(weights.shape[-1]):
        add_feature(sums, weights[..., j])
    return sums.movedim(0, -1)


def signed_elementary_symmetric(signs: Tensor, relevance: Tensor, max_order: int) -> Tensor:
    """``(E, rows, max_order + 1)``: ``e_0 .. e_max_order`` of ``r_j x_j`` over ``j`` for
    every +-1 row ``x`` of ``signs`` ``(rows, d)`` and relevance ``(E, d)``.

    :func:`elementary_symmetric` of ``relevance[:, None] * signs``, from power sums:
    ``p_m = x . r^m`` for odd ``m`` (one matrix product), ``sum_j r_j^m`` for even
    ``m``, and :func:`newton_identities`, about ``max_order^2 / 2`` passes over the rows
    where the build feature by feature takes ``d x max_order`` (at d = 16 and 33
    rows: 0.57 -> 0.27 ms). Rounding as :func:`agreement_sums`'.
    """
    x = signs.to(relevance.dtype)
    powers = [relevance**m for m in range(1, max_order + 1)]
    power_sums = [
        (power @ x.T) if m % 2 else power.sum(-1, keepdim=True)
        for m, power in enumerate(powers, start=1)
    ]  # (E, rows) or (E, 1)
    ones = torch.ones_like(x[:, 0]).expand(relevance.shape[0], -1)
    return torch.stack(newton_identities(power_sums, ones), dim=-1)


def leave_one_out_symmetric(weights: Tensor, sums: Tensor) -> Tensor:
    """``(..., d, K)``: ``e_0 .. e_(K-1)`` of ``weights`` without feature ``i``, for every ``i``.

    From the full sums ``(..., K)`` by ``e_k(w - i) = e_k(w) - w_i e_(k-1)(w - i)``.
    """
    out = [torch.ones_like(weights)]
    for k in range(1, sums.shape[-1]):
        out.append(sums[..., k : k + 1] - weights * out[-1])
    return torch.stack(out, dim=-1)


def order_variances(num_features: int, decay: float) -> Tensor:
    """Prior variance per parity order ``0 .. max``: 1 at order three, ``decay`` per two
    orders beyond; 0 at order one (its coefficients are fitted) and at even orders."""
    top = min(MAX_ORDER, num_features)
    variances = torch.zeros(top + 1, dtype=torch.float64)
    for k in range(3, top + 1, 2):
        variances[k] = decay ** ((k - 3) // 2)
    return variances


@functools.lru_cache(maxsize=64)
def triple_parities(num_features: int, device: torch.device) -> Tensor:
    """``(T, 3)`` the features of every parity of order three (none below three features).

    Cached (read only): the process asks for them five times a fit.
    """
    return torch.combinations(torch.arange(num_features, device=device), 3)


def pattern_tables(relevance: Tensor, max_order: int) -> Tensor:
    """``(..., 2^h, max_order + 1)``: ``e_k(r_j (-1)^(c_j))`` for every bit pattern ``c``.

    ``relevance`` ``(..., h)``; bit ``j`` of ``c`` set means feature ``j``
    disagrees (``x_j x'_j = -1``). Built by doubling, one feature at a time:
    ``2^h x max_order`` operations in all.
    """
    table = relevance.new_zeros(*relevance.shape[:-1], 1, max_order + 1)
    table[..., 0, 0] = 1.0
    for j in range(relevance.shape[-1]):
        weight = relevance[..., j, None, None]
        shifted = torch.nn.functional.pad(table[..., :-1], (1, 0))  # e_(k-1)
        table = torch.cat([table + weight * shifted, table - weight * shifted], dim=-2)
    return table


def pattern_covariances(
    signs: Tensor,
    relevance: Tensor,
    grid: Tensor,
    top: int,
    added: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Every prior's covariance ``(E, W, G, rows, rows)`` read from a table of patterns.

    The covariance of two coalitions depends only on where they agree,
    ``sum_k sigma_k e_k(r_j x_j x'_j)``. Split the features in two halves:
    ``e_k`` of the whole is the convolution of the halves' ``e_i`` and
    ``e_(k-i)``, so the table over all ``2^d`` patterns is
    ``A H_sigma B'`` (``A``, ``B`` :func:`pattern_tables` of the halves, ``H``
    the Hankel matrix of ``sigma``), and each covariance is one gather from it.
    ``added``, two factors whose product (broadcast to ``(E, W, G, 2^d)``) is
    another covariance of the patterns, is added to the table in place before
    the one gather (no temporary of the table's size: at d = 16 the product and
    the sum took 10 of a 1,024-evaluation call's 65 ms).
    """
    table = agreement_table(relevance, grid, top)
    if added is not None:
        table.addcmul_(*added)
    return read_patterns(table, signs, signs)


def agreement_table(relevance: Tensor, grid: Tensor, top: int) -> Tensor:
    """``(E, W, G, 2^d)`` the covariance of every agreement pattern under every prior."""
    d = relevance.shape[-1]
    half = d // 2
    orders = torch.arange(top + 1, device=relevance.device)
    total = orders[:, None] + orders
    hankel = torch.where(total <= top, grid[..., total.clamp_max(top)], 0.0)  # (E, G, K, K)
    first = pattern_tables(relevance[..., :half], top)  # (E, W, 2^half, K)
    second = pattern_tables(relevance[..., half:], top)  # (E, W, 2^(d-half), K)
    weighted = torch.einsum("egil,ewbl->ewgbi", hankel, second)
    return (first[:, :, None] @ weighted.mT).flatten(-2)


def walsh_hadamard(values: Tensor) -> Tensor:
    """Unnormalised Walsh-Hadamard transform along the last dimension (``2^d``).

    ``out[..., T] = sum_S (-1)^popcount(S & T) values[..., S]``; applying it
    twice multiplies by ``2^d``. ``O(d 2^d)`` by butterflies, one per bit.
    """
    count = values.shape[-1]
    d = count.bit_length() - 1
    if count != 1 << d:
        raise ValueError(f"values must have 2^d entries along the last dimension, got {count}.")
    lead = values.shape[:-1]
    # two buffers in turn, each butterfly written straight into the other (half the
    # memory passes of an in-place update through a temporary: 3.4 -> 1.7 ms at 2 x 2^16)
    source = values.reshape(-1, count).clone()
    target = torch.empty_like(source)
    for bit in range(d):
        pairs = source.view(-1, count >> (bit + 1), 2, 1 << bit)
        into = target.view(-1, count >> (bit + 1), 2, 1 << bit)
        torch.add(pairs[:, :, 0, :], pairs[:, :, 1, :], out=into[:, :, 0, :])
        torch.sub(pairs[:, :, 0, :], pairs[:, :, 1, :], out=into[:, :, 1, :])
        source, target = target, source
    return source.view(*lead, count)


def read_patterns(table: Tensor, rows_a: Tensor, rows_b: Tensor) -> Tensor:
    """``(E, W, G, A, B)`` the covariances of the +-1 rows ``rows_a`` with ``rows_b``."""
    d = rows_a.shape[1]
    half = d // 2
    # bit j of the first half at d - half + j, of the second at j - half: the xor of two
    # codes is then the agreement pattern (one pass over the A x B pairs, not four)
    shifts = torch.arange(d, device=rows_a.device)
    shifts = torch.where(shifts < half, shifts + d - half, shifts - half)

    def codes(rows: Tensor) -> Tensor:
        return ((rows > 0).long() << shifts).sum(1)

    patterns = codes(rows_a)[:, None] ^ codes(rows_b)
    flat = table.flatten(0, 2)
    read = torch.gather(flat, 1, patterns.flatten()[None].expand(flat.shape[0], -1))
    return read.view(*table.shape[:3], *patterns.shape)


def cross_covariances(
    rows_a: Tensor, rows_b: Tensor, relevance: Tensor, variances: Tensor, top: int
) -> Tensor:
    """``(E, A, B)`` the covariances of the +-1 rows ``rows_a`` with ``rows_b`` under one
    prior per example (``relevance`` ``(E, d)``, ``variances`` ``(E, top + 1)``)."""
    d = rows_a.shape[1]
    if 2**d <= max(rows_b.shape[0], rows_a.shape[0]) ** 2:
        table = agreement_table(relevance[:, None], variances[:, None], top)
        return read_patterns(table, rows_a, rows_b)[:, 0, 0]
    return weighted_agreement_sums(rows_a, rows_b, relevance[:, None], variances[:, None], top)[
        :, 0, 0
    ]


def weighted_agreement_sums(
    rows_a: Tensor, rows_b: Tensor, relevance: Tensor, grid: Tensor, top: int
) -> Tensor:
    """``(E, W, G, A, B)``: ``sum_k grid[e, g, k] e_k(r_j x_j x'_j)`` for every row ``x`` of
    ``rows_a`` and ``x'`` of ``rows_b`` (+-1), relevance ``(E, W, d)``, grid ``(E, G, top + 1)``.

    The process's priors put no variance on even orders: then
    :func:`odd_order_sums` (about 2.5x faster), else :func:`agreement_sums`.
    """
    even = grid[..., 0::2]
    if top <= MAX_ORDER and not bool(even.any()):
        return odd_order_sums(rows_a, rows_b, relevance, grid, top)
    by_order = agreement_sums(rows_a, rows_b, relevance, top)
    return torch.einsum("egk,kewab->ewgab", grid, by_order)


def odd_order_sums(
    rows_a: Tensor, rows_b: Tensor, relevance: Tensor, grid: Tensor, top: int
) -> Tensor:
    r""":func:`weighted_agreement_sums` for a ``grid`` of odd orders only (up to seven).

    With ``w_j = r_j x_j x'_j``, ``prod_j (1 + t w_j) = sum_k e_k t^k =
    exp(sum_m (-1)^(m-1) p_m t^m / m)``. Since ``w_j^2 = r_j^2``, the even power
    sums are the same for every pair of rows, so the even part of the exponent is
    one scalar series ``C(t) = sum_i gamma_(2i) t^(2i)`` per relevance, and the odd
    part ``O(t) = sum_(m odd) p_m t^m / m`` holds the four matrices ``p_1, p_3,
    p_5, p_7`` (matrix products ``(X diag(r^m)) X'``). The odd ``e_k`` are then
    ``sum_i gamma_(2i) S_(k-2i)`` with ``S_m`` the coefficients of
    ``sinh(O(t))``, polynomials in the four: a dozen passes over the ``A x B``
    pairs and one product with the grid, where Newton's identities take
    ``top^2 / 2`` passes per relevance and order (at d = 32 and 513 rows:
    10 ms against 26 ms). Rounding, relative to the all-agreeing value: within
    1.5e-13 at the process's decays, 1e-11 at a flat one; 1.2-2x Newton's.
    """
    x, y = rows_a.to(relevance.dtype), rows_b.to(relevance.dtype)
    orders = range(1, top + 1, 2)
    p = {m: (x * (relevance**m)[..., None, :]) @ y.T for m in orders}  # (E, W, A, B)
    sinh = _sinh_coefficients(p, top)  # (E, W, S, A, B), S = len(orders)
    # gamma_(2i): the coefficients of exp(-sum_i p_(2i) u^i / (2i)) in u = t^2
    exponent = [-(relevance ** (2 * i)).sum(-1) / (2 * i) for i in range(1, top // 2 + 1)]
    gamma = [torch.ones_like(relevance[..., 0])]
    for n in range(1, top // 2 + 1):
        terms = [i * exponent[i - 1] * gamma[n - i] for i in range(1, n + 1)]
        gamma.append(torch.stack(terms).sum(0) / n)
    # sum_k sigma_k e_k = sum_m a_m S_m with a_m = sum_(k >= m odd) sigma_k gamma_(k - m)
    sigma = grid[:, None]  # (E, 1, G, top + 1)
    weights = torch.stack(
        [
            torch.stack(
                [sigma[..., k] * gamma[(k - m) // 2][..., None] for k in range(m, top + 1, 2)]
            ).sum(0)
            for m in orders
        ],
        dim=-1,
    )  # (E, W, G, S)
    return (weights @ sinh.flatten(-2)).unflatten(-1, sinh.shape[-2:])


def _sinh_coefficients(p: dict[int, Tensor], top: int) -> Tensor:
    """``(..., S, A, B)``: the odd coefficients ``t^1, t^3, ..`` up to ``top`` (at most 7)
    of ``sinh(p_1 t + p_3 t^3 / 3 + p_5 t^5 / 5 + p_7 t^7 / 7)``."""
    p1 = p[1]
    out = p1.new_empty(*p1.shape[:-2], len(p), *p1.shape[-2:])
    out[..., 0, :, :] = p1
    if top < 3:
        return out
    square = p1 * p1
    three = out[..., 1, :, :]
    torch.mul(square, p1, out=three)
    three.mul_(1 / 6).add_(p[3], alpha=1 / 3)  # p3 / 3 + p1^3 / 6
    if top < 5:
        return out
    fourth = square * square
    five = out[..., 2, :, :]
    torch.mul(fourth, p1, out=five)
    five.mul_(1 / 120).addcmul_(square, p[3], value=1 / 6).add_(p[5], alpha=1 / 5)
    if top < 7:
        return out
    seven = out[..., 3, :, :]
    torch.mul(fourth, square, out=seven)
    # p7 / 7 + p1^2 p5 / 10 + p1 p3^2 / 18 + p1^4 p3 / 72 + p1^7 / 5040
    seven.mul_(p1).mul_(1 / 5040).addcmul_(fourth, p[3], value=1 / 72)
    seven.addcmul_(p1 * p[3], p[3], value=1 / 18).addcmul_(square, p[5], value=1 / 10)
    seven.add_(p[7], alpha=1 / 7)
    return out


def agreement_sums(rows_a: Tensor, rows_b: Tensor, relevance: Tensor, top: int) -> Tensor:
    """``(top + 1, *R, A, B)``: ``e_0 .. e_top`` of ``r_j x_j x'_j`` for every row ``x``
    of ``rows_a`` and ``x'`` of ``rows_b`` (+-1, ``(A, d)`` and ``(B, d)``), under every
    relevance ``(*R, d)``, from power sums.

    With ``w_j = r_j x_j x'_j`` and ``x_j x'_j = +-1``, the power sum
    ``p_m = sum_j w_j^m`` is, for odd ``m``, the matrix product
    ``(X diag(r^m)) X'`` and, for even ``m``, ``sum_j r_j^m`` for every pair;
    Newton's identities, ``k e_k = sum_(i=1..k) (-1)^(i-1) e_(k-i) p_i``, give
    ``e_1 .. e_top`` from them: ``top`` matrix products and ``top^2 / 2``
    passes over the ``A x B`` pairs, where a build feature by feature takes
    ``d x top`` passes. In float64 each ``e_k`` is off by about ``1e-16`` of its
    all-agreeing value.
    """
    x, y = rows_a.to(relevance.dtype), rows_b.to(relevance.dtype)
    ones = torch.ones_like(relevance[..., :1, None]).expand(
        *relevance.shape[:-1], *x.shape[:1], y.shape[0]
    )
    power_sums = []
    for m in range(1, top + 1):
        r = relevance**m
        power_sums.append((x * r[..., None, :]) @ y.T if m % 2 else r.sum(-1)[..., None, None])
    return torch.stack(newton_identities(power_sums, ones))


def newton_identities(power_sums: list[Tensor], ones: Tensor) -> list[Tensor]:
    """``[e_0, .., e_K]`` from the power sums ``[p_1, .., p_K]`` (broadcastable), ``e_0``
    being ``ones`` in the shape wanted: ``k e_k = sum_(i=1..k) (-1)^(i-1) e_(k-i) p_i``."""
    sums = [ones]
    for k in range(1, len(power_sums) + 1):
        total = sums[k - 1] * power_sums[0]
        for i in range(2, k + 1):
            total = total.add(sums[k - i] * power_sums[i - 1], alpha=(-1) ** (i - 1))
        sums.append(total / k)
    return sums


def built_covariances(signs: Tensor, relevance: Tensor, grid: Tensor, top: int) -> Tensor:
    """Every prior's covariance ``(E, W, G, rows, rows)`` from power sums
    (:func:`weighted_agreement_sums`), where the ``2^d`` agreement patterns outnumber
    the pairs of rows (at d = 32 and 512 rows: 28 ms by Newton's identities, against
    82 ms feature by feature; 10 ms through ``sinh``).

    Row blocks of at most :data:`BUILD_CHUNK_ELEMENTS` ``e_k`` entries on the
    CPU (the cache), :data:`ACCELERATOR_BUILD_ELEMENTS` elsewhere (memory).
    """
    rows = signs.shape[0]
    covariances = relevance.new_empty(*relevance.shape[:2], grid.shape[1], rows, rows)
    per_row = (top + 1) * relevance.shape[0] * relevance.shape[1] * rows
    limits = {"cpu": BUILD_CHUNK_ELEMENTS, "accelerator": ACCELERATOR_BUILD_ELEMENTS}
    limit = work_floats(signs.device, limits)
    block = max(1, min(rows, limit // per_row))
    for start in range(0, rows, block):
        covariances[..., start : start + block, :] = weighted_agreement_sums(
            signs[start : start + block], signs, relevance, grid, top
        )
    return covariances


def pseudo_inverse(normal: Tensor) -> tuple[Tensor, Tensor]:
    """The pseudo-inverse of the symmetric ``normal`` ``(..., d, d)`` and the log of its
    pseudo-determinant, eigenvalues below :data:`NULL_EIGENVALUE` of the largest
    dropped.

    Where the design separates every feature this is the inverse to rounding;
    where it does not (a null direction, singular up to rounding) the fit takes
    the minimum-norm split of the unseen direction instead of amplifying
    rounding error along it (an exact-zero-pivot test misses those).

    A Cholesky factor serves wherever it certifies that no eigenvalue is
    dropped (``tr(A) tr(A^-1) < 1 / NULL_EIGENVALUE``: the smallest eigenvalue
    is at least ``1 / tr(A^-1)`` and the largest at most ``tr(A)``); only the
    others take the eigendecomposition. On a GPU that matters: batched
    ``eigh`` above 32 x 32 runs one matrix at a time there.
    """
    factor, info = torch.linalg.cholesky_ex(normal)
    # a failed factor may hold a zero pivot, which cholesky_inverse refuses: the
    # identity stands in (not certified, so replaced below), with no read-back
    eye = torch.eye(normal.shape[-1], dtype=normal.dtype, device=normal.device)
    factor = torch.where((info == 0)[..., None, None], factor, eye)
    inverse = torch.cholesky_inverse(factor)
    log_det = 2 * torch.log(factor.diagonal(dim1=-2, dim2=-1)).sum(dim=-1)
    trace = normal.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    inverse_trace = inverse.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    certified = (info == 0) & (inverse_trace > 0) & (trace * inverse_trace < 1 / NULL_EIGENVALUE)
    if bool(certified.all()):  # one read-back
        return inverse, log_det
    doubtful = ~certified
    eigen_inverse, eigen_log_det = _eigen_pseudo_inverse(normal[doubtful])
    inverse[doubtful], log_det[doubtful] = eigen_inverse, eigen_log_det
    return inverse, log_det


def _eigen_pseudo_inverse(normal: Tensor) -> tuple[Tensor, Tensor]:
    values, vectors = torch.linalg.eigh(normal)
    floor = NULL_EIGENVALUE * values[..., -1:].clamp_min(0.0)
    kept = values > floor
    inverse_values = torch.where(kept, 1.0 / torch.where(kept, values, 1.0), 0.0)
    inverse = (vectors * inverse_values[..., None, :]) @ vectors.mT
    log_det = torch.where(kept, torch.log(torch.where(kept, values, 1.0)), 0.0).sum(dim=-1)
    return inverse, log_det


def cholesky_solve(rhs: Tensor, factor: Tensor) -> Tensor:
    """``K^-1 rhs`` from ``K``'s lower Cholesky factor: two triangular solves, which
    torch runs about twice as fast as ``torch.cholesky_solve`` (same result)."""
    half = torch.linalg.solve_triangular(factor, rhs, upper=False)
    return torch.linalg.solve_triangular(factor.mT, half, upper=True)


def prior_shapley_variances(relevance: Tensor, order_weights: Tensor) -> Tensor:
    """``(E, d)`` the prior variance of each ``phi_i``'s part of order three and up,
    ``sum_k sigma_k (2 / k)^2 r_i e_(k-1)(r_j, j != i)`` (``order_weights``
    ``sigma_k (2 / k)^2``)."""
    top = order_weights.shape[1]
    without = leave_one_out_symmetric(relevance, elementary_symmetric(relevance, top - 1))
    return relevance * torch.einsum("eik,ek->ei", without, order_weights)


def shapley_order_weights(top: int, like: Tensor) -> Tensor:
    """``2 / k`` for odd ``k`` (the Shapley value of an order-``k`` parity per member)."""
    weights = torch.zeros(top + 1, dtype=torch.float64, device=like.device)
    for k in range(1, top + 1, 2):
        weights[k] = 2.0 / k
    return weights
