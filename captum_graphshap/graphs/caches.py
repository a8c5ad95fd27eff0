"""The caches of the feature graphs: bounded per graph, CPU only, clearable at once.

Every :class:`~captum_graphshap.graphs.FeatureGraph` keeps what it derived
(distances, neighbourhoods, connected sets, ...) in its own
:class:`GraphCache`, so the cache lives and dies with the graph. Each cache
holds at most :data:`MAX_CACHE_ENTRIES` results, dropping the least recently
used first, and only CPU tensors and numpy arrays: no device tensor is ever
kept. :func:`clear_caches` empties all of them.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from .distances import has_scipy

__all__ = ["MAX_CACHE_ENTRIES", "GraphCache", "clear_caches"]

#: Results kept per graph (least recently used dropped first): enough for
#: every node's neighbourhood at a few radii on graphs of a thousand nodes.
MAX_CACHE_ENTRIES = 4096

#: The caches holding results; weak, so a graph's cache goes with the graph.
_LIVE: weakref.WeakSet[GraphCache] = weakref.WeakSet()


class GraphCache:
    """A bounded least-recently-used map from result keys to a graph's results.

    Args:
        max_entries:
            Results kept; the least recently used goes first beyond it.
    """

    def __init__(self, max_entries: int = MAX_CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        """The result stored under ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        _LIVE.add(self)  # every time: an unpickled cache was never registered
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every result."""
        self._entries.clear()
        _LIVE.discard(self)


def clear_caches() -> None:
    """Drop every cached result of every feature graph, and the optional-import check.

    Graphs cache what they derive (distances, neighbourhoods, connected
    sets) per graph, at most
    :data:`~captum_graphshap.graphs.caches.MAX_CACHE_ENTRIES` results each; call
    this to free that memory at once (the graphs themselves stay usable and
    recompute on demand), or after installing scipy in a running session.
    The plans cached per graph by the attribution methods are not graph
    caches; they hold the graphs they were built for until they are evicted.

    Example:
        >>> from captum_graphshap.graphs import GridGraph, clear_caches
        >>> grid = GridGraph(3, 3)
        >>> first = grid.neighbourhoods(1)
        >>> clear_caches()
        >>> grid.neighbourhoods(1) is first, bool((grid.neighbourhoods(1) == first).all())
        (False, True)
    """
    for cache in list(_LIVE):
        cache.clear()
    has_scipy.cache_clear()
