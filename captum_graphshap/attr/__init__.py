"""Captum ``Attribution`` subclasses: thin adapters over plans and estimators."""

from .bayes_shap import BayesShap
from .bivariate_shapley import BivariateShapley
from .c_shapley import CShapley
from .caches import clear_caches
from .exact_shapley import ExactShapley
from .l_shapley import LShapley
from .myerson_value import MyersonValue
from .owen_value import OwenValue
from .paired_kernel_shap import PairedKernelShap
from .result import Explanation
from .shapley_residuals import ShapleyResiduals
from .shapley_sampling import ShapleySampling
from .shear import Shear

__all__ = [
    "BayesShap",
    "BivariateShapley",
    "CShapley",
    "ExactShapley",
    "Explanation",
    "LShapley",
    "MyersonValue",
    "OwenValue",
    "PairedKernelShap",
    "ShapleyResiduals",
    "ShapleySampling",
    "Shear",
    "clear_caches",
]
