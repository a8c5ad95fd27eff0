"""The sampled coalitions of each training example and their values, for the potential fit.

Each example gets its own coalitions (independent of its neighbours'): the
empty and full coalitions and complementary pairs whose first member's size
is uniform on ``1..d-1`` and whose members are uniform given the size; when
``2^d`` coalitions fit the budget, every coalition. Uniform sizes rather than
the Shapley kernel's, which crowds the sizes next to the ends: the recursion
of ``potential.py`` links each size to the one below, and on the ReLU MLP of
benchmarks/amortized.py (3,000 examples, 6,000 steps) uniform sizes gave a
held-out error of 0.097 against 0.102.

Besides its rows, each example's FastSHAP weights (importance weights of the
Shapley kernel against this design) score the explainer's values at the
example itself (``potential_training.py``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..plans.draws import uniform, uniform_subsets
from .labels import every_output_values


class CoalitionRows(NamedTuple):
    """``M`` rows per example: their coalitions, centred values and FastSHAP weights."""

    #: ``(N, M, d)`` bool, row 0 the empty coalition and row 1 the full one
    coalitions: Tensor
    #: ``(N, M, K)`` float64: ``v(S) - v(empty)`` for every output explained
    values: Tensor
    #: ``(M,)`` or ``(N, M)`` float64: the Shapley kernel's weight over the
    #: design's probability, mean one over each example's rows (0 at the ends)
    weights: Tensor


def design(
    batch: int, d: int, evaluations: int, generator: torch.Generator | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``(N, M, d)`` coalitions (empty, full, then the pairs) and their FastSHAP weights.

    ``M = 2 + 2 * ((evaluations - 2) // 2)``, or every coalition (``2^d``) where
    they fit the budget.
    """
    if d < evaluations.bit_length():  # 2^d <= evaluations: every coalition
        ids = torch.arange(2**d, device=device)
        every = (ids[:, None] >> torch.arange(d, device=device)) & 1 == 1  # (2^d, d)
        first = torch.stack([every[0], every[-1]])
        coalitions = torch.cat([first, every[1:-1]])[None].expand(batch, -1, -1)
        sizes = coalitions[0].sum(1)
        # the kernel over the uniform design: proportional to 1 / (C(d, k) k (d - k))
        weights = torch.tensor(
            [0.0 if k in (0, d) else 1 / (math.comb(d, k) * k * (d - k)) for k in range(d + 1)],
            dtype=torch.float64,
            device=device,
        )[sizes]
        return coalitions, weights / weights[2:].mean()
    pairs = (evaluations - 2) // 2
    sizes = 1 + (uniform((batch, pairs), generator, device) * (d - 1)).long().clamp_max(d - 2)
    first = uniform_subsets(sizes.reshape(-1), d, generator).to(device).view(batch, pairs, d)
    ends = torch.zeros(batch, 2, d, dtype=torch.bool, device=device)
    ends[:, 1] = True
    coalitions = torch.cat([ends, first, ~first], dim=1)
    # the kernel's size probability over the design's (uniform): proportional to 1 / (k (d - k))
    k = coalitions.sum(2).to(torch.float64)
    weights = torch.where((k > 0) & (k < d), 1 / (k * (d - k)).clamp_min(1), 0.0)
    return coalitions, weights / weights[:, 2:].mean(dim=1, keepdim=True)


def sampled_rows(
    game: CoalitionGame, evaluations: int, generator: torch.Generator | None
) -> CoalitionRows:
    """Each example's :func:`design` and its values, at most ``evaluations`` model rows
    per example (counted in ``game.evaluations``)."""
    d, batch, device = game.num_features, game.batch_size, game.device
    coalitions, weights = design(batch, d, evaluations, generator, device)
    count = coalitions.shape[1]
    example_index = torch.arange(batch, device=device).repeat_interleave(count)
    values = every_output_values(game, example_index, coalitions.reshape(-1, d))
    values = values.reshape(batch, count, -1).to(torch.float64)
    return CoalitionRows(coalitions, values - values[:, :1], weights)
