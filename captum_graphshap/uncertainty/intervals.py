"""Interval arithmetic shared by the uncertainty measures.

Confidence levels, normal and Student-t quantiles (torch has no Student-t
inverse CDF and SciPy is not a dependency), the moderated interval over
i.i.d. samples of every feature (:func:`moderated_half_width`, the default of
``ShapleySampling``), and the interval over the references of a background
set for estimators that are linear in the game.
"""

from __future__ import annotations

import math
import numbers
from statistics import NormalDist

import torch
from torch import Tensor

from ..plans.draws import random_indices

#: resampled means of the ``"bootstrap"`` interval
BOOTSTRAP_RESAMPLES = 1000


def check_confidence(confidence: object) -> float:
    """The credible/confidence level: a number strictly between 0 and 1."""
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise TypeError(
            f"confidence must be a number in (0, 1) such as 0.95, got {type(confidence).__name__}."
        )
    level = float(confidence)
    if not 0.0 < level < 1.0:
        raise ValueError(
            f"confidence must be strictly between 0 and 1 (e.g. 0.95 for a 95% interval), "
            f"got {confidence}."
        )
    return level


def normal_quantile(confidence: float) -> float:
    """``z`` with ``P(|Z| <= z) = confidence`` for a standard normal Z (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def student_t_quantile(confidence: float, dof: float) -> float:
    """``t`` with ``P(|T| <= t) = confidence`` for Student's t with ``dof`` degrees of freedom.

    Solves ``cdf(t) = (1 + confidence) / 2`` by bisection on the exact CDF
    (regularised incomplete beta function), accurate to about 1e-10; huge
    ``dof`` falls back to the normal quantile, which it equals to that accuracy.
    """
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be positive, got {dof}.")
    if dof > 1e7:
        return normal_quantile(confidence)
    tail = (1.0 - confidence) / 2  # P(T > t)
    low, high = 0.0, 1.0
    while _t_upper_tail(high, dof) > tail:
        high *= 2.0
        if high > 1e300:
            return math.inf
    for _ in range(200):
        middle = 0.5 * (low + high)
        if _t_upper_tail(middle, dof) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def _t_upper_tail(t: float, dof: float) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_x(dof/2, 1/2) / 2`` with ``x = dof / (dof + t^2)``."""
    x = dof / (dof + t * t)
    return 0.5 * _regularized_beta(x, dof / 2, 0.5)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)`` by Lentz's continued fraction (Numerical Recipes' betacf)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def moderated_variance(samples: Tensor) -> Tensor:
    """Each feature's variance shrunk toward a prior fitted across the features.

    Empirical Bayes on the variances (the moderated variance of limma, Smyth
    2004, with a prior that follows a covariate as in limma-trend): feature
    ``i``'s ``K`` samples have sample variance ``s_i^2`` (``K - 1`` degrees of
    freedom) and mean square ``m_i = mean_k y_ki^2``. The prior guesses
    ``sigma_i^2 ~ c m_i``, one ratio ``c = sum_i s_i^2 / sum_i m_i`` shared by
    the features, worth as many degrees of freedom as the data (``K - 1``), so
    the posterior variance is the average ``(c m_i + s_i^2) / 2`` with
    ``2 (K - 1)`` degrees of freedom. The mean square does not vanish when a
    feature's few samples happen to coincide (a permutation sample is one of
    ``2^(d-1)`` values, so at ``K = 2`` they often do), which is where the
    plain sample variance is zero and its interval misses.

    Args:
        samples: ``(N, K, d)``: ``K >= 2`` i.i.d. samples of each of ``d``
            features for ``N`` examples; the prior is fitted per example.

    Returns:
        ``(N, d)``: the moderated variances.
    """
    variance = samples.var(dim=1, correction=1)
    mean_square = samples.square().mean(dim=1)
    total = mean_square.sum(dim=1, keepdim=True)
    # every sample 0: the feature is exact, and so is the prior (ratio 0, not 0/0)
    ratio = variance.sum(dim=1, keepdim=True) / torch.where(total > 0, total, 1.0)
    return (ratio * mean_square + variance) / 2


