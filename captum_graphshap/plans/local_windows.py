"""Which features are neighbours: the windows of the process's local parities, from the
feature mask's geometry.

What: one window per feature, the features around it (itself included) in the
graph of features whose elements touch in the feature mask, diagonals
included: on a line of segments or tokens the two on either side, on a 2-d
raster of patches the 3 x 3 block around a patch, on superpixels the ones
bordering it. ``plans/walsh_local.py`` puts its extra prior variance on the odd
parities within these windows.

Why: the neighbourhoods read off the order of the feature ids are right for a
1-d signal and only horizontal for a 2-d raster. On a 7 x 7 patch CNN at 2,048
evaluations the default's error fell from 0.0145 to 0.0066 with 3 x 3 windows
(``Shear``: 0.0072), and on 52 superpixels from 0.034 to 0.030
(``benchmarks/WIDE.md``). The mask is what a Captum user passes already, so
the gain needs no option.

The radius of the windows (hops in that graph) is the smallest whose windows
hold at least :data:`~captum_graphshap.plans.walsh_local.LOCAL_WIDTH` features
(median over features): two on a line, so a 1-d mask gives exactly the ids'
windows, one on a raster with diagonals. A window above
:data:`MAX_WINDOW` features keeps the nearest (fewest hops, then most touching
elements): the local parities of order five grow as its fifth power.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from statistics import median

import torch
from torch import Tensor

from ..engine.features import FeatureMasks
from .walsh_local import LOCAL_WIDTH, Windows, line_windows, local_enabled

#: The most features a window keeps: ``C(9, 3) + C(9, 5) = 210`` local parities
#: each, a 3 x 3 block of patches.
MAX_WINDOW = 9


def feature_windows(features: FeatureMasks) -> Windows | None:
    """The windows of a call's features (:func:`mask_windows`); None (the ids' order)
    where the masks differ per example or there are too few features for local
    parities."""
    if features.per_example or not local_enabled(line_windows(features.num_features)):
        return None
    return mask_windows(features.masks, features.num_features)


def mask_windows(masks: Sequence[Tensor], num_features: int) -> Windows:
    """The windows of ``num_features`` features from masks ``(1, *S)`` shared by the
    batch (ids ``0..num_features - 1``; features in different masks never touch).

    One host read: the ``d x d`` counts of touching elements.
    """
    d = num_features
    contacts = torch.zeros(d * d, dtype=torch.int64, device=masks[0].device)
    for mask in masks:
        ids = mask[0].long()
        for offset in _half_offsets(ids.dim()):
            first, second = _shifted(ids, offset)
            differ = first != second
            low = torch.minimum(first, second)[differ]
            high = torch.maximum(first, second)[differ]
            contacts += torch.bincount(low * d + high, minlength=d * d)
    table = contacts.view(d, d).cpu()
    return _windows(tuple(map(tuple, (table + table.T).tolist())))


def _half_offsets(rank: int) -> list[tuple[int, ...]]:
    """The offsets in ``{-1, 0, 1}^rank`` whose first nonzero entry is positive (each
    touching pair of elements once)."""
    every = itertools.product((-1, 0, 1), repeat=rank)
    return [o for o in every if any(o) and next(x for x in o if x) > 0]


def _shifted(ids: Tensor, offset: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """``ids`` at each element and at the element ``offset`` away, where both exist."""
    first, second = [], []
    for size, step in zip(ids.shape, offset):
        first.append(slice(max(0, -step), size - max(0, step)))
        second.append(slice(max(0, step), size - max(0, -step)))
    return ids[tuple(first)], ids[tuple(second)]


@functools.lru_cache(maxsize=64)
def _windows(contacts: tuple[tuple[int, ...], ...]) -> Windows:
    """Balls of the smallest radius of median size :data:`LOCAL_WIDTH` or more in the
    graph of ``contacts`` (touching element pairs per pair of features), each cut to
    its :data:`MAX_WINDOW` nearest; cached."""
    d = len(contacts)
    neighbours = [[g for g in range(d) if row[g]] for row in contacts]
    hops = [_hop_distances(neighbours, source) for source in range(d)]
    radius = 1
    while radius < d and median(_ball_sizes(hops, radius)) < LOCAL_WIDTH:
        radius += 1
    windows = []
    for centre, distance in enumerate(hops):
        ball = [g for g in range(d) if distance[g] <= radius]
        ball.sort(key=lambda g: (distance[g], -contacts[centre][g], abs(g - centre), g))
        windows.append(tuple(sorted(ball[:MAX_WINDOW])))
    return tuple(windows)


def _ball_sizes(hops: list[list[float]], radius: int) -> list[int]:
    return [sum(1 for h in distance if h <= radius) for distance in hops]


def _hop_distances(neighbours: list[list[int]], source: int) -> list[float]:
    """Hops from ``source`` to every feature (``inf``: not connected)."""
    distance = [float("inf")] * len(neighbours)
    distance[source] = 0
    frontier = [source]
    while frontier:
        reached = []
        for node in frontier:
            for other in neighbours[node]:
                if distance[other] == float("inf"):
                    distance[other] = distance[node] + 1
                    reached.append(other)
        frontier = reached
    return distance
