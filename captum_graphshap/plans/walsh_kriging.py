"""Universal kriging of the odd part under a prior's covariance: the linear algebra.

What: the generalised least-squares fit of the linear parities under candidate
priors' covariances between the observed rows (``plans/walsh_gp.py``), the
restricted likelihood of each prior, the posterior variances of the Shapley
values and the leave-one-out estimate of the scale. Pure tensor functions,
batched over examples and priors.

Why projected: the process (parities of order three and up) has almost no
variance along the linear parities' columns once most pairs are observed (on
every pair, none: the parities are orthogonal), so ``K`` is singular there up
to the jitter, and ``K^-1`` amplified rounding by ``1 / jitter`` in exactly the
directions a game of order two lives in. Universal kriging only needs ``K`` on
the complement of those columns (``P = Q2 (Q2' K Q2)^-1 Q2'``), so the
covariance factorised is ``K' = P_perp K P_perp + level Q1 Q1'`` (``Q1`` an
orthonormal basis of the columns, ``P_perp = I - Q1 Q1'``): block-diagonal,
the complement's block is ``Q2' K Q2`` and the columns' is well conditioned.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .walsh_kernel import NULL_EIGENVALUE, cholesky_solve

#: Jitter added to the factorised covariance's diagonal, relative to its mean
#: diagonal (the values are exact, but the process can be near-singular on the
#: complement: parities above the prior's top order, or a near-linear prior).
JITTER = 1e-10


class Projection(NamedTuple):
    """The linear parities' columns ``X`` ``(rows, d)`` as ``X = Q1 S V'`` (rank ``r``)."""

    basis: Tensor  # (rows, r) Q1: orthonormal
    solve: Tensor  # (d, r) V S^-1: beta = solve @ (Q1' Xbeta), least squares of least norm


class Factored(NamedTuple):
    """Every prior's projected covariance ``(E, W, G, ...)``, factorised."""

    factor: Tensor  # (..., rows, rows) lower Cholesky factor of K' (jitter included)
    info: Tensor  # (...) nonzero where the factorisation failed
    cross: Tensor  # (..., rows, r) K Q1, the covariance with the columns
    level: Tensor  # (...) K' on the columns (the eigenvalue there)
    projection: Projection  # the columns' split


class Kriging(NamedTuple):
    """Universal kriging under every prior ``(E, W, G, ...)``."""

    linear: Tensor  # (..., d, 1) the generalised least-squares fit of the linear parities
    inverse_residual: Tensor  # (..., rows) K^-1 (u - X beta) = P u
    likelihood: Tensor  # (...) restricted, the scale profiled out; -inf where the prior failed
    quadratic: Tensor  # (...) (u - X beta)' K^-1 (u - X beta) = u' P u


def linear_projection(signs: Tensor) -> Projection:
    """The rank-revealing split of the linear parities' columns ``signs`` ``(rows, d)``.

    Singular values below ``sqrt(NULL_EIGENVALUE)`` of the largest are a null
    direction of the design (features it does not separate): dropped, so the
    fit takes the minimum-norm split of it.
    """
    left, values, right = torch.linalg.svd(signs, full_matrices=False)
    rank = int((values > NULL_EIGENVALUE**0.5 * values[0]).sum())
    return Projection(left[:, :rank], right[:rank].T / values[:rank])


def factor_projected(covariances: Tensor, projection: Projection) -> Factored:
    """Factorise ``K' = P_perp K P_perp + level Q1 Q1'`` for every covariance ``K``
    ``(..., rows, rows)``, overwritten. A failed factor is replaced by the identity
    (``info != 0``: the caller drops it)."""
    basis = projection.basis
    rows, rank = basis.shape
    diagonal = covariances.diagonal(dim1=-2, dim2=-1)
    mean_diagonal = diagonal.mean(dim=-1)
    # no parity of order three (d < 3): the generalised fit is ordinary least squares
    level = torch.where(mean_diagonal > 0, mean_diagonal, torch.ones_like(mean_diagonal))
    jitter = torch.where(mean_diagonal > 0, JITTER * mean_diagonal, torch.ones_like(level))
    cross = covariances @ basis  # (..., rows, r)
    if rank:
        # K' = K + [Q1 (Q1' K Q1 + level I) - K Q1, -Q1] [Q1, K Q1]'
        inner = basis.T @ cross
        inner.diagonal(dim1=-2, dim2=-1).add_(level[..., None])
        spread = basis.expand_as(cross)
        left = torch.cat([spread @ inner - cross, -spread], dim=-1)
        right = torch.cat([spread, cross], dim=-1)
        flat = covariances.view(-1, rows, rows)
        flat.baddbmm_(left.reshape(-1, rows, 2 * rank), right.reshape(-1, rows, 2 * rank).mT)
    diagonal.add_(jitter[..., None])
    factor, info = cholesky_in_place(covariances)
    failed = info != 0
    if bool(failed.any()):
        factor[failed] = torch.eye(rows, dtype=factor.dtype, device=factor.device)
    return Factored(factor, info, cross, level + jitter, projection)


