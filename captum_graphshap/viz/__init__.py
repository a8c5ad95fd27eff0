"""Plotting helpers that Captum's :mod:`captum.attr.visualization` lacks."""

from .graph_plots import plot_explanation_graph, plot_pixel_overlay, plot_token_strip
from .images import to_hwc
from .interval_plots import plot_feature_intervals, plot_image_intervals, plot_token_intervals

__all__ = [
    "plot_explanation_graph",
    "plot_feature_intervals",
    "plot_image_intervals",
    "plot_pixel_overlay",
    "plot_token_intervals",
    "plot_token_strip",
    "to_hwc",
]
