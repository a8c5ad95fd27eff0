"""Uncertainty plots: what is drawn is the attributions and their half-widths."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display in tests

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection
from matplotlib.container import BarContainer

from captum_graphshap.viz.interval_plots import (
    plot_feature_intervals,
    plot_image_intervals,
    plot_token_intervals,
)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_feature_bars_carry_the_values_and_the_half_widths_as_error_bars():
    mean = torch.tensor([[0.5, -2.0, 0.1, 1.0]])
    half = torch.tensor([[0.1, 0.3, 0.4, 0.2]])
    ax = plot_feature_intervals(mean, half, ["a", "b", "c", "d"])
    bars = ax.patches
    # Sorted by |value|, largest at the top (highest y).
    ordered = sorted(bars, key=lambda bar: -bar.get_y())
    assert [bar.get_width() for bar in ordered] == pytest.approx([-2.0, 1.0, 0.5, 0.1])
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels == ["b", "d", "a", "c"]
    (container,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    caps = container.errorbar.lines[2][0].get_segments()
    lengths = sorted(float(seg[1, 0] - seg[0, 0]) / 2 for seg in caps)
    assert lengths == pytest.approx(sorted([0.1, 0.3, 0.4, 0.2]))
    # c's interval (0.1 ± 0.4) contains zero: faded.
    faded = [bar for bar in bars if bar.get_alpha() < 1]
    assert [bar.get_width() for bar in faded] == pytest.approx([0.1])


def test_feature_bars_can_keep_the_order_and_limit_the_count():
    ax = plot_feature_intervals(np.array([3.0, 1.0, 2.0]), np.zeros(3), sort=False, max_features=2)
    assert [bar.get_width() for bar in sorted(ax.patches, key=lambda b: -b.get_y())] == [3.0, 1.0]


def test_token_strip_shades_each_interval_behind_its_bar():
    tokens = ["not", "bad", "at", "all"]
    mean = np.array([-0.8, 0.6, 0.05, 0.3])
    half = np.array([0.2, 0.1, 0.1, 0.4])
    ax = plot_token_intervals(tokens, mean, half)
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 4
    for band, value, width in zip(bands, mean, half):
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(value - width)
        assert ys.max() == pytest.approx(value + width)
    assert [bar.get_height() for bar in ax.patches] == pytest.approx(mean.tolist())


def test_image_panels_show_heatmap_and_half_widths_next_to_the_input():
    attributions = torch.randn(2, 3, 4, 5)
    half = torch.rand(2, 3, 4, 5)
    image = torch.rand(2, 3, 4, 5)
    axes = plot_image_intervals(attributions, half, image, index=1)
    assert [ax.get_title() for ax in axes] == ["input", "attribution", "half-width"]
    np.testing.assert_allclose(axes[0].images[0].get_array(), image[1].permute(1, 2, 0).numpy())
    np.testing.assert_allclose(axes[1].images[0].get_array(), attributions[1].sum(0).numpy(), 1e-6)
    np.testing.assert_allclose(axes[2].images[0].get_array(), half[1].sum(0).numpy(), 1e-6)
    assert axes[1].images[0].norm.vcenter == 0.0
    assert len(plot_image_intervals(attributions[0, 0], half[0, 0])) == 2


BAD = [
    (lambda: plot_feature_intervals([1.0, 2.0], [0.1]), ValueError, "half_width has 1"),
    (lambda: plot_feature_intervals([1.0, 2.0], [0.1, -0.1]), ValueError, "non-negative"),
    (lambda: plot_feature_intervals([1.0], [0.1], ["a", "b"]), ValueError, "feature_names"),
    (lambda: plot_feature_intervals(np.zeros((2, 2, 2)), 0, None), ValueError, "shape"),
    (lambda: plot_token_intervals(["a"], [1.0, 2.0], [0.0, 0.0]), ValueError, "tokens has 1"),
    (
        lambda: plot_image_intervals(torch.zeros(4, 5), torch.zeros(4, 4)),
        ValueError,
        "same image shape",
    ),
    (
        lambda: plot_image_intervals(torch.zeros(4, 5), -torch.ones(4, 5)),
        ValueError,
        "negative",
    ),
    (
        lambda: plot_image_intervals(torch.zeros(4, 5), torch.zeros(4, 5), torch.zeros(3, 3)),
        ValueError,
        "image has size",
    ),
]


@pytest.mark.parametrize(("call", "error", "fragment"), BAD)
def test_bad_plot_input_names_the_argument(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()