def moderated_half_width(samples: Tensor, confidence: float) -> Tensor:
    """Half-widths ``(N, d)`` of the moderated interval over ``(N, K, d)`` samples.

    The wider of the plain Student-t interval, ``t_{K-1} s_i / sqrt(K)``, and
    the moderated one, ``t_{2(K-1)} s~_i / sqrt(K)`` with ``s~_i^2`` from
    :func:`moderated_variance`: the interval is the union of the two, so it
    covers whenever either does. The plain ``t`` misses when a feature's
    samples coincide by chance (zero spread, a zero-width interval); the
    moderated one can miss a feature whose spread the across-feature prior
    underrates; each mostly covers where the other misses. Its coverage,
    against the plain ``t``'s, is measured by ``benchmarks/sampling_coverage.py``
    (benchmarks/README.md).
    """
    count = samples.shape[1]
    if count < 2:
        raise ValueError(
            f"an interval needs at least 2 independent samples, got {count}; sample more "
            "orderings (n_samples)."
        )
    work = samples if samples.dtype in (torch.float32, torch.float64) else samples.float()
    plain = student_t_quantile(confidence, count - 1) * work.std(dim=1, correction=1)
    moderated = student_t_quantile(confidence, 2 * (count - 1)) * moderated_variance(work).sqrt()
    return (torch.maximum(plain, moderated) / math.sqrt(count)).to(samples.dtype)


def interval_over_references(per_reference: Tensor, confidence: float) -> tuple[Tensor, Tensor]:
    """Mean and half-width over the references of a background set.

    For an estimator that is linear in the game, the attribution of the
    averaged game ``v = mean_b v_b`` is the mean of the single-reference
    attributions, so their spread over the references gives a standard-error
    interval (Merrick and Taly): ``mean ± z * SD / sqrt(B)``, with the sample
    standard deviation (``B - 1`` in the denominator) and the normal ``z``.

    Args:
        per_reference:
            ``(..., B)``: one attribution per reference along the last dimension;
            ``B >= 2``.
        confidence:
            The level of the interval, in (0, 1).

    Returns:
        ``(mean, half_width)``, both of shape ``per_reference.shape[:-1]``.
    """
    count = per_reference.shape[-1]
    if count < 2:
        raise ValueError(
            f"an interval over references needs at least 2 references, got {count}; pass "
            "references= with more rows (a background set), or return_uncertainty=False."
        )
    mean = per_reference.mean(dim=-1)
    spread = per_reference.std(dim=-1, correction=1)
    return mean, normal_quantile(confidence) * spread / math.sqrt(count)


def mean_and_half_width(
    samples: Tensor,
    confidence: float,
    interval: str,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """Mean over i.i.d. samples ``(N, K, d)`` and the half-width of its interval.

    ``"t"``: ``t_{K-1} * SSD / sqrt(K)``, SSD the sample standard deviation
    and ``t_{K-1}`` Student's quantile with ``K - 1`` degrees of freedom
    (exact for normal samples; Merrick & Taly's normal ``z`` under-covers at
    few samples). ``"normal"``: the same with the normal ``z``.
    ``"bootstrap"``: half the distance between the percentile bounds of 1000
    resampled means, which needs no normality. ``"moderated"``: the plain t
    widened by :func:`moderated_half_width`.
    """
    if interval == "moderated":
        return samples.mean(dim=1), moderated_half_width(samples, confidence)
    mean = samples.mean(dim=1)
    count = samples.shape[1]
    if interval in ("t", "normal"):
        spread = samples.std(dim=1, unbiased=True)
        quantile = (
            student_t_quantile(confidence, count - 1)
            if interval == "t"
            else normal_quantile(confidence)
        )
        return mean, quantile * spread / math.sqrt(count)
    picks = random_indices(count, (BOOTSTRAP_RESAMPLES, count), generator, samples.device)
    weights = torch.zeros(BOOTSTRAP_RESAMPLES, count, dtype=samples.dtype, device=samples.device)
    weights.scatter_add_(1, picks, torch.ones_like(picks, dtype=samples.dtype))
    resampled = torch.einsum("bk,nkd->nbd", weights / count, samples)
    tail = (1.0 - confidence) / 2
    bounds = torch.quantile(
        resampled,
        torch.tensor([tail, 1.0 - tail], dtype=samples.dtype, device=samples.device),
        dim=1,
    )
    return mean, (bounds[1] - bounds[0]) / 2
