r"""Control variates for permutation sampling (ControlSHAP, Goldwasser & Hooker 2023).

A surrogate game ``q`` with known Shapley value ``phi(q)`` (a second-order
Taylor expansion, :func:`~captum_graphshap.plans.surrogates.quadratic_from_taylor`
of the terms :func:`~captum_graphshap.engine.derivatives.taylor_expansion`
computes) is evaluated on the same orderings as the model, by arithmetic. Each
ordering's marginal contributions ``c_v`` then have a companion ``c_q`` whose
mean is known, and the estimate is the mean of

    ``r = c_v - beta (c_q - phi(q))``

which is unbiased for any ``beta`` fixed in advance (``beta = 1`` samples the
residual game ``v - q`` and adds ``phi(q)`` back). The variance-optimal
``beta_i = Cov(c_v, c_q) / Var(c_q)`` per example and feature is estimated
**cross-fitted**: the independent samples are split in two halves and each
half uses the coefficient of the other, so the estimate stays exactly
unbiased (a coefficient fitted on the same samples biases it at O(1/M)).

Under antithetic pairs the quadratic part of a game cancels already, so a
quadratic surrogate gains little there (benchmarks/README.md, "Constants
and their measurements"); with independent orderings (``antithetic=False``, Captum's
sampler) it removes the quadratic part's noise. Efficiency holds per ordering
(:func:`efficient`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .surrogates import QuadraticSurrogate

#: ``(N, M, d, d)`` elements of the "before" indicator built at once.
PRECEDENCE_CHUNK_ELEMENTS = 2**24


def surrogate_contributions(surrogate: QuadraticSurrogate, ranks: Tensor) -> Tensor:
    """``(N, M, d)`` marginal contributions of ``q`` along the orderings ``ranks``.

    Feature ``i`` joins the features ranked before it, so its contribution is
    ``a_i + sum_{j before i} B_ij``: no coalition is built.
    """
    batch, orderings, d = ranks.shape
    pairwise = surrogate.pairwise
    out = torch.empty(batch, orderings, d, dtype=pairwise.dtype, device=pairwise.device)
    step = max(1, PRECEDENCE_CHUNK_ELEMENTS // max(1, batch * d * d))
    for start in range(0, orderings, step):
        chunk = ranks[:, start : start + step]
        before = (chunk[:, :, None, :] < chunk[:, :, :, None]).to(pairwise.dtype)
        out[:, start : start + step] = torch.einsum("nmij,nij->nmi", before, pairwise)
    return out + surrogate.linear[:, None, :]


def ordering_groups(orderings: int, antithetic: bool) -> Tensor:
    """``(M,)`` the independent unit of each ordering: its antithetic pair, or itself."""
    index = torch.arange(orderings)
    if not antithetic:
        return index
    pairs = orderings // 2
    return torch.where(index < 2 * pairs, index % max(pairs, 1), index)


def controlled_contributions(
    contributions: Tensor,
    surrogate_contributions: Tensor,
    surrogate_shapley: Tensor,
    groups: Tensor,
    coefficient: str | float,
) -> Tensor:
    """``(N, M, d)`` per-ordering ``r = c_v - beta (c_q - phi(q))``; their mean is the estimate.

    Args:
        contributions: ``(N, M, d)`` the model's marginal contributions.
        surrogate_contributions: ``(N, M, d)`` the surrogate's on the same orderings.
        surrogate_shapley: ``(N, d)`` ``phi(q)``.
        groups: ``(M,)`` independent unit of each ordering (:func:`ordering_groups`).
        coefficient: a number (``1.0``: the residual game), or ``"optimal"``:
            cross-fitted ``Cov / Var`` per example and feature (with fewer
            than two units per half, ``1.0``).
    """
    centred = surrogate_contributions - surrogate_shapley[:, None, :]
    if coefficient != "optimal":
        return contributions - float(coefficient) * centred
    unique = torch.unique(groups)
    half = torch.isin(groups, unique[1::2]).to(contributions.device)
    if min(len(unique[0::2]), len(unique[1::2])) < 2:
        return contributions - centred
    beta = torch.empty_like(contributions)
    for part in (half, ~half):
        # this half's coefficient comes from the other half's orderings
        beta[:, part] = optimal_coefficient(contributions[:, ~part], centred[:, ~part])[:, None]
    return efficient(contributions - beta * centred, beta * centred, centred)


def efficient(controlled: Tensor, correction: Tensor, centred: Tensor) -> Tensor:
    """Each ordering's controlled contributions, summing to ``v(D) - v(empty)`` again.

    Along an ordering the model's contributions sum to ``v(D) - v(empty)`` and
    the centred surrogate's to 0, so a coefficient shared by the features
    keeps that sum; per-feature coefficients move it by ``-sum_i beta_i
    (c_q - phi(q))_i``. That amount is added back, shared equally by the
    features the surrogate involves (a fixed set: features it does not touch,
    dummies among them, keep exactly their own contributions). Its expectation
    is 0 (each term is centred and ``beta`` is cross-fitted), so the estimate
    stays unbiased, and each ordering's sample stays independent of the
    others, so the interval over them still holds.
    """
    involved = (centred != 0).any(dim=1, keepdim=True).to(controlled.dtype)  # (N, 1, d)
    count = involved.sum(dim=2, keepdim=True).clamp_min(1)
    return controlled + correction.sum(dim=2, keepdim=True) * involved / count


def optimal_coefficient(contributions: Tensor, centred: Tensor) -> Tensor:
    """``(N, d)`` ``Cov(c_v, c_q) / Var(c_q)`` over the orderings (0 where ``c_q`` is constant)."""
    v = contributions - contributions.mean(dim=1, keepdim=True)
    q = centred - centred.mean(dim=1, keepdim=True)
    variance = (q * q).sum(dim=1)
    covariance = (v * q).sum(dim=1)
    tiny = torch.finfo(variance.dtype).tiny
    return torch.where(variance > tiny, covariance / variance.clamp_min(tiny), 0.0)
