"""The SHEAR paper's metrics: closed forms and direct model calls."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.metrics.accuracy import (
    absolute_error,
    faithfulness,
    leave_one_out,
    monotonicity,
    ranking_accuracy,
)


def test_absolute_error_sums_over_features():
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    b = torch.tensor([[1.5, 2.0, 1.0], [1.0, -1.0, 0.0]])
    torch.testing.assert_close(absolute_error(a, b), torch.tensor([2.5, 2.0]))


def test_ranking_accuracy_weights_the_top_of_the_ranking():
    truth = torch.tensor([[4.0, 3.0, 2.0, 1.0]])
    assert ranking_accuracy(truth, truth).item() == 1.0
    norm = 1 + 1 / 2 + 1 / 3 + 1 / 4
    swapped_top = torch.tensor([[3.0, 4.0, 2.0, 1.0]])
    assert ranking_accuracy(swapped_top, truth).item() == pytest.approx((1 / 3 + 1 / 4) / norm)
    swapped_bottom = torch.tensor([[4.0, 3.0, 1.0, 2.0]])
    assert ranking_accuracy(swapped_bottom, truth).item() == pytest.approx((1 + 1 / 2) / norm)
    reversed_order = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert ranking_accuracy(reversed_order, truth).item() == 0.0


def test_faithfulness_is_pearson_correlation_per_example():
    differences = torch.tensor([[1.0, 2.0, 4.0], [3.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    attributions = torch.stack([2 * differences[0] + 1, -differences[1], torch.ones(3)])
    torch.testing.assert_close(
        faithfulness(attributions, differences),
        torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64),
    )
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 5, generator=generator), torch.randn(2, 5, generator=generator)
    for n in range(2):
        want = torch.corrcoef(torch.stack([a[n], b[n]]))[0, 1].item()
        assert faithfulness(a, b)[n].item() == pytest.approx(want, abs=1e-6)


def test_leave_one_out_matches_direct_model_calls_with_grouped_features():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    x = torch.randn(3, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 2, 2, 1]])
    got = leave_one_out(model, x, 0.5, target=1, feature_mask=mask)
    with torch.no_grad():
        full = model(x)[:, 1]
        for feature in range(3):
            dropped = torch.where(mask == feature, torch.tensor(0.5, dtype=torch.float64), x)
            torch.testing.assert_close(got[:, feature], full - model(dropped)[:, 1])


def test_monotonicity_of_exact_and_reversed_explanations_of_an_additive_model():
    weights = torch.tensor([3.0, -1.0, 0.5, 2.0, -4.0], dtype=torch.float64)

    def model(x):
        return x @ weights

    x = torch.ones(2, 5, dtype=torch.float64)
    exact = ExactShapley(model).attribute(x)
    assert monotonicity(model, x, exact).tolist() == [1.0, 1.0]
    # ranking the features backwards makes every step grow
    assert monotonicity(model, x, 1.0 / exact).tolist() == [0.0, 0.0]


def test_metric_inputs_are_checked():
    with pytest.raises(ValueError, match="same shape"):
        absolute_error(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="batch first"):
        ranking_accuracy(torch.zeros(3), torch.zeros(3))
    with pytest.raises(TypeError, match="tensor"):
        faithfulness([1.0, 2.0], torch.zeros(1, 2))
    with pytest.raises(ValueError, match="shapes of inputs"):
        monotonicity(lambda x: x.sum(1), torch.ones(2, 3), torch.ones(2, 4))


def test_metrics_refuse_non_finite_explanations():
    nan = torch.full((2, 3), float("nan"))
    for metric in (ranking_accuracy, absolute_error):
        with pytest.raises(ValueError, match="NaN or infinite"):
            metric(nan, nan)
    with pytest.raises(ValueError, match="NaN or infinite"):
        faithfulness(nan, torch.ones(2, 3))
    calls = []

    def model(x):
        calls.append(x.shape[0])
        return x.sum(1)

    # monotonicity scored NaN attributions (0.333) before; now refused before any model call
    with pytest.raises(ValueError, match="NaN or infinite"):
        monotonicity(model, torch.ones(2, 3), nan)
    assert calls == []


def test_half_precision_errors_do_not_overflow():
    big = torch.full((1, 3), 60000.0, dtype=torch.float16)
    assert float(absolute_error(big, -big)[0]) == 360000.0
