"""Universal kriging of the odd part under a prior's covariance: the linear algebra.

What: given the Cholesky factors of candidate priors' covariances between the
observed rows (``plans/walsh_gp.py``), the generalised least-squares fit of the
linear parities, the restricted likelihood of each prior, the posterior
variances of the Shapley values and the leave-one-out estimate of the scale.
Pure tensor functions, batched over examples and priors.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .walsh_kernel import cholesky_solve, pseudo_inverse


class Kriging(NamedTuple):
    """Universal kriging under every prior ``(E, W, G, ...)``."""

    linear: Tensor  # (..., d, 1) the generalised least-squares fit of the linear parities
    inverse_residual: Tensor  # (..., rows) K^-1 (u - X beta)
    likelihood: Tensor  # (...) restricted, the scale profiled out; -inf where the prior failed
    normal_inverse: Tensor  # (..., d, d) the pseudo-inverse of X' K^-1 X
    quadratic: Tensor  # (...) (u - X beta)' K^-1 (u - X beta)


def kriging(signs: Tensor, odd: Tensor, factor: Tensor, info: Tensor) -> Kriging:
    """Universal kriging under every prior (see :class:`Kriging`)."""
    rows, d = signs.shape
    target = odd[:, None, None, :, None].expand(-1, *factor.shape[1:3], -1, -1)
    solved = cholesky_solve(
        torch.cat([signs.expand(*factor.shape[:3], -1, -1), target], dim=-1), factor
    )
    inverse_signs, inverse_odd = solved[..., :d], solved[..., d:]
    normal = signs.T @ inverse_signs  # (E, W, G, d, d)
    normal_inverse, log_pseudo_det = pseudo_inverse(normal)
    linear = normal_inverse @ (signs.T @ inverse_odd)
    inverse_residual = (inverse_odd - inverse_signs @ linear)[..., 0]  # K^-1 (u - X beta)
    quadratic = (target[..., 0] * inverse_residual).sum(dim=-1).clamp_min(1e-300)
    likelihood = (
        -0.5 * (rows - d) * torch.log(quadratic)
        - torch.log(factor.diagonal(dim1=-2, dim2=-1)).sum(dim=-1)
        - 0.5 * log_pseudo_det
    )
    ok = (info == 0) & torch.isfinite(likelihood)
    likelihood = torch.where(ok, likelihood, -torch.inf)
    return Kriging(linear, inverse_residual, likelihood, normal_inverse, quadratic)


def posterior_variances(
    signs: Tensor, prior: Tensor, covariance: Tensor, factor: Tensor, normal_inverse: Tensor
) -> Tensor:
    """``Var(phi_i | u) / s^2`` ``(E, d)`` under universal kriging.

    ``v_i - c_i' K^-1 c_i + g_i' (X' K^-1 X)^-1 g_i`` with ``v_i`` the prior
    variance of ``phi_i``'s part of order three and up (``prior``), ``c_i`` its
    covariance with the observations (``covariance``, ``(E, rows, d)``) and
    ``g_i = 2 e_i - X' K^-1 c_i`` what the linear parities' estimate adds.
    """
    d = signs.shape[1]
    solved = cholesky_solve(covariance, factor)  # K^-1 c_i
    explained = (covariance * solved).sum(dim=1)
    eye = torch.eye(d, dtype=torch.float64, device=signs.device)
    lift = 2 * eye - signs.T @ solved  # (E, d, d): column i is g_i
    added = (lift * (normal_inverse @ lift)).sum(dim=1)
    return (prior - explained + added).clamp_min(0.0)


def leave_one_out_scale(
    signs: Tensor, factor: Tensor, normal_inverse: Tensor, inverse_residual: Tensor
) -> Tensor:
    """``(E,)`` the scale ``s^2`` that standardises the leave-one-out residuals.

    Under universal kriging the residual of row ``i`` predicted from the
    others is ``(P u)_i / P_ii`` with ``P = K^-1 - K^-1 X (X' K^-1 X)^-1 X' K^-1``,
    and its variance ``s^2 / P_ii``; so ``mean_i (P u)_i^2 / P_ii`` estimates
    ``s^2`` from how well each observation is predicted, where the restricted
    likelihood trusts the prior's shape. Rows the linear parities alone
    determine (``P_ii`` ~ 0) are left out.
    """
    rows = signs.shape[0]
    eye = torch.eye(rows, dtype=torch.float64, device=signs.device)
    inverse_factor = torch.linalg.solve_triangular(factor, eye, upper=False)  # L^-1
    diagonal = inverse_factor.square().sum(dim=-2)  # diag(K^-1)
    solved = cholesky_solve(signs.expand(factor.shape[0], -1, -1), factor)
    diagonal = diagonal - ((solved @ normal_inverse) * solved).sum(dim=-1)  # diag(P)
    kept = diagonal > 1e-9 * diagonal.amax(dim=-1, keepdim=True)
    ratios = torch.where(kept, inverse_residual.square() / diagonal.clamp_min(1e-300), 0.0)
    return ratios.sum(dim=-1) / kept.sum(dim=-1).clamp_min(1)
