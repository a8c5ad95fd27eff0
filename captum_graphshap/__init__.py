"""Shapley-value attribution methods for structured data, as a Captum plugin."""

from .attr import ExactShapley, MyersonValue
from .graphs import FeatureGraph, GridGraph, LineGraph, SuperpixelGraph

__all__ = [
    "ExactShapley",
    "FeatureGraph",
    "GridGraph",
    "LineGraph",
    "MyersonValue",
    "SuperpixelGraph",
]

__version__ = "0.1.0"
