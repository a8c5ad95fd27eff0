"""Antithetic orderings that spend the whole budget: the rows left by whole
orderings buy single features' marginal contributions.

An ordering costs ``d - 1`` rows besides the shared endpoints, so at large
``d`` whole orderings leave up to ``d`` rows of a budget unspent (``budget=600``
at ``d = 201``: two orderings, 402 rows). Those rows buy extra samples for
some features instead: for a feature ``i`` chosen uniformly and a fresh
uniform ordering, ``A`` the features before ``i``, the four rows ``A``,
``A + i``, ``D - A``, ``D - A - i`` give ``i``'s marginal contribution at its
position and, antithetically, at the mirrored one. Each such sample is an
unbiased sample of ``phi_i``, as each ordering's is, so every feature's mean
stays unbiased; the efficiency gap the extra samples open is closed over the
features that got them. ``attr/paired_kernel_shap.py``'s ``auto`` uses it
above 32 features at low budgets.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .draws import distinct_ids, uniform
from .permutations import pair_antithetic, permutation_contributions, prefix_coalitions

#: Rows per extra sample: ``A``, ``A + i`` and their complements.
ROWS_PER_EXTRA = 4


def filled_permutation_plan(
    ranks: Tensor, rows: int, generator: torch.Generator | None, device: torch.device
) -> Plan:
    """Shared plan of the antithetic orderings ``ranks`` ``(M, d)`` (``M`` even, each
    ordering followed by its reverse as :func:`~.permutations.filled_orderings`
    lays them out) and, with the rows their distinct prefixes leave of
    ``rows``, extra antithetic samples of single features.

    The estimator maps the values ``(N, R)`` to ``(N, d)``.
    """
    orderings, d = ranks.shape
    prefixes = prefix_coalitions(ranks).reshape(-1, d)  # (M (d + 1), d)
    chosen, before = extra_samples(d, d, generator, ranks.device)
    with_feature = before.clone()
    with_feature[torch.arange(d, device=ranks.device), chosen] = True
    # every candidate row in order: the prefixes, then each extra sample's four rows
    samples = torch.stack([before, with_feature, ~before, ~with_feature], dim=1)
    candidates = torch.cat([prefixes, samples.reshape(-1, d)])
    # the most extra samples whose distinct rows fit (neighbours in the fresh
    # ordering share rows, so often more than the rows left / 4): distinct rows
    # among each prefix of the candidates, from one pass of ids
    ids = distinct_ids(candidates)
    position = torch.arange(len(ids), device=ids.device)
    first = torch.full((int(ids.max()) + 1,), len(ids), device=ids.device)
    first = first.scatter_reduce(0, ids, position, "amin")
    distinct = (first[ids] == position).cumsum(0)  # distinct rows among the first k + 1
    ends = len(prefixes) - 1 + ROWS_PER_EXTRA * torch.arange(1, d + 1, device=ids.device)
    extras = int((distinct[ends] <= rows).sum())
    coalitions = candidates[: len(prefixes) + ROWS_PER_EXTRA * extras].to(device)
    chosen = chosen[:extras].to(device)
    ordered = ranks.to(device)

    def estimate(values: Tensor) -> Tensor:
        batch = values.shape[0]
        count = orderings * (d + 1)
        prefix_values = values[:, :count].reshape(batch, orderings, d + 1)
        contributions = permutation_contributions(
            prefix_values, ordered.expand(batch, orderings, d)
        )
        samples = pair_antithetic(contributions)  # (N, M / 2, d)
        phi = samples.sum(dim=1)
        if extras == 0:
            return phi / samples.shape[1]
        a, a_i, rest, rest_i = values[:, count:].reshape(batch, extras, 4).unbind(2)
        extra = ((a_i - a) + (rest - rest_i)) / 2  # (N, extras)
        taken = torch.zeros(d, dtype=values.dtype, device=values.device)
        taken[chosen] = 1.0
        phi = phi.index_add(1, chosen, extra) / (samples.shape[1] + taken)
        # every ordering pair is efficient; the extra samples open a gap, closed
        # over the features that took them
        gap = (values[:, count - 1] - values[:, 0]) - phi.sum(dim=1)
        return phi + gap[:, None] * taken / taken.sum()

    return Plan(DenseCoalitions(coalitions), estimate)


def extra_samples(
    num_features: int, count: int, generator: torch.Generator | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``count`` distinct features ``(count,)`` chosen uniformly, and for each the
    features before it in one fresh uniform ordering ``(count, d)``."""
    d = num_features
    keys = uniform((2, d), generator, device)
    chosen = keys[0].argsort()[:count]
    position = keys[1].argsort().argsort()  # the fresh ordering's ranks
    before = position[None, :] < position[chosen][:, None]
    return chosen, before
