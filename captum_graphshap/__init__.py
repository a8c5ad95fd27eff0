"""Shapley-value attribution methods for structured data, as a Captum plugin.

The public names are imported on first use (PEP 562), so that
``import captum_graphshap`` and ``graphshap --help`` do not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - the same names, for type checkers and IDEs
    # ``X as X``: an explicit re-export (mypy --strict), as __all__ is not a literal
    from .amortized import AmortizedShapley as AmortizedShapley
    from .analysis import ExplanationGraph as ExplanationGraph
    from .attr import BayesShap as BayesShap
    from .attr import BivariateShapley as BivariateShapley
    from .attr import CShapley as CShapley
    from .attr import ExactShapley as ExactShapley
    from .attr import Explanation as Explanation
    from .attr import LShapley as LShapley
    from .attr import MyersonValue as MyersonValue
    from .attr import OwenValue as OwenValue
    from .attr import PairedKernelShap as PairedKernelShap
    from .attr import ShapleyResiduals as ShapleyResiduals
    from .attr import ShapleySampling as ShapleySampling
    from .attr import Shear as Shear
    from .attr import clear_caches as clear_caches
    from .graphs import FeatureGraph as FeatureGraph
    from .graphs import GridGraph as GridGraph
    from .graphs import Hierarchy as Hierarchy
    from .graphs import LineGraph as LineGraph
    from .graphs import SuperpixelGraph as SuperpixelGraph

#: Public name -> the subpackage that defines it (the one list: ``__all__`` is its keys).
_LAZY = {
    "AmortizedShapley": ".amortized",
    "BayesShap": ".attr",
    "BivariateShapley": ".attr",
    "CShapley": ".attr",
    "ExactShapley": ".attr",
    "Explanation": ".attr",
    "ExplanationGraph": ".analysis",
    "FeatureGraph": ".graphs",
    "GridGraph": ".graphs",
    "Hierarchy": ".graphs",
    "LShapley": ".attr",
    "LineGraph": ".graphs",
    "MyersonValue": ".attr",
    "OwenValue": ".attr",
    "PairedKernelShap": ".attr",
    "ShapleyResiduals": ".attr",
    "ShapleySampling": ".attr",
    "Shear": ".attr",
    "SuperpixelGraph": ".graphs",
    "clear_caches": ".attr",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # What a user may reach: the public names and the public subpackages (found
    # without importing them), not this file's own imports (Any, importlib, ...).
    import pkgutil

    submodules = {
        info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")
    }
    return sorted({*__all__, "__version__", *submodules})


__version__ = "0.1.0"
