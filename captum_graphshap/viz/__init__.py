"""Plotting helpers that Captum's :mod:`captum.attr.visualization` lacks."""

from .images import to_hwc

__all__ = ["to_hwc"]
