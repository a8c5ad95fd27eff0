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
from collections.abc import Sequence
from statistics import median

import numpy as np
from torch import Tensor

from ..engine.features import FeatureMasks
from ..graphs.edges import region_edges
from .walsh_local import LOCAL_MIN_FEATURES, LOCAL_WIDTH, Windows

#: The most features a window keeps: ``C(9, 3) + C(9, 5) = 210`` local parities
#: each, a 3 x 3 block of patches.
MAX_WINDOW = 9


def feature_windows(features: FeatureMasks | None) -> Windows | None:
    """The windows of a call's features (:func:`mask_windows`); None (the ids' order)
    without masks, where they differ per example, or below
    :data:`~captum_graphshap.plans.walsh_local.LOCAL_MIN_FEATURES` features."""
    if features is None or features.num_features < LOCAL_MIN_FEATURES:
        return None
    layout = shared_layout(features)
    return None if layout is None else mask_windows(layout, features.num_features)


def shared_layout(features: FeatureMasks) -> tuple[Tensor, ...] | None:
    """The layout the batch's windows are read from: the geometry where it is one
    ``(1, *S)`` layout (it marks dropped features' elements -1), else shared masks;
    None where the masks differ per example without one."""
    geometry = features.geometry
    if geometry is not None and all(g.shape[0] == 1 for g in geometry):
        return geometry
    return None if features.per_example else features.masks


def kept_windows(features: FeatureMasks, kept: Tensor) -> list[Windows | None]:
    """:func:`feature_windows` of ``features.renumbered(ids)`` for the ids of each row of
    ``kept`` ``(G, d)`` bool, from one count of touching elements: those of two kept
    features are the same with the others' elements dropped. ``features``: shared."""
    d = features.num_features
    layout = shared_layout(features)
    if layout is None:
        raise ValueError("kept_windows reads shared masks")
    if int(kept.sum(dim=1).max()) < LOCAL_MIN_FEATURES:  # no windows: no contacts to count
        return [None] * len(kept)
    table = _contacts(layout, d)
    out: list[Windows | None] = []
    for row in kept.cpu().numpy():
        ids = np.flatnonzero(row)
        small = ids.size < LOCAL_MIN_FEATURES
        out.append(None if small else _windows(tuple(map(tuple, table[np.ix_(ids, ids)].tolist()))))
    return out


def mask_windows(masks: Sequence[Tensor], num_features: int) -> Windows:
    """The windows of ``num_features`` features from masks ``(1, *S)`` shared by the
    batch (ids ``0..num_features - 1``, -1 for elements of no feature; features in
    different masks never touch).

    The touching elements are counted on the host (one copy of each mask), as the
    graph methods' regions are (:func:`~captum_graphshap.graphs.edges.region_edges`).
    """
    table = _contacts(masks, num_features)
    return _windows(tuple(map(tuple, table.tolist())))


def _contacts(masks: Sequence[Tensor], d: int) -> np.ndarray:
    """``(d, d)`` symmetric: touching element pairs of each pair of features."""
    contacts = np.zeros(d * d, dtype=np.int64)
    for mask in masks:
        pairs = region_edges(mask[0].long().cpu().numpy(), diagonals=True)
        pairs = pairs[(pairs >= 0).all(axis=1)]  # -1: a dropped feature's elements
        low, high = pairs.min(axis=1), pairs.max(axis=1)
        contacts += np.bincount(low * d + high, minlength=d * d)
    table = contacts.reshape(d, d)
    return table + table.T


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