def cholesky_in_place(matrices: Tensor) -> tuple[Tensor, Tensor]:
    """Lower Cholesky factors of the symmetric, contiguous ``matrices`` ``(..., n, n)``,
    written over them, and the info.

    A symmetric matrix stored by rows is also stored by columns, LAPACK's layout, so
    the factorisation runs in the matrices' own memory (the factor is returned as
    the column-major view ``matrices.mT``): ``cholesky_ex`` otherwise copies every
    matrix into a fresh allocation first, whose page faults made the factorisation
    take twice as long (80 matrices of 257 x 257 on one CPU thread: 41 ms, in place
    21 ms).
    """
    view = matrices.mT
    info = torch.empty(matrices.shape[:-2], dtype=torch.int32, device=matrices.device)
    return torch.linalg.cholesky_ex(view, out=(view, info))


def kriging(odd: Tensor, factored: Factored) -> Kriging:
    """Universal kriging of ``odd`` ``(E, rows)`` under every prior (see :class:`Kriging`)."""
    basis, solve = factored.projection
    rows, rank = basis.shape
    coordinates = odd @ basis  # (E, r)
    residual = odd - coordinates @ basis.T  # P_perp u: what the linear parities leave
    factor = factored.factor
    shape = factor.shape[:-2]
    target = residual.reshape(len(odd), *(1,) * (len(shape) - 1), rows, 1).expand(*shape, rows, 1)
    inverse_residual = cholesky_solve(target, factor)[..., 0]  # P u
    quadratic = (target[..., 0] * inverse_residual).sum(dim=-1).clamp_min(1e-300)
    # X beta = u - K P u = Q1 (Q1' u - (K Q1)' P u)
    fitted = coordinates.reshape(len(odd), *(1,) * (len(shape) - 1), rank) - (
        factored.cross * inverse_residual[..., None]
    ).sum(dim=-2)
    linear = (fitted @ solve.T)[..., None]
    # log det(Q2' K Q2) = log det K' - r log(level): the restricted likelihood up to
    # log det(X' X), the same for every prior
    likelihood = (
        -0.5 * (rows - rank) * torch.log(quadratic)
        - torch.log(factor.diagonal(dim1=-2, dim2=-1)).sum(dim=-1)
        + 0.5 * rank * torch.log(factored.level)
    )
    ok = (factored.info == 0) & torch.isfinite(likelihood)
    likelihood = torch.where(ok, likelihood, -torch.inf)
    return Kriging(linear, inverse_residual, likelihood, quadratic)


def posterior_variances(
    projection: Projection, prior: Tensor, covariance: Tensor, factor: Tensor, cross: Tensor
) -> Tensor:
    """``Var(phi_i | u) / s^2`` ``(E, d)`` under universal kriging.

    ``phi_i = 2 beta_i + h_i``, ``h_i`` its part of order three and up, of prior
    variance ``v_i`` (``prior``) and covariance ``c_i`` with the observations
    (``covariance``, ``(E, rows, d)``). With ``b_i = 2 S^-1 V' e_i`` the
    estimate's error is ``h_i - b_i' e_1`` (``e_1 = Q1' e``, the process on the
    columns, which the flat prior leaves to ``beta``) less its conditional mean
    on ``e_2 = Q2' e``: variance
    ``v_i - 2 b_i' Q1' c_i + b_i' K11 b_i - f_i' (Q2' K Q2)^-1 f_i`` with
    ``f_i = Q2' (c_i - K Q1 b_i)``. ``factor``: the chosen priors' of
    :func:`factor_projected`, ``cross`` their ``K Q1``.
    """
    basis, solve = projection
    lift = 2 * solve.T  # (r, d): column i is b_i
    inner = basis.T @ cross  # (E, r, r) K11
    unexplained = (
        prior
        - 2 * (lift * (basis.T @ covariance)).sum(dim=-2)
        + (lift * (inner @ lift)).sum(dim=-2)
    )
    rest = covariance - cross @ lift
    rest = rest - basis @ (basis.T @ rest)  # on the complement
    explained = torch.linalg.solve_triangular(factor, rest, upper=False).square().sum(dim=-2)
    return (unexplained - explained).clamp_min(0.0)


def leave_one_out_scale(projection: Projection, factor: Tensor, inverse_residual: Tensor) -> Tensor:
    """``(E,)`` the scale ``s^2`` that standardises the leave-one-out residuals.

    Under universal kriging the residual of row ``i`` predicted from the
    others is ``(P u)_i / P_ii`` with ``P = K^-1 - K^-1 X (X' K^-1 X)^-1 X' K^-1
    = Q2 (Q2' K Q2)^-1 Q2'``, and its variance ``s^2 / P_ii``; so
    ``mean_i (P u)_i^2 / P_ii`` estimates ``s^2`` from how well each observation
    is predicted, where the restricted likelihood trusts the prior's shape. Rows
    the linear parities alone determine (``P_ii`` ~ 0) are left out.
    """
    basis = projection.basis
    rows = basis.shape[0]
    complement = torch.eye(rows, dtype=torch.float64, device=basis.device) - basis @ basis.T
    # P_ii = |L'^-1 P_perp e_i|^2: a sum of squares, no cancellation
    diagonal = torch.linalg.solve_triangular(factor, complement, upper=False).square().sum(dim=-2)
    kept = diagonal > 1e-9 * diagonal.amax(dim=-1, keepdim=True)
    ratios = torch.where(kept, inverse_residual.square() / diagonal.clamp_min(1e-300), 0.0)
    return ratios.sum(dim=-1) / kept.sum(dim=-1).clamp_min(1)
