"""The masking experiment against closed forms on linear softmax models."""

from __future__ import annotations

import math

import pytest
import torch

from captum_graphshap.metrics import DEFAULT_FRACTIONS, curve_area, masking_curve


def linear_two_class(w: list[float]):
    """Logits ``[x @ w, 0]``: the log-odds of class 0 is exactly ``x @ w``."""
    weight = torch.tensor(w, dtype=torch.float64)

    def model(x: torch.Tensor) -> torch.Tensor:
        score = x.reshape(x.shape[0], -1) @ weight.to(x.dtype)
        return torch.stack([score, torch.zeros_like(score)], dim=1)

    return model


def test_linear_model_drop_is_the_sum_of_the_top_contributions():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    model = linear_two_class([1.0, -1.0, 0.5, 2.0])
    # Exact Shapley values of a linear model with baseline 0: x_j * w_j = [1, -2, 1.5, 8],
    # so the ranking is features 3, 2, 0, 1.
    attributions = x * torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    fractions = (0.0, 0.25, 0.5, 0.75, 1.0)
    curve = masking_curve(model, x, attributions, target=0, fractions=fractions)
    expected = torch.tensor([[0.0, -8.0, -9.5, -10.5, -8.5]], dtype=torch.float64)
    torch.testing.assert_close(curve, expected)
    # Trapezoid: 0.25 * (0/2 - 8 - 9.5 - 10.5 - 8.5/2) = -8.0625.
    assert curve_area(curve, fractions) == pytest.approx(-8.0625)
    # The reverse ranking removes the negative evidence first: the curve rises.
    worst = masking_curve(model, x, -attributions, target=0, fractions=fractions)
    torch.testing.assert_close(worst, torch.tensor([[0.0, 2.0, 1.0, -0.5, -8.5]]).double())


def test_log_odds_counts_every_other_class_and_log_prob_is_log_softmax():
    # Three classes with logits [2 x0, x1, 0] at x = [1, 1]: class 0 is predicted.
    def model(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([2 * x[:, 0], x[:, 1], torch.zeros_like(x[:, 0])], dim=1)

    x = torch.ones(1, 2)
    attributions = torch.tensor([[3.0, 1.0]])  # mask feature 0 first, then feature 1
    curve = masking_curve(model, x, attributions, fractions=(0, 0.5, 1))
    # log-odds(a, b) = a - log(e^b + 1): full (2, 1); then (0, 1); then (0, 0).
    full = 2 - math.log(math.e + 1)
    expected = [0.0, -math.log(math.e + 1) - full, -math.log(2) - full]
    torch.testing.assert_close(curve[0], torch.tensor(expected, dtype=torch.float64))

    log_prob = masking_curve(model, x, attributions, fractions=(0, 0.5, 1), value="log_prob")
    # log p0(a, b) = a - log(e^a + e^b + 1).
    full = 2 - math.log(math.e**2 + math.e + 1)
    expected = [0.0, -math.log(1 + math.e + 1) - full, -math.log(3) - full]
    torch.testing.assert_close(log_prob[0], torch.tensor(expected, dtype=torch.float64))


def test_default_target_is_the_predicted_class_per_example():
    model = linear_two_class([1.0, 1.0])
    # Example 0 predicts class 0 (score 3 > 0); example 1 class 1 (score -3 < 0).
    x = torch.tensor([[1.0, 2.0], [-1.0, -2.0]], dtype=torch.float64)
    attributions = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    curve = masking_curve(model, x, attributions, fractions=(0, 0.5))
    # Masking feature 1: class 0's log-odds 3 -> 1; class 1's log-odds (-score) 3 -> 1.
    torch.testing.assert_close(curve, torch.tensor([[0.0, -2.0], [0.0, -2.0]]).double())
    explicit = masking_curve(model, x, attributions, fractions=(0, 0.5), target=[0, 0])
    torch.testing.assert_close(explicit[1], torch.tensor([0.0, 2.0]).double())


def test_grouped_channels_rank_by_mean_and_mask_together_with_a_baseline():
    # (N, C, H, W) = (1, 2, 1, 2): two pixels of two channels; logit = sum of elements.
    def model(x: torch.Tensor) -> torch.Tensor:
        score = x.reshape(x.shape[0], -1).sum(1)
        return torch.stack([score, torch.zeros_like(score)], dim=1)

    x = torch.tensor([[[[1.0, 2.0]], [[3.0, 4.0]]]])
    pixel_mask = torch.tensor([[[[0, 1]]]])  # (1, 1, 1, 2): channels grouped
    # Pixel 0: channel attributions 5, -5 (mean 0); pixel 1: 1, 1 (mean 1) ranks first.
    attributions = torch.tensor([[[[5.0, 1.0]], [[-5.0, 1.0]]]])
    curve = masking_curve(
        model, x, attributions, feature_mask=pixel_mask, baselines=0.5, fractions=(0, 0.5, 1)
    )
    # Pixel 1 to 0.5 in both channels: 2 + 4 -> 1; then pixel 0: 1 + 3 -> 1.
    torch.testing.assert_close(curve[0], torch.tensor([0.0, -5.0, -8.0]).double())


def test_patch_mask_without_batch_dims_and_per_example_masks():
    model = linear_two_class([1.0, 1.0, 1.0, 1.0])
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2)
    attributions = torch.tensor([[4.0, 4.0, 1.0, 1.0]] * 2)
    shared = torch.tensor([0, 0, 1, 1])  # broadcasts to (N, 4)
    curve = masking_curve(model, x, attributions, feature_mask=shared, fractions=(0, 0.5))
    torch.testing.assert_close(curve[:, 1], torch.tensor([-3.0, -3.0]).double())
    per_example = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    curve = masking_curve(model, x, attributions, feature_mask=per_example, fractions=(0, 0.5))
    # Example 1: feature 0 = {x0} (mean 4) ranks first; half of 2 features is 1.
    torch.testing.assert_close(curve[:, 1], torch.tensor([-3.0, -1.0]).double())


