"""Shapley-value attribution methods for structured data, as a Captum plugin.

The public names are imported on first use (PEP 562), so that
``import captum_graphshap`` and ``graphshap --help`` do not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - the same names, for type checkers and IDEs
    from .analysis import ExplanationGraph
    from .attr import (
        BayesShap,
        BivariateShapley,
        CShapley,
        ExactShapley,
        Explanation,
        LShapley,
        MyersonValue,
        PairedKernelShap,
        ShapleyResiduals,
        ShapleySampling,
        Shear,
        clear_caches,
    )
    from .graphs import FeatureGraph, GridGraph, LineGraph, SuperpixelGraph

#: Public name -> the subpackage that defines it.
_LAZY = {
    "ExplanationGraph": ".analysis",
    **dict.fromkeys(
        (
            "BayesShap",
            "BivariateShapley",
            "CShapley",
            "ExactShapley",
            "Explanation",
            "LShapley",
            "MyersonValue",
            "PairedKernelShap",
            "ShapleyResiduals",
            "ShapleySampling",
            "Shear",
            "clear_caches",
        ),
        ".attr",
    ),
    **dict.fromkeys(("FeatureGraph", "GridGraph", "LineGraph", "SuperpixelGraph"), ".graphs"),
}


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


__all__ = [
    "BayesShap",
    "BivariateShapley",
    "CShapley",
    "ExactShapley",
    "Explanation",
    "ExplanationGraph",
    "FeatureGraph",
    "GridGraph",
    "LShapley",
    "LineGraph",
    "MyersonValue",
    "PairedKernelShap",
    "ShapleyResiduals",
    "ShapleySampling",
    "Shear",
    "SuperpixelGraph",
    "clear_caches",
]

__version__ = "0.1.0"
