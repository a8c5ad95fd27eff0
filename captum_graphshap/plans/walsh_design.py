"""Designs of the Walsh-basis process: stratified complementary pairs that identify
the linear parities, nested across budgets.

The pairs are size-stratified without repetition
(:func:`~captum_graphshap.plans.stratified.stratified_paired_coalitions`).
Two properties matter to the fit in ``plans/walsh_gp.py``: the pairs and the
full coalition must separate every feature (rank ``d``), or the linear
parities are not identified; and a larger budget's design extends a smaller
one's, so more evaluations observe everything fewer did.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .stratified import (
    distinct_subsets,
    pair_capacity,
    size_allocation,
    stratified_paired_coalitions,
)

#: Below this many pairs per feature the pairs' sizes are drawn with shares
#: falling as ``1 / s`` (``size_allocation(small_first=True)``) instead of
#: evenly (benchmarks/README.md, "Walsh-basis process: constants").
SMALL_SIZES_BELOW = 3
#: Draws of a design before one that leaves the linear parities unidentified is
#: kept (the fit's pseudo-inverse then takes the minimum-norm split).
DESIGN_DRAWS = 32
#: A design whose linear parities' columns (with the full coalition) have a
#: condition number above this identifies them only nominally: the fits' normal
#: equations square it, so rounding alone reached 1.2e-7 of a quadratic model's
#: values (the cubic fit at d = 81 and its fewest pairs, 2 d evaluations), and the
#: noise of other games is amplified alike. Redrawn as an unidentified one is: at
#: d = 80 and d - 1 pairs 8% of draws, median condition 1,400.
MAX_DESIGN_CONDITION = 1e4
#: Designs of more pairs than this extend the design of this many drawn with
#: the same generator (:func:`extended_design`), so a larger budget observes
#: everything a smaller one did.
NESTED_PAIRS = 512


def fewest_pairs(num_features: int) -> int:
    """The fewest pairs the fit takes: ``d`` (the linear parities are fitted), or
    every pair there is when there are fewer (``d <= 2``)."""
    return min(num_features, 2 ** (num_features - 1) - 1)


def drawn_pairs(num_features: int, pairs: int) -> int:
    """The pairs :func:`walsh_gp_design` draws for ``pairs``: every pair there is,
    when ``pairs`` covers them."""
    return min(pairs, 2 ** (num_features - 1) - 1) if num_features <= 62 else pairs


def draw_design(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    *,
    fit_pairs: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``pairs`` stratified pairs ``(P, d)`` on the host, their weights ``(P,)`` and the
    pairs the process is factorised on (``(F,)``, None for all).

    Below :data:`SMALL_SIZES_BELOW` ``d`` pairs the small sizes get more of
    them. A design whose coalitions (with the full one) leave the linear
    parities unidentified (rank below ``d``: at ``d`` pairs, e.g. ``x_0 + x_3 =
    x_8 + x_9`` in every row) is redrawn, up to :data:`DESIGN_DRAWS` times:
    there the fit could only guess the unseen direction. Drawn on the host, so
    the check costs no device synchronisation. Designs are nested: beyond
    :data:`NESTED_PAIRS` and ``fit_pairs`` pairs the smaller designs are
    drawn first and extended (:func:`extended_design`), the ``fit_pairs``
    design being the pairs factorised.
    """
    d = num_features
    cpu = torch.device("cpu")
    stages = sorted({p for p in (NESTED_PAIRS, fit_pairs) if p is not None and p < pairs})
    drawn = stages[0] if stages else pairs
    small_first = drawn < SMALL_SIZES_BELOW * d
    sampled, weights = identified_pairs(d, drawn, generator, cpu, small_first=small_first)
    fitted = None
    for stage in [*stages[1:], pairs] if stages else []:
        if len(sampled) < drawn:  # every pair there is
            break
        if drawn == fit_pairs:
            fitted = torch.arange(len(sampled))
        sampled, weights = extended_design(sampled, stage, generator)
        drawn = stage
    return sampled, weights, fitted


def identified_pairs(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    small_first: bool = False,
    check_below: int | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`~captum_graphshap.plans.stratified.stratified_paired_coalitions`, drawn again
    (up to :data:`DESIGN_DRAWS` times) while the pairs leave the linear parities
    unidentified with the full coalition (:func:`identifies_linear_parities`).

    With ``check_below``, designs of that many pairs or more are kept unchecked (the
    check is the singular values of ``(P + 1) x d``); fewer than ``d - 1`` pairs cannot
    identify them and are kept as drawn.
    """
    d = num_features
    for _ in range(DESIGN_DRAWS):
        sampled, weights = stratified_paired_coalitions(
            d, pairs, generator, device, small_first=small_first
        )
        count = sampled.shape[0]
        unchecked = count < d - 1 or (check_below is not None and count >= check_below)
        if unchecked or identifies_linear_parities(sampled):
            break
    return sampled, weights


def extended_design(
    first: Tensor, pairs: int, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """The pairs ``first`` ``(F, d)`` (on the host), then as many more of each size as a
    design of ``pairs`` pairs draws of it (none twice), and the whole design's weights.

    So one generator's designs are nested: a larger budget's fitted pairs are
    exactly the smaller budget's design, and the adjustment
    (:func:`adjusted_posterior`) only adds to it.
    """
    d = first.shape[1]
    sizes = first.sum(dim=1)
    sizes = torch.minimum(sizes, d - sizes)
    rows, weights = [first], torch.zeros(len(first), dtype=torch.float64)
    extra_weights = []
    for size, count, mass in size_allocation(d, pairs):
        have = first[sizes == size]
        need = max(0, count - len(have))
        if need:
            rows.append(_more_subsets(have, size, need, generator))
        total = len(have) + len(rows[-1]) if need else len(have)
        if total:
            weights[sizes == size] = mass / total
            if need:
                extra_weights.append(
                    torch.full((len(rows[-1]),), mass / total, dtype=torch.float64)
                )
    return torch.cat(rows), torch.cat([weights, *extra_weights])


def _more_subsets(have: Tensor, size: int, need: int, generator: torch.Generator | None) -> Tensor:
    """Up to ``need`` distinct uniform coalitions of ``size`` members (one of each pair)
    not among ``have``: a fresh distinct draw of ``len(have) + need`` (doubling, up to
    every coalition there is) with ``have`` removed."""
    d = have.shape[1]
    bits = 1 << torch.arange(d)
    taken = (have.long() * bits).sum(dim=1)
    count = min(len(have) + need, pair_capacity(d, size))
    while True:
        drawn = distinct_subsets(d, size, count, generator, half=2 * size == d)
        fresh = drawn[~torch.isin((drawn.long() * bits).sum(dim=1), taken)]
        if len(fresh) >= need or count >= pair_capacity(d, size):
            return fresh[:need]
        count = min(2 * count, pair_capacity(d, size))


def identifies_linear_parities(sampled: Tensor) -> bool:
    """Whether the pairs ``(P, d)`` and the full coalition, in +-1, have rank ``d``, with a
    condition number of at most :data:`MAX_DESIGN_CONDITION`."""
    d = sampled.shape[1]
    if sampled.shape[0] + 1 < d:
        return False
    full_row = torch.ones(1, d, dtype=torch.bool, device=sampled.device)
    signs = torch.cat([sampled, full_row]).to(torch.float64) * 2 - 1
    singular = torch.linalg.svdvals(signs)
    return bool(singular[-1] * MAX_DESIGN_CONDITION > singular[0])