def test_fraction_rounds_half_up_and_unused_ids_do_not_count():
    model = linear_two_class([1.0, 1.0, 1.0, 1.0])
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    attributions = torch.tensor([[4.0, 3.0, 2.0, 1.0]])
    # 0.125 * 4 = 0.5 -> 1 feature; 0.375 * 4 = 1.5 -> 2 features.
    curve = masking_curve(model, x, attributions, fractions=(0.125, 0.375))
    torch.testing.assert_close(curve[0], torch.tensor([-1.0, -3.0]).double())
    # Ids 0, 2, 4, 6: ids 1, 3, 5 own no element, so d = 4, not 7.
    sparse = torch.tensor([0, 2, 4, 6])
    again = masking_curve(model, x, attributions, feature_mask=sparse, fractions=(0.125, 0.375))
    torch.testing.assert_close(again, curve)


def test_one_model_call_per_fraction_over_the_whole_batch():
    calls: list[int] = []
    inner = linear_two_class([1.0] * 20)

    def model(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return inner(x)

    x = torch.rand(5, 20, dtype=torch.float64)
    curve = masking_curve(model, x, torch.rand(5, 20, dtype=torch.float64))
    assert curve.shape == (5, len(DEFAULT_FRACTIONS))
    assert torch.all(curve[:, 0] == 0)
    # The full input once, then one call per fraction but 0 (which masks nothing):
    # 0.05 * 20 = 1 feature is the smallest step.
    assert calls == [5] * len(DEFAULT_FRACTIONS)


def test_single_logit_model_uses_the_logit_as_log_odds():
    weight = torch.tensor([2.0, -1.0])
    x = torch.tensor([[1.0, 1.0]])
    curve = masking_curve(
        lambda z: z @ weight, x, torch.tensor([[1.0, 0.0]]), fractions=(0, 0.5, 1.0)
    )
    torch.testing.assert_close(curve[0], torch.tensor([0.0, -2.0, -1.0]).double())


def test_curve_area_means_over_examples_and_accepts_int_steps():
    curve = torch.tensor([[0.0, -1.0, -2.0], [0.0, -3.0, -2.0]])
    # Fractions 0, 0.25, 0.5: areas 0.25 * (0/2 - 1 - 2/2) = -0.5 and
    # 0.25 * (0/2 - 3 - 2/2) = -1.0.
    assert curve_area(curve, 2) == pytest.approx(-0.75)
    assert curve_area(curve[0].numpy(), [0, 0.25, 0.5]) == pytest.approx(-0.5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"attributions": torch.zeros(2, 3)}, "attributions"),
        ({"feature_mask": torch.zeros(3, dtype=torch.long)}, "feature_mask"),
        ({"feature_mask": torch.zeros(1, 4)}, "feature_mask"),
        ({"baselines": torch.zeros(3, 4)}, "baselines"),
        ({"fractions": (0.0, 1.5)}, "fractions"),
        ({"fractions": ()}, "fractions"),
        ({"target": 5}, "target"),
        ({"target": [0, 1, 0]}, "target"),
        ({"value": "logit"}, "value"),
        ({"attributions": torch.full((2, 4), float("nan"))}, "attributions"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
    arguments = {
        "inputs": torch.rand(2, 4),
        "attributions": torch.rand(2, 4),
        **kwargs,
    }
    inputs = arguments.pop("inputs")
    attributions = arguments.pop("attributions")
    with pytest.raises((ValueError, TypeError), match=name):
        masking_curve(linear_two_class([1.0] * 4), inputs.double(), attributions, **arguments)


def test_curve_area_checks_lengths():
    with pytest.raises(ValueError, match="fractions"):
        curve_area(torch.zeros(2, 3), (0.0, 0.5))
    with pytest.raises(ValueError, match="curve"):
        curve_area(torch.zeros(2, 3, 1), (0.0, 0.25, 0.5))


def test_token_ids_are_masked_with_an_integer_pad_id():
    # Token ids 0..4 with an embedding-free "model": logit of class 0 = number of id 3s.
    def model(ids: torch.Tensor) -> torch.Tensor:
        score = (ids == 3).sum(1).double()
        return torch.stack([score, torch.zeros_like(score)], dim=1)

    ids = torch.tensor([[3, 1, 3, 2]])
    attributions = torch.tensor([[1.0, 0.0, 0.5, 0.0]])
    curve = masking_curve(model, ids, attributions, baselines=0, target=0, fractions=(0, 0.25, 0.5))
    torch.testing.assert_close(curve[0], torch.tensor([0.0, -1.0, -2.0]).double())
    with pytest.raises(ValueError, match="baselines"):
        masking_curve(model, ids, attributions, baselines=0.5)


def test_curve_area_refuses_fractions_that_do_not_increase():
    with pytest.raises(ValueError, match="increase strictly"):
        curve_area(torch.ones(2, 3), [0.5, 0.25, 0.0])
