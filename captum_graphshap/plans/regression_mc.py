r"""Unbiased regression-adjusted Monte Carlo (Witter, Liu & Musco, 2025), cross-fitted.

Write the Shapley value as a sum over all coalitions,
``phi_i = sum_T c_i(T) v(T)`` with ``c_i(T) = 1 / (|T| C(d, |T|))`` for
``i in T`` and ``-1 / ((d - |T|) C(d, |T|))`` otherwise. A coalition and
its complement have opposite weights, so over a complementary pair only the
odd part ``u(T) = (v(T) - v(D - T)) / 2`` counts: the size pair
``(s, d - s)`` contributes ``sum_T 2 c_i(T) u(T)`` over one coalition of
each of its pairs, and the endpoints contribute ``(v(D) - v(empty)) / d``.

The plan evaluates the endpoints, **enumerates** every size pair whose
coalitions fit its share of the budget (exactly, so no budget goes to
duplicates), and draws the remaining pairs **i.i.d.**: a size pair with
probability ``q_s`` (even over the open size pairs, as in
:func:`~captum_graphshap.plans.stratified.size_allocation`), then a uniform
coalition of it. An i.i.d. draw ``T`` gives the unbiased term
``(N_s / q_s) 2 c_i(T) u(T)`` (``N_s`` the size pair's number of pairs).

**Regression adjustment.** A surrogate ``g`` whose Shapley value is known
in closed form (the odd cubic of
:mod:`~captum_graphshap.plans.regression_adjusted`: linear parities plus the
most interacting triples) takes the place of ``u`` and only the residual
``u - g`` is sampled::

    phi = (v(D) - v(empty)) / d + sum_enumerated 2 c u
          + phi_open(g) + mean_draws (N_s / q_s) 2 c (u - g)

where ``phi_open(g)`` is ``phi(g)`` less its endpoint and enumerated terms.
**Cross-fitting** keeps it unbiased with every sample reused: the draws are
split into ``K`` folds; fold ``k``'s residual mean uses a ``g`` fitted on the
enumerated pairs and the other folds only, which are independent of fold
``k`` (i.i.d. draws), so each fold's estimate has expectation ``phi``
exactly, and the result is their mean. The triples are chosen out of fold
too. Efficiency holds exactly (``sum_i c_i(T) = 0``), and the estimate is
exact once the draws fall in enumerated sizes only.

Compared with the cubic estimator (``phi(g)`` fitted on every sample,
consistent but biased at O(1/n)), this one is unbiased, at the price of
fits on ``(K - 1) / K`` of the draws and the residual's sampling noise.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .draws import uniform_subsets
from .odd_fit import every_column_targets, shares_triple_design, use_walsh, walsh_tables
from .regression_adjusted import PARAMETERS_PER_PAIR, fit_odd_surrogate, ranked_triples
from .regression_adjusted import triple_count as cubic_triple_count
from .stratified import distinct_subsets, pair_capacity, size_allocation
from .surrogates import OddCubicSurrogate

#: Cross-fitting folds: more folds give each fit more of the draws; beyond 8
#: the error no longer falls (benchmarks/README.md, "Constants and their
#: measurements").
FOLDS = 8


def pair_weights(coalitions: Tensor, dtype: torch.dtype, log_scale: Tensor | None = None) -> Tensor:
    """``(M, d)`` ``2 c_i(T)``: the Shapley weight of the pair ``{T, D - T}`` on ``u(T)``.

    ``log_scale`` ``(M,)`` multiplies row ``m`` by ``exp(log_scale[m])``. The
    weights and the draws' importance ``N_s / q_s`` are combined in log space:
    at d = 1,024 the binomial ``C(d, s)`` of the middle sizes is near float64's
    largest number, so the two apart over- and underflow (inf * 0 = NaN), while
    their product is of order one.
    """
    d = coalitions.shape[1]
    size = coalitions.sum(dim=1).to(torch.float64)
    log_binomial = (
        torch.lgamma(torch.tensor(d + 1.0, dtype=torch.float64))
        - torch.lgamma(size + 1)
        - torch.lgamma(d - size + 1)
    )
    log_inside = -torch.log(size) - log_binomial
    log_outside = -torch.log(d - size) - log_binomial
    if log_scale is not None:
        scale = log_scale.to(device=size.device, dtype=torch.float64)
        log_inside, log_outside = log_inside + scale, log_outside + scale
    weights = torch.where(
        coalitions, torch.exp(log_inside)[:, None], -torch.exp(log_outside)[:, None]
    )
    return (2 * weights).to(dtype)


def iid_pairs(
    d: int, sizes: list[int], probabilities: Tensor, count: int, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """``count`` i.i.d. coalitions, one of each drawn pair, and their size pairs' index.

    A size pair ``sizes[j]`` with probability ``probabilities[j]``, then a
    uniform coalition of that size; for ``2 s = d`` the one holding feature 0
    (a uniform pair).
    """
    device = generator.device if generator is not None else torch.device("cpu")
    which = torch.multinomial(
        probabilities.to(device), count, replacement=True, generator=generator
    )
    size = torch.tensor(sizes, device=device)[which]
    rows = uniform_subsets(size, d, generator)
    half = 2 * size == d
    rows = torch.where(half[:, None] & ~rows[:, :1], ~rows, rows)
    return rows, which


def regression_mc_plan(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    folds: int = FOLDS,
    strength: Tensor | None = None,
) -> Plan:
    """Shared plan: the endpoints, the enumerated pairs, the i.i.d. pairs, then the complements.

    Args:
        num_features: ``d >= 2``.
        pairs: complementary pairs besides the endpoints (``2 + 2 pairs`` evaluations).
        folds: cross-fitting folds (at most the number of i.i.d. draws).
        strength: ``(N, d, d)`` interaction scores choosing the triples
            (SHEAR's cross-contributions, independent of the draws); None:
            the even part's pairwise fit on each fold's training pairs.
    """
    d = num_features
    enumerated: list[Tensor] = []
    open_sizes, open_mass, enumerated_mass = [], [], []
    left = pairs
    for size, count, mass in size_allocation(d, pairs):
        capacity = pair_capacity(d, size)
        if count == capacity:
            enumerated.append(distinct_subsets(d, size, capacity, generator, half=2 * size == d))
            enumerated_mass.append(torch.full((capacity,), mass / capacity, dtype=torch.float64))
            left -= capacity
        else:
            open_sizes.append(size)
            open_mass.append(mass)
    cpu = generator.device if generator is not None else torch.device("cpu")
    fixed = (
        torch.cat(enumerated).to(cpu)
        if enumerated
        else torch.zeros(0, d, dtype=torch.bool, device=cpu)
    )
    fixed_mass = (
        torch.cat(enumerated_mass) if enumerated_mass else torch.zeros(0, dtype=torch.float64)
    )
    if open_sizes and left > 0:
        share = torch.tensor([1.0 if 2 * s == d else 2.0 for s in open_sizes], dtype=torch.float64)
        probabilities = share / share.sum()
        drawn, which = iid_pairs(d, open_sizes, probabilities, left, generator)
        # the log of an exact int: no overflow at any d
        log_capacities = torch.tensor(
            [math.log(pair_capacity(d, s)) for s in open_sizes], dtype=torch.float64
        )
        log_importance = (log_capacities - torch.log(probabilities))[which.cpu()]
        # fit weight: the size pair's kernel mass spread over its expected draws
        drawn_mass = (torch.tensor(open_mass, dtype=torch.float64) / probabilities)[
            which.cpu()
        ] / left
    else:
        drawn = torch.zeros(0, d, dtype=torch.bool, device=cpu)
        log_importance = drawn_mass = torch.zeros(0, dtype=torch.float64)
    sampled = torch.cat([fixed, drawn]).to(device)
    endpoints = torch.zeros(2, d, dtype=torch.bool, device=device)
    endpoints[1] = True
    rows = torch.cat([endpoints, sampled, ~sampled])
    design = _Design(
        sampled,
        fixed.shape[0],
        torch.cat([fixed_mass, drawn_mass]).to(device),
        log_importance.to(device),
        max(1, min(folds, drawn.shape[0])),
        strength,
    )
    # i.i.d. draws may repeat (rarely: small sizes are enumerated). Without
    # deduplication a repeat is evaluated again, which keeps the rows one to one
    # with the draws (the estimate needs every draw) and the count honest.
    return Plan(DenseCoalitions(rows), design.estimate, distinct=True)


class _Design:
    """What the estimator of :func:`regression_mc_plan` needs besides the values."""

    def __init__(
        self,
        sampled: Tensor,
        enumerated: int,
        fit_weights: Tensor,
        log_importance: Tensor,
        folds: int,
        strength: Tensor | None,
    ) -> None:
        self.sampled, self.enumerated = sampled, enumerated
        self.fit_weights, self.log_importance = fit_weights, log_importance
        self.folds, self.strength = folds, strength

    def estimate(self, values: Tensor) -> Tensor:
        """``(N, d)`` from the values ``(N, 2 + 2P)``."""
        return regression_mc_shapley(
            self.sampled,
            self.enumerated,
            self.fit_weights,
            self.log_importance,
            values,
            self.folds,
            self.strength,
        )


def regression_mc_shapley(
    sampled: Tensor,
    enumerated: int,
    fit_weights: Tensor,
    log_importance: Tensor,
    values: Tensor,
    folds: int,
    strength: Tensor | None = None,
) -> Tensor:
    """The cross-fitted estimate (see the module docstring).

    Args:
        sampled: ``(P, d)`` bool, the enumerated pairs' coalitions then the draws.
        enumerated: how many of ``sampled`` are enumerated.
        fit_weights: ``(P,)`` kernel weights of the surrogate's fit.
        log_importance: ``(P - enumerated,)`` ``log(N_s / q_s)`` of each draw.
        values: ``(N, 2 + 2P)``: ``v(empty), v(D)``, then ``v`` on ``sampled``
            and on their complements.
        folds: ``K >= 1`` (with 1, the surrogate is fitted on the enumerated pairs only).
    """
    pairs, d = sampled.shape
    dtype = values.dtype
    empty, full = values[:, 0], values[:, 1]
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    odd, even = (inside - outside) / 2, (inside + outside) / 2  # (N, P)
    weights = pair_weights(sampled, dtype)  # (P, d)
    phi = ((full - empty) / d)[:, None] + odd[:, :enumerated] @ weights[:enumerated]
    draws = pairs - enumerated
    if draws == 0:
        return phi
    fold = torch.arange(draws, device=sampled.device) % folds
    # the fits' Walsh tables (plans/odd_fit.py), one per fold and one for the
    # enumerated pairs (never held out): a fit's table is their total less its fold's
    tables = every = None
    # each fold's fit gathers one (N, p, p) Gram of about d + 0.35 P parameters
    parameters = d + int(PARAMETERS_PER_PAIR * pairs)
    labels = torch.cat([torch.full((enumerated,), folds, device=sampled.device), fold])
    if use_walsh(d, folds + 1, folds, values.shape[0], pairs, parameters):
        tables = walsh_tables(sampled, fit_weights, folds + 1, dtype, labels)
    if tables is not None and shares_triple_design(d, values.shape[0], parameters):
        # likewise the targets of every column, once per part rather than per fit
        every = every_column_targets(sampled, fit_weights, odd, labels, folds + 1)
    correction = torch.zeros_like(phi)
    for k in range(folds):
        held = torch.cat(
            [torch.zeros(enumerated, dtype=torch.bool, device=sampled.device), fold == k]
        )
        surrogate = _fit_out_of_fold(
            sampled[~held],
            fit_weights[~held],
            odd[:, ~held],
            even[:, ~held],
            (full - empty) / 2,
            strength,
            None if tables is None else (tables.sum(dim=0) - tables[k])[None],
            None if every is None else every.sum(dim=0) - every[k],
        )
        # phi(g) less its endpoint and enumerated terms: g's share of the open sizes
        fitted_enumerated = surrogate.values(sampled[:enumerated])
        open_part = (
            surrogate.shapley()
            - ((full - empty) / d)[:, None]
            - fitted_enumerated @ weights[:enumerated]
        )
        residual = odd[:, held] - surrogate.values(sampled[held])
        weighted = pair_weights(sampled[held], dtype, log_importance[fold == k])
        correction += open_part + residual @ weighted / int(held.sum())
    return phi + correction / folds


def _fit_out_of_fold(
    sampled: Tensor,
    weights: Tensor,
    odd: Tensor,
    even: Tensor,
    total: Tensor,
    strength: Tensor | None,
    tables: Tensor | None = None,
    every_targets: Tensor | None = None,
) -> OddCubicSurrogate:
    """The odd cubic fitted on the pairs outside the held fold (a zero game without any).

    ``tables``: the ``(1, 2^d)`` Walsh table of these pairs' weights, and
    ``every_targets`` the targets of every column on them, or None.
    """
    batch, d = odd.shape[0], sampled.shape[1]
    no_triples = odd.new_zeros(batch, 0, 3, dtype=torch.long)
    if sampled.shape[0] == 0:
        # nothing to fit: the zero game with the endpoints' total spread evenly
        linear = (total / d)[:, None].expand(batch, d)
        return OddCubicSurrogate(linear, odd.new_zeros(batch, 0), no_triples)
    count = cubic_triple_count(d, sampled.shape[0], informed=strength is not None)
    triples = ranked_triples(sampled, weights, even, count, strength)
    return fit_odd_surrogate(sampled, weights, odd, total, triples, tables, every_targets)
