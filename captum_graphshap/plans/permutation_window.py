"""The rest of a permutation sampler's budget: contributions in a random window of one ordering.

Whole orderings cost ``d - 1`` rows each, so a budget between two counts
leaves up to ``d - 2`` rows unspent (``d = 100`` at ``budget=151``: one
ordering, 101 rows). Those rows buy the marginal contributions of one more
ordering ``pi`` at the ``t`` positions of a *cyclic* window
``W = {s, ..., s + t - 1} mod d``, ``s`` uniform: the prefixes of sizes
``s .. s + t`` (wrapping through the empty and full coalitions, which are
known), at most ``t + 1`` rows. With antithetic pairs the window is read in
``pi`` and in its reverse too, at the mirrored positions (a cyclic window
again, over the same features), and the two contributions are averaged,
like the whole pairs'. Every position lies in the window with probability
``t / d`` whatever ``pi``, so, with ``phi_bar`` the whole orderings' mean
over ``K`` samples (orderings, or pairs) and ``Delta`` the window's,

    phi_i = phi_bar_i + 1(i in W) (Delta_i - phi_bar_i) / (K + t / d)

is unbiased (the window is drawn independently of the whole orderings),
equals ``phi_bar`` on additive models, and weighs the window as ``t / d``
of a sample. A mean-zero shift ``(gap - sum phi) / d`` keeps it efficient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .draws import random_indices, uniform

__all__ = ["WindowDraw", "draw_window", "window_estimate"]


class WindowDraw:
    """An ordering's ranks ``(d,)`` and a cyclic window of its positions (and its reverse's)."""

    def __init__(self, ranks: Tensor, start: int, length: int, paired: bool) -> None:
        d = ranks.shape[0]
        self.ranks, self.start, self.length, self.paired = ranks, start, length, paired
        positions = (start + torch.arange(length, device=ranks.device)) % d
        # position p's contribution reads the prefixes of sizes p and p + 1
        sizes = torch.unique(torch.cat([positions, positions + 1]))
        self.sizes = sizes[(sizes > 0) & (sizes < d)]  # the empty and full are known

    @property
    def orderings(self) -> Tensor:
        """``(1 or 2, d)`` ranks: the ordering, and its reverse when paired."""
        d = self.ranks.shape[0]
        return torch.stack([self.ranks, d - 1 - self.ranks]) if self.paired else self.ranks[None]

    def coalitions(self) -> Tensor:
        """``(rows, d)`` bool: the window's prefixes in each ordering (the reverse's mirrored)."""
        d = self.ranks.shape[0]
        prefixes = [self.ranks[None, :] < self.sizes[:, None]]
        if self.paired:  # the reverse's position d - 1 - p reads sizes d - 1 - p and d - p
            prefixes.append((d - 1 - self.ranks)[None, :] < (d - self.sizes)[:, None])
        return torch.cat(prefixes)

    def inside(self) -> Tensor:
        """``(d,)`` bool: the features whose position lies in the window."""
        d = self.ranks.shape[0]
        return (self.ranks - self.start) % d < self.length


def draw_window(
    d: int, rows: int, paired: bool, generator: torch.Generator | None, device: torch.device
) -> WindowDraw | None:
    """A uniform ordering and cyclic window that fit ``rows`` (None: too few rows).

    ``t`` positions cost at most ``t + 1`` rows, twice that when paired.
    """
    length = min((rows // 2 if paired else rows) - 1, d - 1)
    if length < 1 or d < 3:
        return None
    ranks = uniform((d,), generator, device).argsort().argsort()
    start = int(random_indices(d, (1,), generator, device)[0])
    return WindowDraw(ranks, start, length, paired)


def window_estimate(
    whole_mean: Tensor, samples: int, window: WindowDraw, values: Tensor, ends: Tensor
) -> Tensor:
    """``(N, d)`` attributions from the whole orderings' mean over ``samples`` and the window.

    ``values`` ``(N, rows)`` are those of ``window.coalitions()``, ``ends``
    ``(N, 2)`` the empty and full coalitions' values.
    """
    batch, d = whole_mean.shape
    per = window.sizes.shape[0]
    delta = whole_mean.new_zeros(batch, d)
    for index, ranks in enumerate(window.orderings):
        by_size = whole_mean.new_zeros(batch, d + 1)
        by_size[:, 0], by_size[:, d] = ends[:, 0], ends[:, 1]
        sizes = window.sizes if index == 0 else d - window.sizes
        by_size[:, sizes] = values[:, index * per : (index + 1) * per].to(by_size.dtype)
        delta += by_size[:, ranks + 1] - by_size[:, ranks]
    delta /= window.orderings.shape[0]
    inside = window.inside().to(whole_mean.dtype)
    estimate = whole_mean + inside * (delta - whole_mean) / (samples + window.length / d)
    gap = (ends[:, 1] - ends[:, 0]).to(estimate.dtype)
    return estimate + (gap - estimate.sum(dim=1))[:, None] / d
