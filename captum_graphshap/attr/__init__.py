"""Captum ``Attribution`` subclasses: thin adapters over plans and estimators."""

from .exact import ExactShapley
from .myerson import MyersonValue

__all__ = ["ExactShapley", "MyersonValue"]
