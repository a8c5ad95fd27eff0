"""Metrics for attributions: how well a ranking of features finds the evidence."""

from .masking import DEFAULT_FRACTIONS, curve_area, masking_curve

__all__ = ["DEFAULT_FRACTIONS", "curve_area", "masking_curve"]
