"""One call that empties every cache of the package (``captum_graphshap.clear_caches``).

Every cache is bounded already (``functools.lru_cache`` with a ``maxsize``,
graphs' LRU caches), and those holding tensors have the device in their key.
This module sits above all of them (attr imports engine, graphs, plans and
uncertainty), so it can reach each without a lower layer importing upwards.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..engine import plan as engine_plan
from ..graphs import clear_caches as clear_graph_caches
from ..plans import bivariate, exact, l_c_shapley, linear
from ..uncertainty import local_residuals
from . import result

#: the modules whose functions keep an ``lru_cache``
CACHED_MODULES: tuple[ModuleType, ...] = (
    engine_plan,
    exact,
    l_c_shapley,
    linear,
    bivariate,
    local_residuals,
    result,
)


def cached_functions() -> list[Any]:
    """The ``lru_cache``-wrapped functions defined in :data:`CACHED_MODULES`."""
    return [
        value
        for module in CACHED_MODULES
        for value in vars(module).values()
        if hasattr(value, "cache_clear") and getattr(value, "__module__", "") == module.__name__
    ]


def clear_caches() -> None:
    """Empty every cache of the package, to free its memory at once.

    Coalition plans and their estimators' matrices (kept per graph, ``k`` and
    device, so a repeated ``attribute`` call skips building them), the
    result types of the ``return_*`` options, and every feature graph's
    neighbourhoods and connected sets
    (:func:`captum_graphshap.graphs.clear_caches`). Nothing else changes:
    the next call rebuilds what it needs, with the same results.

    Example:
        >>> import torch
        >>> from captum_graphshap import ExactShapley, clear_caches
        >>> model = torch.nn.Linear(4, 1)
        >>> first = ExactShapley(model).attribute(torch.ones(1, 4), target=0)
        >>> clear_caches()
        >>> bool((ExactShapley(model).attribute(torch.ones(1, 4), target=0) == first).all())
        True
    """
    for function in cached_functions():
        function.cache_clear()
    clear_graph_caches()
