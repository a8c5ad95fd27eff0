"""to_hwc turns channels-first tensors into what Captum's image plots take."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")  # no display in tests

import numpy as np
import pytest
import torch
from captum.attr import visualization
from matplotlib.figure import Figure

from captum_graphshap import ExactShapley, GridGraph
from captum_graphshap.viz import to_hwc


def test_layouts_give_channels_last_arrays():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    out = to_hwc(x, index=1)
    assert out.shape == (4, 5, 3) and out.dtype == np.float64
    np.testing.assert_array_equal(out, x[1].permute(1, 2, 0).numpy())
    np.testing.assert_array_equal(to_hwc(x, index=-1), out)
    # Single channel stays (H, W, 1), as Captum accepts it.
    assert to_hwc(x[:, :1], 0).shape == (4, 5, 1)
    np.testing.assert_array_equal(to_hwc(x[0]), x[0].permute(1, 2, 0).numpy())  # CHW
    np.testing.assert_array_equal(to_hwc(x[0, 0])[:, :, 0], x[0, 0].numpy())  # HW
    # A 3-dim tensor whose first dimension is not 1 or 3 is a batch (NHW).
    batch = torch.rand(5, 4, 4)
    np.testing.assert_array_equal(to_hwc(batch, index=2)[:, :, 0], batch[2].double().numpy())
    # ... and an explicit layout settles the ambiguous case of 3 grey maps.
    three = torch.rand(3, 4, 4)
    assert to_hwc(three).shape == (4, 4, 3)
    assert to_hwc(three, 0, layout="NHW").shape == (4, 4, 1)
    np.testing.assert_array_equal(to_hwc(three, 2)[:, :, 0], three[2].double().numpy())


def test_a_batch_without_index_says_which_image_it_took():
    batch = torch.rand(3, 1, 4, 4)
    with pytest.warns(UserWarning, match="took image 0 of a batch of 3.*pass index="):
        out = to_hwc(batch)
    np.testing.assert_array_equal(out[:, :, 0], batch[0, 0].double().numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        to_hwc(batch, 0)  # an explicit index is quiet
        to_hwc(batch[:1])  # so is a batch of one
        to_hwc(batch[0])  # and a single image


def test_tensors_needing_grad_and_numpy_input_work():
    x = torch.rand(1, 1, 3, 3, requires_grad=True, dtype=torch.bfloat16)
    assert to_hwc(x).shape == (3, 3, 1)
    assert to_hwc(np.ones((2, 2))).shape == (2, 2, 1)


@pytest.mark.parametrize(
    ("value", "kwargs", "match"),
    [
        (torch.zeros(4), {}, "2, 3 or 4 dimensions"),
        (torch.zeros(1, 1, 1, 4, 4), {}, "2, 3 or 4 dimensions"),
        (torch.zeros(2, 1, 4, 4), {"index": 2}, "index"),
        (torch.zeros(2, 1, 4, 4), {"layout": "NHWC"}, "layout"),
        (torch.zeros(2, 4, 4), {"layout": "NCHW"}, "layout"),
    ],
)
def test_bad_shapes_raise_value_errors(value, kwargs, match):
    with pytest.raises(ValueError, match=match):
        to_hwc(value, **kwargs)


def test_captum_draws_a_real_attribution():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 5),
    ).eval()
    images = torch.rand(2, 3, 8, 8)
    _, mask = GridGraph.patches(8, 8, 4)
    attributions = ExactShapley(model).attribute(images, target=1, feature_mask=mask[None, None])
    assert isinstance(attributions, torch.Tensor) and attributions.shape == images.shape
    attr = to_hwc(attributions, index=1)
    image = to_hwc(images, index=1)
    assert attr.shape == image.shape == (8, 8, 3)
    figure, axis = visualization.visualize_image_attr(
        attr, image, method="blended_heat_map", sign="all", use_pyplot=False
    )
    assert isinstance(figure, Figure)
    # Captum sums the channels and draws the 8x8 map of normalised
    # attributions: constant on each 4x4 patch, with the sign of the sum.
    drawn = np.asarray(axis.images[-1].get_array())
    assert drawn.shape == (8, 8)
    summed = attr.sum(axis=2)
    for rows in (slice(0, 4), slice(4, 8)):
        for cols in (slice(0, 4), slice(4, 8)):
            assert np.ptp(drawn[rows, cols]) == 0
    assert np.array_equal(np.sign(drawn), np.sign(summed))
    assert np.abs(summed).max() > 0
    figure.canvas.draw()  # renders with Agg
