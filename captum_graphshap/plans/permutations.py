"""Permutation sampling: marginal contributions along random orderings.

Orderings drawn with a ``torch.Generator``, optionally antithetic (each
ordering with its reverse), shared by the batch as Captum's
``ShapleyValueSampling`` shares them; the plan is every prefix of every
ordering and the estimator the mean marginal contribution. For a budget of
distinct evaluations, :func:`filled_orderings` draws orderings until their
distinct prefixes fill it, keeping each ordering uniform. Pure tensor maths;
``attr/shapley_sampling.py`` adapts it to Captum.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine.plan import Plan, PrefixCoalitions
from .draws import distinct_ids, random_indices, uniform

# ``budget=`` counts distinct evaluations, and orderings share prefixes: at
# d = 14 and 1,024 evaluations 78 antithetic orderings are about 830 distinct
# prefixes. :func:`filled_orderings` keeps drawing until the distinct prefixes
# fill the budget; the count, and which of a few pools is kept, are chosen from
# which prefixes coincide only, which keeps each ordering uniform.

#: :func:`filled_orderings` draws at most this many times the orderings the
#: worst case (no shared prefix) would fit.
FILL_ORDERINGS_FACTOR = 16
#: The pools of orderings :func:`filled_orderings` draws, in stages
#: ``(pools, share)``: a stage is drawn only while the best pool so far fills
#: less than ``share`` of the rows that can be filled (one pool; 7 more below
#: 99%; 56 more below 95%). From 4,096 rows on the first nearly always does.
FILL_STAGES = ((1, 1.0), (7, 0.99), (56, 0.95))
#: A stage draws at most this many prefix rows to begin with (fewer pools when
#: ``d`` is large), which bounds the arithmetic of the later stages.
FILL_WORK = 2**17


def permutation_ranks(
    batch: int,
    num_features: int,
    num_permutations: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
) -> Tensor:
    """``(N, M, d)`` long: ``ranks[n, m, i]`` is the position of feature ``i`` in ordering ``m``.

    The orderings are drawn once and shared by the batch, as Captum's
    ``ShapleyValueSampling`` does: an example's explanation does not depend
    on the other examples or their order (the same seed gives it alone the
    row it gets in any batch), and each example's interval still holds, its
    samples being independent orderings. With ``antithetic`` the first
    ``M // 2`` orderings are followed by their reverses, so each feature's
    early and late positions pair up; an odd ``M`` adds one independent
    ordering last (the mean over all ``M`` stays unbiased).
    """
    pairs = num_permutations // 2 if antithetic else 0
    drawn = num_permutations - pairs
    scores = uniform((1, drawn, num_features), generator, device).expand(batch, -1, -1)
    ranks = scores.argsort(dim=2).argsort(dim=2)
    if antithetic:
        ranks = torch.cat(
            [ranks[:, :pairs], num_features - 1 - ranks[:, :pairs], ranks[:, pairs:]], 1
        )
    return ranks


def permutation_plan(ranks: Tensor, antithetic: bool) -> Plan:
    """The plan of permutation sampling: every prefix of every example's orderings.

    ``ranks`` is ``(N, M, d)`` (:func:`permutation_ranks`); rows are
    per example, stored as the ranks (:class:`PrefixCoalitions`), and the
    estimator is the mean marginal contribution, ``(M,)`` values of rows
    ``(n, m, size)`` in that order to ``(N, d)``.
    """
    batch, orderings, d = ranks.shape
    example_index = torch.arange(batch, device=ranks.device).repeat_interleave(orderings * (d + 1))

    def estimate(values: Tensor) -> Tensor:
        if antithetic and orderings % 2 == 0:
            return permutation_samples(values, ranks, antithetic).mean(dim=1)
        return permutation_samples(values, ranks, False).mean(dim=1)

    return Plan(PrefixCoalitions(ranks), estimate, example_index)


def shared_permutation_plan(ranks: Tensor, antithetic: bool) -> Plan:
    """Permutation sampling as a plan shared by the batch: orderings ``ranks`` ``(M, d)``.

    The same estimator as :func:`permutation_plan` for orderings shared by
    every example; the rows are one set for the batch, so the engine's shared
    path evaluates each distinct prefix once for all examples.
    """
    orderings, d = ranks.shape

    def estimate(values: Tensor) -> Tensor:
        batch = values.shape[0]
        expanded = ranks.to(values.device).expand(batch, orderings, d)
        paired = antithetic and orderings % 2 == 0
        return permutation_samples(values.reshape(-1), expanded, paired).mean(dim=1)

    return Plan(PrefixCoalitions(ranks), estimate)


def permutation_samples(values: Tensor, ranks: Tensor, antithetic: bool) -> Tensor:
    """The independent samples ``(N, K, d)`` of a permutation plan's ``(R,)`` values.

    ``K`` is the number of orderings, or of antithetic pairs (``M`` even).
    """
    contributions = permutation_contributions(values.view(*ranks.shape[:2], -1), ranks)
    return pair_antithetic(contributions) if antithetic else contributions


def prefix_coalitions(ranks: Tensor) -> Tensor:
    """``(..., d + 1, d)`` bool coalitions of every ordering's prefixes.

    Entry ``[..., k, :]`` holds the first ``k`` features of the ordering
    ``ranks[...]``.
    """
    d = ranks.shape[-1]
    sizes = torch.arange(d + 1, device=ranks.device)
    return ranks.unsqueeze(-2) < sizes[:, None]


def permutation_contributions(values: Tensor, ranks: Tensor) -> Tensor:
    """Marginal contributions ``(N, M, d)`` from prefix values ``(N, M, d + 1)``.

    Feature ``i`` at position ``r`` of ordering ``m`` contributes
    ``v(first r + 1) - v(first r)``.
    """
    return values.gather(2, ranks + 1) - values.gather(2, ranks)


def pair_antithetic(contributions: Tensor) -> Tensor:
    """Average each ordering's contributions with its reverse's: ``(N, M/2, d)``.

    The pairs, not the orderings, are the independent samples an interval
    is computed from.
    """
    half = contributions.shape[1] // 2
    return (contributions[:, :half] + contributions[:, half:]) / 2


def filled_orderings(
    num_features: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    minimum: int = 1,
    even: bool = False,
) -> Tensor:
    """``(M, d)`` shared orderings whose distinct prefixes (endpoints included) fit ``rows``.

    Orderings are drawn as :func:`permutation_ranks` draws them (with
    ``antithetic``, each followed by its reverse) and taken while their
    distinct prefixes number at most ``rows``: orderings share the empty and
    full coalitions, and many share their first or last few members, so the
    count is usually well above ``(rows - 2) // (d - 1)``. The largest count
    that fits is taken (even with ``even``; at least ``minimum``, and at
    most :data:`FILL_ORDERINGS_FACTOR` times the worst case's), in the best
    filling of up to 64 pools (:data:`FILL_STAGES`,
    :func:`filled_orderings_and_references`). Returned in
    :func:`permutation_ranks`' layout: the first ``M // 2`` orderings, their
    reverses, then (``M`` odd) one more.

    The count depends on the orderings only through which prefixes coincide,
    which relabelling the features (the same relabelling in every ordering)
    leaves as it is; so, given the count, each ordering is still uniform and
    the mean marginal contribution stays unbiased.
    """
    ranks, _ = filled_orderings_and_references(
        num_features, rows, antithetic, generator, device, minimum=minimum, even=even
    )
    return ranks


def filled_orderings_and_references(
    num_features: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    minimum: int = 1,
    even: bool = False,
    references: int = 0,
) -> tuple[Tensor, Tensor | None]:
    """:func:`filled_orderings`, each ordering with a reference out of ``references`` (if any).

    With ``references`` each ordering draws one uniformly (an antithetic pair
    shares it) and a row is a prefix with its reference, so orderings
    share rows only where they share the reference too; the worst case is
    ``d + 1`` rows an ordering. Relabelling the references, like the
    features, leaves the coincidences as they are, so given the count each
    ordering and its reference are still uniform. Returns ``(M, d)`` ranks
    and ``(M,)`` reference ids (None without ``references``).

    Whole orderings fill ``rows`` only as finely as an ordering's cost
    (up to ``d - 1`` rows): at d = 13 and 52 rows four orderings fill 50 rows
    if none of their prefixes coincide and 49 or fewer if some do, which
    one pool did in 30% (antithetic) to 76% (independent) of seeds. So
    several independent pools are drawn, in the stages of
    :data:`FILL_STAGES` (up to 64 pools, more only while the best so far
    misses 99%, then 95%, of the rows), and the pool whose largest fitting
    count evaluates the most rows is kept (ties to the first drawn). Where
    the first pool suffices the draws are those of a single pool, as before.

    Why that keeps the estimate unbiased: whether a stage is drawn and which
    pool is kept depend on the pools only through which of their rows
    coincide. Relabelling the features of one pool (the same relabelling in
    each of its orderings; with references, relabelling its references too)
    leaves its coincidences, hence the choice, as they are, and leaves the
    law of the pools as it is, the orderings being i.i.d. uniform. So the
    kept pool's law is invariant under relabelling, each of its orderings
    is uniform given the coincidences, and the mean marginal contribution
    is unbiased for any count so chosen. The kept orderings are not
    independent of each other (a pool with fewer, or more, shared prefixes
    is favoured); the estimate's mean is unaffected, and an interval that
    treats them as independent is approximate, as it already was with the
    count chosen from the coincidences.

    Some budgets whole orderings cannot fill to 95%, and no pool is faked to
    reach it: with ``even`` the unit is an antithetic pair of ``2 (d - 1)``
    rows, so at d = 14 and 112 rows four pairs fill 106 (0.946) and five
    need 20 shared prefixes; and independent orderings at d = 16 and 128
    rows need eight with no shared prefix (122 rows) or nine sharing nine,
    which the best of 64 pools misses in about 7% of seeds (0.945).
    """
    from .limits import MAX_COALITIONS

    d = num_features
    if references:
        worst = max(minimum, rows // (d + 1))
    else:
        worst = max(minimum, (rows - min(2, d + 1)) // max(1, d - 1))
    most = max(minimum, min(FILL_ORDERINGS_FACTOR * max(worst, 1), MAX_COALITIONS // (d + 1)))
    # every row there is: a pool that evaluates them all cannot be bettered
    available = min(rows, 2**d * max(1, references)) if d <= 62 else rows
    start = min(most, worst + worst // 4 + 4)

    def draw(pools: int) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        return candidate_pools(
            pools, d, rows, antithetic, generator, device,
            start=start, most=most, minimum=minimum, even=even, references=references,
        )  # fmt: skip

    # ``rows - filled`` below 0: a pool forced past ``rows`` by ``minimum`` ranks
    # below every pool that fits, the least overshoot first
    drawn: list[tuple[Tensor, Tensor | None, Tensor, Tensor]] = []
    scores = torch.zeros(0, dtype=torch.long, device=device)
    for size, share in FILL_STAGES:
        if drawn and int(scores.max()) >= share * available:
            break
        drawn.append(draw(min(size, max(1, FILL_WORK // (start * (d + 1))))))
        filled = drawn[-1][2]
        scores = torch.cat([scores, torch.where(filled <= rows, filled, rows - filled)])
    best = int(torch.argmax(scores))  # the first of the best: argmax returns the first
    stage = 0
    while best >= drawn[stage][3].shape[0]:  # the stage that drew it
        best -= drawn[stage][3].shape[0]
        stage += 1
    streams, labels, _, counts = drawn[stage]
    count = int(counts[best])
    chosen = streams[best, :count]
    chosen_labels = labels[best, :count] if labels is not None else None
    if not antithetic:
        return chosen, chosen_labels
    pairs = count // 2

    def layout(x: Tensor) -> Tensor:  # permutation_ranks': the firsts, their reverses, the odd one
        return torch.cat([x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2], x[2 * pairs :]])

    return layout(chosen), None if chosen_labels is None else layout(chosen_labels)


def candidate_pools(
    pools: int,
    d: int,
    rows: int,
    antithetic: bool,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    start: int,
    most: int,
    minimum: int,
    even: bool,
    references: int,
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """``pools`` independent streams of orderings, each cut where its prefixes fit ``rows``.

    The pools of :func:`filled_orderings_and_references`, drawn together.
    Each stream is drawn as :func:`permutation_ranks` draws (with
    ``antithetic`` the stream ``f1, r1, f2, r2, ...``), ``start`` orderings
    first, doubled until every pool's distinct rows overflow ``rows`` (or
    ``most`` orderings, or every row there is). Returns the streams
    ``(K, L, d)``, their reference ids ``(K, L)`` (or None), the distinct
    rows of the count kept ``(K,)``, and that count ``(K,)``: the largest
    that fits (even with ``even``), at least ``minimum``.
    """
    pool = start
    forward = torch.zeros(pools, 0, d, dtype=torch.long, device=device)
    drawn_references = torch.zeros(pools, 0, dtype=torch.long, device=device)
    candidate = torch.arange(pools, device=device)
    while True:  # the pools' streams, doubled until their prefixes overflow ``rows``
        wanted = (pool + 1) // 2 if antithetic else pool
        extra = wanted - forward.shape[1]
        more = permutation_ranks(1, d, pools * extra, False, generator, device)[0]
        forward = torch.cat([forward, more.view(pools, extra, d)], dim=1)
        if references:
            picks = random_indices(references, (pools, extra), generator, device)
            drawn_references = torch.cat([drawn_references, picks], dim=1)
        if antithetic:  # the stream f1, r1, f2, r2, ...: a prefix is pairs and maybe one more
            stream = torch.stack([forward, d - 1 - forward], dim=2).reshape(pools, -1, d)
            stream = stream[:, :pool]
            labels = drawn_references.repeat_interleave(2, dim=1)[:, :pool]
        else:
            stream, labels = forward, drawn_references
        inverse = distinct_ids(PrefixCoalitions(stream))  # over every pool: made per pool below
        if references:  # a row is a prefix and its reference
            inverse = inverse * references + labels.repeat_interleave(d + 1, dim=1).reshape(-1)
        keys = inverse.view(pools, -1) * pools + candidate[:, None]
        inverse = torch.unique(keys.reshape(-1), return_inverse=True)[1]
        position = torch.arange(inverse.shape[0], device=inverse.device)
        first = torch.full((int(inverse.max()) + 1,), inverse.shape[0], device=inverse.device)
        first = first.scatter_reduce(0, inverse, position, "amin")
        new = (first[inverse] == position).view(pools, pool, d + 1).sum(dim=2)
        distinct = new.cumsum(1)  # (K, L): distinct rows of each pool's first m + 1 orderings
        last = distinct[:, -1]
        # every row there is already: more orderings would cost arithmetic, no spend
        covered = d <= 62 and bool((last >= 2**d * max(1, references)).all())
        if bool((last > rows).all()) or pool >= most or covered:
            break
        pool = min(most, 2 * pool)
    counts = torch.arange(1, pool + 1, device=distinct.device)
    fits = (distinct <= rows) & (counts >= minimum)
    if even:
        fits &= counts % 2 == 0
    kept = torch.where(fits, counts, 0).max(dim=1).values
    kept = torch.where(kept > 0, kept, minimum).clamp(max=pool)
    filled = distinct.gather(1, (kept - 1)[:, None])[:, 0]
    return stream, labels if references else None, filled, kept
