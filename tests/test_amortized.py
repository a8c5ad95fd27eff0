"""AmortizedShapley: efficiency, shapes, refusals before model calls, save/load, labels."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from captum_graphshap import AmortizedShapley, ExactShapley
from captum_graphshap.amortized import NotFittedError
from captum_graphshap.amortized.labels import exact_values, sampled_labels
from captum_graphshap.amortized.report import FitReport
from captum_graphshap.engine.coalition_game import prepare_game


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Training many small steps on a shared CPU: two threads per step thrash (10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Counting(nn.Module):
    """Counts the rows the model sees."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.rows = model, 0

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.rows += inputs[0].shape[0]
        return self.model(*inputs)


def small_mlp(d: int = 5, outputs: int = 2, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, outputs)).eval()


def data(count: int, d: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randn(count, d, generator=torch.Generator().manual_seed(seed))


def fitted(model: nn.Module, x: torch.Tensor, **options) -> AmortizedShapley:
    explainer = AmortizedShapley(model, feature_mask=options.pop("feature_mask", None))
    options = {"baselines": 0.0, "target": 0, "budget": 12, "epochs": 3, **options}
    explainer.fit(x, generator=torch.Generator().manual_seed(0), **options)
    return explainer


@pytest.fixture(scope="module")
def mlp_explainer() -> tuple[nn.Module, AmortizedShapley]:
    model = small_mlp()
    return model, fitted(model, data(120))


def test_sums_match_the_output_gap_exactly(mlp_explainer):
    model, explainer = mlp_explainer
    x = data(7, seed=3)
    phi = explainer.attribute(x)
    with torch.no_grad():
        gap = model(x)[:, 0] - model(torch.zeros(1, 5))[:, 0]
    assert phi.shape == x.shape
    torch.testing.assert_close(phi.sum(dim=1), gap, atol=1e-5, rtol=0)


def test_features_at_their_baseline_get_exactly_zero(mlp_explainer):
    """A feature equal to its baseline is a dummy (its Shapley value is 0): it gets 0,
    and the normalisation spreads the residual over the other features only."""
    model, explainer = mlp_explainer
    x = data(7, seed=3)
    x[:, 1] = 0.0  # every example: feature 1 at the baseline
    x[2, 3:] = 0.0  # example 2: features 3 and 4 too
    x[5] = 0.0  # example 5: all of them
    phi = explainer.attribute(x)
    assert bool((phi[:, 1] == 0).all()) and bool((phi[2, 3:] == 0).all())
    assert bool((phi[5] == 0).all())
    with torch.no_grad():
        gap = model(x)[:, 0] - model(torch.zeros(1, 5))[:, 0]
    torch.testing.assert_close(phi.sum(dim=1), gap, atol=1e-5, rtol=0)
    exact = ExactShapley(model).attribute(x, baselines=0.0, target=0)
    assert bool((exact[:, 1].abs() < 1e-6).all())  # the exact values agree: dummies
    result = explainer.attribute(x, return_uncertainty=True)
    # a dummy's interval only admits rounding: 1e-6 of the example's scale each way,
    # enough to hold ExactShapley's sums (not exactly 0), never a real width
    scale = phi.pow(2).mean(dim=1).sqrt()
    width = result.upper[:, 1] - result.lower[:, 1]
    assert bool((width > 0).all())
    assert bool((width <= 2.5e-6 * scale.clamp_min(1e-8)).all())
    assert bool(((result.lower[:, 1] <= exact[:, 1]) & (exact[:, 1] <= result.upper[:, 1])).all())
    off = torch.arange(7) != 5  # example 5 is the baseline itself: nothing to bound
    assert bool((result.upper[off, 0] - result.lower[off, 0] > 1e-3 * scale[off]).all())
    assert bool((result.upper[5].abs() <= 1e-13).all())


def test_intervals_and_spot_checks_come_as_named_fields(mlp_explainer):
    _, explainer = mlp_explainer
    x = data(6, seed=4)
    result = explainer.attribute(x, return_uncertainty=True, spot_check=10)
    assert result._fields == ("attributions", "lower", "upper", "spot_estimate", "flagged")
    phi, lower, upper = result.attributions, result.lower, result.upper
    assert bool((lower <= phi).all() and (phi <= upper).all())
    assert result.flagged.shape == (6,) and result.flagged.dtype == torch.bool
    # the spot estimate is an efficient Shapley estimate of the same examples
    torch.testing.assert_close(result.spot_estimate.sum(1), phi.sum(1), atol=1e-5, rtol=0)


def test_an_input_far_off_the_training_data_is_flagged():
    # a model whose interactions grow with the input: far inputs are explained badly
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1)).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        model[0].weight.normal_()
    explainer = fitted(model, 0.1 * data(200, 4), budget=16, epochs=10)
    far = 50 * data(10, 4, seed=9)
    flagged = explainer.attribute(far, spot_check=32, generator=torch.Generator().manual_seed(0))
    assert int(flagged.flagged.sum()) >= 5


def test_tuple_inputs_and_feature_masks_keep_captum_shapes():
    torch.manual_seed(0)
    weights = torch.randn(4, 3)

    def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a @ weights[:2] + b.sum(-1) @ weights[2:]) * 2

    a, b = data(80, 2), data(80, 6, seed=1).view(80, 2, 3)
    masks = (torch.tensor([[0, 1]]), torch.tensor([[[2, 2, 2], [3, 3, 3]]]))
    explainer = AmortizedShapley(model, feature_mask=masks)
    explainer.fit((a, b), baselines=(0.0, 0.0), target=1, budget=16, epochs=2)
    phi = explainer.attribute((a[:5], b[:5]), baselines=(0.0, 0.0), target=1)
    assert isinstance(phi, tuple) and phi[0].shape == (5, 2) and phi[1].shape == (5, 2, 3)
    # one value per feature, repeated over its elements
    assert torch.equal(phi[1][:, :, :1].expand(-1, -1, 3), phi[1])
    with torch.no_grad():
        gap = model(a[:5], b[:5])[:, 1] - model(torch.zeros(1, 2), torch.zeros(1, 2, 3))[:, 1]
    total = phi[0].sum(1) + phi[1][:, :, 0].sum(1)
    torch.testing.assert_close(total, gap, atol=1e-5, rtol=0)


def test_images_with_a_patch_mask_get_the_image_shape():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3)
    ).eval()
    images = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    rows = torch.arange(8) // 4
    mask = (rows[:, None] * 2 + rows[None, :])[None, None]
    explainer = AmortizedShapley(model, feature_mask=mask)
    explainer.fit(images, baselines=0.0, target=2, budget=12, epochs=2)
    assert type(explainer.explainer.body).__name__ == "PotentialMLP"  # 64 pixels
    phi = explainer.attribute(images[:3], target=2)
    assert phi.shape == (3, 1, 8, 8)


def test_large_images_get_the_convolutional_potential():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 2, 5, stride=4), nn.Flatten(), nn.LazyLinear(2))
    images = torch.rand(44, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    model(images[:1])  # the lazy layer's shape
    model.eval()
    rows = torch.arange(40) // 10
    mask = (rows[:, None] * 4 + rows[None, :])[None, None]  # 16 patches, channels grouped
    explainer = AmortizedShapley(model, feature_mask=mask)
    explainer.fit(images, baselines=0.0, target=1, budget=40, epochs=1, exact_examples=0)
    assert type(explainer.explainer.body).__name__ == "PotentialCNN"  # 4,800 elements
    phi = explainer.attribute(images[:2], target=1)
    assert phi.shape == (2, 3, 40, 40)
    with torch.no_grad():
        gap = model(images[:2])[:, 1] - model(torch.zeros(1, 3, 40, 40))[:, 1]
    # each patch's value on each of its elements, as Captum's masks give it
    torch.testing.assert_close(phi[:, 0, ::10, ::10].sum((1, 2)), gap, atol=1e-5, rtol=0)


def test_every_output_at_once_without_a_target():
    model = small_mlp(outputs=3)
    x = data(100)
    explainer = AmortizedShapley(model)
    explainer.fit(x, baselines=0.0, budget=12, epochs=2)
    phi = explainer.attribute(x[:4])
    assert phi.shape == (4, 3, 5)  # Captum's multi-output layout: (N, outputs, *input)
    with torch.no_grad():
        gap = model(x[:4]) - model(torch.zeros(1, 5))
    torch.testing.assert_close(phi.sum(-1), gap, atol=1e-5, rtol=0)
    torch.testing.assert_close(explainer.attribute(x[:4], target=2), phi[:, 2], atol=1e-6, rtol=0)


def test_per_example_targets_read_each_examples_column():
    model = small_mlp(outputs=3)
    x = data(100)
    target = torch.arange(100) % 3
    explainer = AmortizedShapley(model)
    explainer.fit(x, baselines=0.0, target=target, budget=12, epochs=2)
    phi = explainer.attribute(x[:6], target=target[:6])
    with torch.no_grad():
        gap = (model(x[:6]) - model(torch.zeros(1, 5))).gather(1, target[:6, None])[:, 0]
    torch.testing.assert_close(phi.sum(1), gap, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="target is required"):
        explainer.attribute(x[:2])


def test_refusals_come_before_any_model_call():
    model = Counting(small_mlp())
    explainer = AmortizedShapley(model)
    x = data(60)
    with pytest.raises(NotFittedError, match="call fit"):
        explainer.attribute(x)
    with pytest.raises(ValueError, match="budget"):
        explainer.fit(x, baselines=0.0, target=0, budget=4)
    with pytest.raises(ValueError, match="label_estimator"):
        explainer.fit(x, baselines=0.0, target=0, label_estimator="posterior")
    with pytest.raises(TypeError, match="train"):
        explainer.fit("data", baselines=0.0, target=0)
    with pytest.raises(ValueError, match="at least 40"):
        explainer.fit(x[:10], baselines=0.0, target=0)
    assert model.rows == 0
    explainer.fit(x, baselines=0.0, target=0, budget=12, epochs=1)
    model.rows = 0
    with pytest.raises(ValueError, match="per-example shapes"):
        explainer.attribute(data(3, d=6))
    with pytest.raises(ValueError, match="feature_mask"):
        explainer.attribute(x[:3], feature_mask=torch.tensor([[0, 0, 1, 1, 2]]))
    with pytest.raises(ValueError, match="target"):
        explainer.attribute(x[:3], target=1)
    with pytest.raises(ValueError, match="baselines"):
        explainer.attribute(x[:3], baselines=1.0)
    with pytest.raises(TypeError, match="additional_forward_args"):
        explainer.attribute(x[:3], additional_forward_args=(1,))
    with pytest.raises(ValueError, match="spot_check"):
        explainer.attribute(x[:3], spot_check=2)
    assert model.rows == 0


def test_a_custom_explainer_of_the_wrong_shape_is_refused_before_model_calls():
    model = Counting(small_mlp())
    explainer = AmortizedShapley(model, explainer=nn.Linear(5, 7))
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        explainer.fit(data(60), baselines=0.0, target=0, budget=12)
    assert model.rows == 0
    with pytest.raises(TypeError, match="explainer"):
        AmortizedShapley(model, explainer="mlp")  # type: ignore[arg-type]


def test_state_dict_round_trip_gives_identical_outputs(mlp_explainer):
    model, explainer = mlp_explainer
    state = explainer.state_dict()
    loaded = AmortizedShapley(model)
    loaded.load_state_dict(state)
    x = data(5, seed=8)
    assert torch.equal(loaded.attribute(x), explainer.attribute(x))
    first = explainer.attribute(x, return_uncertainty=True)
    second = loaded.attribute(x, return_uncertainty=True)
    assert torch.equal(first.lower, second.lower) and torch.equal(first.upper, second.upper)
    assert loaded.report == explainer.report


def test_the_same_generator_gives_the_same_explainer():
    model = small_mlp()
    x = data(100)
    first, second = fitted(model, x), fitted(model, x)
    assert first.report == second.report
    assert first.report is not None and first.report.label_estimator == "potential"  # default
    assert torch.equal(first.attribute(x[:4]), second.attribute(x[:4]))


def linear_fit_error(estimator: str, epochs: int) -> tuple[float, FitReport]:
    """A 6-feature linear model fitted with ``estimator`` labels at 16 evaluations:
    the held-out mean relative error to its Shapley values ``w_i (x_i - b_i)``, and
    the fit's report (the gated network needs one constant per feature)."""
    torch.manual_seed(0)
    model = nn.Linear(6, 1).eval()
    explainer = AmortizedShapley(model)
    report = explainer.fit(
        data(400, d=6), baselines=0.0, target=0, budget=16, epochs=epochs,
        label_estimator=estimator, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    test = data(50, d=6, seed=5)
    exact = ExactShapley(model).attribute(test, baselines=0.0, target=0)
    phi = explainer.attribute(test)
    return float(((phi - exact).norm(dim=1) / exact.norm(dim=1)).mean()), report


def test_a_linear_model_is_learnt_near_exactly():
    relative, report = linear_fit_error("permutation", epochs=150)
    # permutation labels of a linear game are exact too: this bounds the fit's own error
    assert relative < 0.05
    assert report.exact_error is not None and report.exact_error < 0.05
    assert report.coverage is not None and report.coverage >= 0.8


def test_a_game_with_interactions_is_learnt_better_than_its_labels():
    # pairwise products: the labels are noisy, the explainer averages them
    def model(x: torch.Tensor) -> torch.Tensor:
        return x[:, 0] * x[:, 1] + x[:, 2] * x[:, 3] - x[:, 4] * x[:, 5] * x[:, 0]

    # 2,000 examples (1,800 trained on): 0.66-0.73 of the labels' error on two seeds;
    # on 600 the ensemble's short fit was no better than its labels (1.09)
    x = data(2000, d=6)
    explainer = AmortizedShapley(model)
    report = explainer.fit(
        x, baselines=0.0, budget=12, epochs=30, label_estimator="permutation",
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert report.exact_error is not None and report.label_exact_error is not None
    assert report.exact_error < 0.9 * report.label_exact_error


@pytest.mark.parametrize("estimator", ["permutation"])
def test_labels_are_unbiased(estimator):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)).eval()
    x = data(3, d=6)
    exact = exact_values(prepare_game(model, x, 0.0, 0)[0])
    # 400 copies of each example in one call: each copy's coalitions are drawn afresh
    copies = x.repeat_interleave(400, dim=0)
    game, _ = prepare_game(model, copies, 0.0, 0)
    draws = sampled_labels(game, estimator, 16, torch.Generator().manual_seed(0))
    draws = draws.view(3, 400, 6, 1).transpose(0, 1)
    mean, spread = draws.mean(0), draws.std(0) / 400**0.5
    # within 4.5 standard errors of the exact value, for each value
    assert bool(((mean - exact).abs() <= 4.5 * spread + 1e-9).all())
    # and the draws really are noisy (not exact by construction)
    assert float(spread.max()) > 1e-4


def test_kernel_labels_bias_is_small():
    # the default labels are a consistent fit, not unbiased: the mean of 600
    # draws was off by 0.6-1.2% of the largest value at 16 and 48 evaluations
    # (three seeds), about four of its standard errors
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)).eval()
    x = data(3, d=6)
    exact = exact_values(prepare_game(model, x, 0.0, 0)[0])
    copies = x.repeat_interleave(600, dim=0)
    biases = []
    for budget in (16, 48):
        game, _ = prepare_game(model, copies, 0.0, 0)
        draws = sampled_labels(game, "kernel", budget, torch.Generator().manual_seed(1))
        mean = draws.view(3, 600, 6, 1).mean(1)
        biases.append(float((mean - exact).abs().max() / exact.abs().max()))
    assert max(biases) < 0.03


def test_labels_differ_per_example_and_spend_the_budget():
    model = small_mlp()
    x = data(1, d=5).expand(4, -1).contiguous()  # four copies of one example
    game, _ = prepare_game(model, x, 0.0, 0)
    labels = sampled_labels(game, "permutation", 14, torch.Generator().manual_seed(0))
    assert int(game.evaluations.max()) <= 14
    # fresh coalitions per example: the copies' estimates differ
    assert not torch.allclose(labels[0], labels[1])


def test_a_dataloader_and_a_validation_set_are_taken():
    model = small_mlp()
    x = data(90)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:60]), batch_size=16)
    explainer = AmortizedShapley(model)
    report = explainer.fit(loader, baselines=0.0, target=0, budget=12, epochs=1, validation=x[60:])
    assert (report.examples, report.held_out) == (60, 30)
    assert report.evaluations <= 12 * 90 + 1  # the labels' budget, and one output probe
    assert explainer.attribute(x[:2]).shape == (2, 5)


def test_token_ids_get_the_transformer_and_efficient_values():
    torch.manual_seed(0)
    embedding = nn.EmbeddingBag(20, 1, mode="sum")

    def model(ids: torch.Tensor) -> torch.Tensor:
        return torch.tanh(embedding(ids))

    ids = torch.randint(1, 20, (80, 6), generator=torch.Generator().manual_seed(0))
    explainer = AmortizedShapley(model)
    explainer.fit(ids, baselines=0, target=0, budget=16, epochs=1)
    assert type(explainer.explainer.body).__name__ == "PotentialTransformer"
    phi = explainer.attribute(ids[:3], baselines=0, target=0)
    with torch.no_grad():
        gap = model(ids[:3])[:, 0] - model(torch.zeros(1, 6, dtype=torch.long))[:, 0]
    assert phi.shape == (3, 6) and phi.is_floating_point()
    torch.testing.assert_close(phi.sum(1).double(), gap.double(), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="vocabulary"):
        explainer.attribute(torch.full((1, 6), 25), baselines=0, target=0)


def test_the_tabular_ensemble_is_the_mean_of_members_fitted_one_by_one():
    from captum_graphshap.amortized.networks import TabularMLP
    from captum_graphshap.amortized.training import TrainingData, normalised, training_loss

    torch.manual_seed(0)
    network = TabularMLP(torch.arange(5), torch.zeros(5), 5, 1, hidden=8, members=3)
    x = data(7)
    members = network.member_values(x)
    assert members.shape == (3, 7, 5, 1)
    assert torch.allclose(network(x), members.mean(0))
    assert not torch.allclose(members[0], members[1])  # independent initialisations
    labels, gaps = torch.randn(7, 5, 1, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
    rows = TrainingData((x,), labels, gaps)
    # the loss is the members' mean loss, not the loss of their mean
    each = [((normalised(m.double(), gaps) - labels) ** 2).mean() for m in members]
    assert torch.allclose(training_loss(network, rows, 5, 1.0), torch.stack(each).mean())
    mean_loss = ((normalised(members.mean(0).double(), gaps) - labels) ** 2).mean()
    assert not torch.allclose(training_loss(network, rows, 5, 1.0), mean_loss)


def test_shapley_labels_are_the_fits_draws_in_captum_shapes():
    from captum_graphshap.amortized import ShapleyLabels

    model = small_mlp(outputs=3)
    x = data(6)
    game, _ = prepare_game(model, x, 0.0, 1)
    expected = sampled_labels(game, "kernel", 16, torch.Generator().manual_seed(0))[..., 0]
    labels = ShapleyLabels(model).attribute(
        x, baselines=0.0, target=1, budget=16, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(labels.double(), expected, atol=1e-6, rtol=0)
    gap = model(x)[:, 1] - model(torch.zeros(1, 5))[:, 1]
    torch.testing.assert_close(labels.sum(1), gap.detach(), atol=1e-5, rtol=0)
    # every output at once: (N, outputs, d), the same draws for each
    every = ShapleyLabels(model).attribute(
        x, baselines=0.0, budget=16, return_input_shape=False,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert every.shape == (6, 3, 5)
    torch.testing.assert_close(every[:, 1], labels, atol=1e-6, rtol=0)
    counted = Counting(model)
    with pytest.raises(ValueError, match="at least 12"):
        ShapleyLabels(counted).attribute(x, target=0, budget=5)
    with pytest.raises(ValueError, match="not both"):
        ShapleyLabels(counted).attribute(x, target=0, budget=16, n_samples=16)
    assert counted.rows == 0


def test_attribute_costs_one_model_call_of_the_examples_and_one_baseline_row():
    model = small_mlp()
    explainer = fitted(model, data(200))
    counted = Counting(model)
    explainer.forward_func = counted
    calls = []
    counted.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    x = data(9, seed=3)
    phi = explainer.attribute(x)
    assert calls == [10]  # f(x) for the 9 examples and f(baseline) once, in one call
    gap = model(x)[:, 0] - model(torch.zeros(1, 5))[:, 0]
    torch.testing.assert_close(phi.sum(1), gap, atol=1e-5, rtol=0)
    calls.clear()
    per_example = explainer.attribute(x, baselines=torch.zeros(9, 5))  # the fit's, one a row
    assert calls == [10]
    torch.testing.assert_close(per_example, phi, atol=1e-6, rtol=0)
    one_differs = torch.zeros(9, 5)
    one_differs[4, 2] = 1.0
    with pytest.raises(ValueError, match="baselines differ from the fit's"):
        explainer.attribute(x, baselines=one_differs)
    assert calls == [10]  # refused before any model call


def test_fit_trains_on_labels_made_elsewhere_without_labelling_again():
    from captum_graphshap.amortized import ShapleyLabels

    model = Counting(small_mlp())
    x = data(300)
    labels = ShapleyLabels(model).attribute(
        x, baselines=0.0, target=0, budget=12, return_input_shape=False,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    model.rows = 0
    explainer = AmortizedShapley(model)
    report = explainer.fit(
        x, baselines=0.0, target=0, budget=12, epochs=30, labels=labels,
        generator=torch.Generator().manual_seed(0), exact_examples=0,
    )  # fmt: skip
    # no example labelled again: the probe, the gaps and the report only
    assert model.rows < 3 * len(x)
    assert report.label_estimator == "kernel"  # the default with labels: ShapleyLabels'
    assert report.evaluations >= 12 * len(x)
    test = data(40, seed=5)
    exact = ExactShapley(model).attribute(test, baselines=0.0, target=0)
    relative = ((explainer.attribute(test) - exact).norm(dim=1) / exact.norm(dim=1)).mean()
    assert float(relative) < 0.2
    # wrong labels are refused before any model call
    model.rows = 0
    for bad, error in (
        (labels[:-1], ValueError),
        (labels[:, :-1], ValueError),
        (labels.long(), TypeError),
        (torch.full_like(labels, float("nan")), ValueError),
    ):
        with pytest.raises(error, match="labels"):
            AmortizedShapley(model).fit(x, baselines=0.0, target=0, budget=12, labels=bad)
    assert model.rows == 0
    # one output's labels for a fit of every output
    with pytest.raises(ValueError, match="output"):
        AmortizedShapley(model).fit(x, baselines=0.0, budget=12, labels=labels)


def fastshap_game(outputs: int = 2):
    """A small game with interactions and ``outputs`` outputs, on three examples."""

    def model(x: torch.Tensor) -> torch.Tensor:
        first = x[:, 0] * x[:, 1] + torch.tanh(x[:, 2] - x[:, 3]) + x[:, 4] * x[:, 5] * x[:, 0]
        return torch.stack([first + k * x[:, k] * x[:, 3] for k in range(outputs)], dim=1)

    return model, data(3, d=6).double()


def test_the_fastshap_loss_is_the_sum_over_the_sampled_coalitions():
    # FastSHAP: sum_S w_S (v(S) - v(0) - 1_S' phi)^2 over each example's own coalitions;
    # the fit keeps the kernel label and the kernel matrix instead, equal up to a constant
    from captum_graphshap.amortized.labels import labels_and_metric
    from captum_graphshap.amortized.objective import squared_errors
    from captum_graphshap.plans.paired_designs import filled_kernel_design

    model, x = fastshap_game()
    d, budget, seed = 6, 20, 3
    game, _ = prepare_game(model, x, 0.0, None)
    labels, metric = labels_and_metric(
        game, "fastshap", budget, torch.Generator().manual_seed(seed)
    )
    assert metric is not None and labels.shape == (3, 6, 2)
    # the same draws as the kernel labels
    kernel_game, _ = prepare_game(model, x, 0.0, None)
    kernel = sampled_labels(kernel_game, "kernel", budget, torch.Generator().manual_seed(seed))
    assert torch.equal(labels, kernel)
    # brute force: the plan's coalitions (the same generator draws them first), each
    # example's relabelled by its permutation, evaluated by the model directly
    design, weights = filled_kernel_design(
        d, (budget - 2) // 2, torch.Generator().manual_seed(seed), torch.device("cpu")
    )
    weights = weights / weights.sum()
    empty = model(torch.zeros(1, d, dtype=torch.float64))[0]
    gaps = model(x) - empty
    phis = torch.randn(6, 3, d, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    phis += ((gaps - phis.sum(dim=2)) / d).unsqueeze(2)  # efficient, as the network's
    phis[0] = labels  # the label itself first
    brute = torch.zeros(6, 3, 2, dtype=torch.float64)
    for n in range(3):
        members = torch.zeros(len(design), d, dtype=torch.float64)
        for m, j in design.nonzero().tolist():
            members[m, metric.order[n, j]] = 1.0
        values = model(x[n] * members) - empty  # (M, 2)
        residuals = values - torch.einsum("md,pdk->pmk", members, phis[:, n])
        brute[:, n] = (weights[None, :, None] * residuals**2).sum(dim=1)
        # each example's matrix is the brute-force one, in feature order; paired
        # coalitions: its trace is d / 2 before scaling to d
        gram = members.T @ (weights[:, None] * members)
        assert abs(float(gram.trace()) - d / 2) < 1e-12
        torch.testing.assert_close(metric.dense()[n], gram * 2.0)
    # the fit's loss per example and output: (phi - label)' A (phi - label) / d with A
    # scaled to trace d, i.e. twice the brute-force matrix: brute = d/2 * ours + constant
    ours = metric.errors(phis - labels)  # (6, 3, 2)
    constant = brute - d / 2 * ours
    torch.testing.assert_close(constant, constant[:1].expand_as(constant), atol=1e-10, rtol=0)
    # the label minimises the brute-force sum (its loss is the constant alone), and
    # the others cost more
    assert bool((ours[0] == 0).all()) and bool((ours[1:] > 1e-3).all())
    assert bool((brute[1:] > brute[:1]).all())
    torch.testing.assert_close(squared_errors(phis - labels, metric), ours.mean())


def test_a_linear_model_is_learnt_with_the_fastshap_objective():
    relative, report = linear_fit_error("fastshap", epochs=100)
    assert report.label_estimator == "fastshap"
    assert relative < 0.05
    assert report.exact_error is not None and report.exact_error < 0.05


def test_fastshap_takes_every_output_per_example_targets_and_baseline_features():
    model = small_mlp(outputs=3)
    x = data(100)
    x[:30, 2] = 0.0  # at the baseline: inactive features, exactly 0
    explainer = AmortizedShapley(model)
    explainer.fit(x, baselines=0.0, budget=12, epochs=2, label_estimator="fastshap")
    phi = explainer.attribute(x[:4])
    with torch.no_grad():
        gap = model(x[:4]) - model(torch.zeros(1, 5))
    assert phi.shape == (4, 3, 5) and bool((phi[:, :, 2] == 0).all())
    torch.testing.assert_close(phi.sum(-1), gap, atol=1e-5, rtol=0)
    target = torch.arange(100) % 3
    explainer = AmortizedShapley(model)
    explainer.fit(x, baselines=0.0, target=target, budget=12, epochs=2, label_estimator="fastshap")
    phi = explainer.attribute(x[:6], target=target[:6])
    torch.testing.assert_close(
        phi.sum(1), (model(x[:6]) - model(torch.zeros(1, 5))).gather(1, target[:6, None])[:, 0],
        atol=1e-5, rtol=0,
    )  # fmt: skip


def test_fastshap_refusals_come_before_any_model_call():
    from captum_graphshap.amortized import ShapleyLabels

    model = Counting(small_mlp())
    x = data(60)
    with pytest.raises(ValueError, match="at least 12"):
        AmortizedShapley(model).fit(
            x, baselines=0.0, target=0, budget=8, label_estimator="fastshap"
        )
    labels = torch.zeros(60, 5)
    with pytest.raises(ValueError, match="fastshap"):
        AmortizedShapley(model).fit(
            x, baselines=0.0, target=0, budget=12, labels=labels, label_estimator="fastshap"
        )
    with pytest.raises(ValueError, match="label_estimator"):
        ShapleyLabels(model).attribute(x, target=0, budget=16, label_estimator="fastshap")
    assert model.rows == 0


def test_a_long_labelling_is_forecast_once_for_the_whole_fit(monkeypatch):
    """One CostForecast for the labels of every training example (timed on the first
    chunk), not the engine's per chunk (which counted each chunk's rows as
    'coalitions x 1 example(s)'); none with show_progress=True, which shows bars."""
    from captum_graphshap.amortized import fitting
    from captum_graphshap.engine import batching

    monkeypatch.setattr(batching, "AUTO_PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(batching, "FORECAST_ROWS", 100)
    monkeypatch.setattr(fitting, "LABEL_CHUNK", 50)
    model = small_mlp()
    x = data(220)
    with pytest.warns(batching.CostForecast) as record:
        fitted(model, x, epochs=1)
    texts = [str(w.message) for w in record if w.category is batching.CostForecast]
    texts = [text for text in texts if "optimiser steps" not in text]  # the training's own
    # the training split (198 examples, four chunks); the held-out 22 are one chunk,
    # labelled by the time a forecast could be made
    assert len(texts) == 1, texts
    assert texts[0].startswith("AmortizedShapley.fit: labels for 198 examples at budget=12")
    assert "2,376 model rows" in texts[0] and "timed on the first 50" in texts[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", batching.CostForecast)
        fitted(model, x, epochs=1, show_progress=True)


@pytest.mark.parametrize("estimator", ["potential", "fastshap"])
def test_a_long_training_is_forecast_once_before_it_runs_on(monkeypatch, estimator):
    """The training's steps 2-4 are timed and the rest forecast in one CostForecast
    (none with show_progress=True: the bar's postfix shows it); no forecast for a
    training estimated under AUTO_PROGRESS_SECONDS."""
    from captum_graphshap.engine import batching

    model = small_mlp()
    x = data(120)
    with warnings.catch_warnings():
        warnings.simplefilter("error", batching.CostForecast)
        fitted(model, x, epochs=6, label_estimator=estimator)  # well under 5 s
        monkeypatch.setattr(batching, "AUTO_PROGRESS_SECONDS", 0.0)
        fitted(model, x, epochs=6, label_estimator=estimator, show_progress=True)
    with pytest.warns(batching.CostForecast) as record:
        fitted(model, x, epochs=6, label_estimator=estimator)
    texts = [str(w.message) for w in record if "optimiser steps" in str(w.message)]
    assert len(texts) == 1, texts
    assert texts[0].startswith("AmortizedShapley.fit: ")
    assert "on steps 2-4" in texts[0] and "show_progress=True" in texts[0]


def test_the_training_forecast_weighs_steps_by_their_network_rows(monkeypatch):
    """Timed on steps 1-3 (0-based) and scaled by the rows left: a potential's
    recursion steps hold more network rows than its pretraining steps."""
    from captum_graphshap.amortized import potential_training, training_clock
    from captum_graphshap.engine import batching

    clock_seconds = iter([10.0, 13.0])  # steps 1-3: 3 s, one second a step
    monkeypatch.setattr(training_clock.time, "perf_counter", lambda: next(clock_seconds))
    reported: list[tuple[float, float]] = []
    data_ = type("Data", (), {})()
    monkeypatch.setattr(potential_training, "batch_sizes", lambda data: (100, 10, 2))
    data_.active = torch.ones(3, 4, dtype=torch.bool)  # d = 4
    work = potential_training.step_work(data_, pretraining=5)
    # a recursion step: 10 coalition rows x (1 + 2 children) + 2 examples x 5 rows
    assert work(0, 5) == 500 and work(5, 7) == 2 * 40 and work(3, 7) == 2 * 100 + 2 * 40
    clock = training_clock.TrainingClock(work, 12, "fit")
    clock.report = lambda left, per_step: reported.append((left, per_step))  # type: ignore[method-assign]
    for step in range(12):
        clock.step_done(step)
    # 3 s for 300 rows; left: step 4 (100 rows) and 7 recursion steps (280 rows)
    assert reported == [(pytest.approx(3.8), pytest.approx(1.0))]
    assert batching.AUTO_PROGRESS_SECONDS == 5.0


def test_the_potential_fit_beats_its_labels_and_the_per_example_default():
    # a random tanh MLP (not trained: the same game on any machine); 600 examples at 16
    # evaluations each: 0.31x the default's error and 0.23x the labels' on this seed
    # (0.31-0.71x and 0.23-0.72x on seeds 0-4)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1)).eval()
    x = torch.randn(600, 6, generator=torch.Generator().manual_seed(0))
    explainer = AmortizedShapley(model)
    report = explainer.fit(
        x, baselines=0.0, target=0, budget=16, epochs=40,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert report.label_estimator == "potential"
    assert report.exact_error is not None and report.default_exact_error is not None
    assert report.label_exact_error is not None
    assert report.exact_error < 0.6 * report.default_exact_error
    assert report.exact_error < 0.5 * report.label_exact_error
    assert report.beats_default
    test = torch.randn(30, 6, generator=torch.Generator().manual_seed(9))
    exact = ExactShapley(model).attribute(test, baselines=0.0, target=0)
    phi = explainer.attribute(test)
    assert float(((phi - exact).norm(dim=1) / exact.norm(dim=1)).mean()) < 0.05


def test_a_custom_potential_body_is_trained_saved_and_loaded():
    from captum_graphshap.amortized import ShapleyPotential

    class Body(nn.Module):  # masked inputs and presence -> one potential per row
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(10, 32), nn.SiLU(), nn.Linear(32, 1))

        def forward(self, masked: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
            return self.net(torch.cat([masked, present], dim=1))

    model = small_mlp()
    x = data(120)
    torch.manual_seed(0)
    explainer = AmortizedShapley(model, explainer=ShapleyPotential(Body()))
    report = explainer.fit(x, baselines=0.0, target=0, budget=12, epochs=3)
    assert report.label_estimator == "potential"
    phi = explainer.attribute(x[:4])
    with torch.no_grad():
        gap = model(x[:4])[:, 0] - model(torch.zeros(1, 5))[:, 0]
    torch.testing.assert_close(phi.sum(1), gap, atol=1e-5, rtol=0)
    loaded = AmortizedShapley(model, explainer=ShapleyPotential(Body()))
    loaded.load_state_dict(explainer.state_dict())
    assert torch.equal(loaded.attribute(x[:4]), phi)
    # the default potential network is rebuilt from its configuration alone
    default = fitted(model, x)
    rebuilt = AmortizedShapley(model)
    rebuilt.load_state_dict(default.state_dict())
    assert type(rebuilt.explainer).__name__ == "ShapleyPotential"
    assert torch.equal(rebuilt.attribute(x[:4]), default.attribute(x[:4]))


def test_a_large_fit_trains_two_potential_bodies_apart_and_explains_with_their_mean(
    monkeypatch,
):
    """From ENSEMBLE_EXAMPLES training examples the default body is a BodyEnsemble:
    member 0 is trained exactly as a single body would be (same initialisation and
    draws), member 1 from the draws after it; the explainer's values are the mean
    of the members' (phi is linear in the potential), efficient, and a saved state
    rebuilds it from its configuration."""
    from captum_graphshap.amortized import networks, potential_training
    from captum_graphshap.amortized.potential import ShapleyPotential

    model, x = small_mlp(), data(120)
    single = fitted(model, x)
    monkeypatch.setattr(networks, "ENSEMBLE_EXAMPLES", 50)
    pair = fitted(model, x)
    body = pair.explainer.body
    assert isinstance(body, networks.BodyEnsemble) and len(body.members) == 2
    first, second = potential_training.member_potentials(pair.explainer)
    assert first.body is body.members[0] and first.num_features == 5
    trained_alone = single.explainer.body.state_dict()
    for name, value in body.members[0].state_dict().items():
        torch.testing.assert_close(value, trained_alone[name], rtol=0, atol=0)
    probe = data(6, seed=3)
    with torch.no_grad():
        each = [view(probe) for view in (first, second)]
    assert not torch.allclose(each[0], each[1])
    with torch.no_grad():
        torch.testing.assert_close(pair.explainer(probe), (each[0] + each[1]) / 2)
    phi = pair.attribute(probe)
    with torch.no_grad():
        gap = model(probe)[:, 0] - model(torch.zeros(1, 5))[:, 0]
    torch.testing.assert_close(phi.sum(1), gap, atol=1e-5, rtol=0)
    rebuilt = AmortizedShapley(model)
    rebuilt.load_state_dict(pair.state_dict())
    assert isinstance(rebuilt.explainer, ShapleyPotential)
    assert isinstance(rebuilt.explainer.body, networks.BodyEnsemble)
    assert torch.equal(rebuilt.attribute(probe), phi)


def test_images_keep_one_potential_body_at_any_size(monkeypatch):
    """The two-body rule is for tabular inputs: an image's MLP body stays single."""
    from captum_graphshap.amortized import networks

    monkeypatch.setattr(networks, "ENSEMBLE_EXAMPLES", 10)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2)).eval()
    images = torch.randn(40, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    patches = (torch.arange(8)[:, None] // 4 * 2 + torch.arange(8)[None, :] // 4)[None, None]
    explainer = fitted(model, images, feature_mask=patches, epochs=1)
    assert isinstance(explainer.explainer.body, networks.PotentialMLP)


def test_the_members_steps_are_one_clock():
    """The work of members trained one after another: each member's steps in turn."""
    from captum_graphshap.amortized.potential_training import repeated

    def work(start: int, stop: int) -> float:  # steps 0-2 weigh 1, then 10
        return float(sum(1 if step < 3 else 10 for step in range(start, stop)))

    total = repeated(work, 5)  # members of 5 steps: 1, 1, 1, 10, 10, 1, 1, 1, 10, 10
    weights = [1, 1, 1, 10, 10] * 3
    for start in range(15):
        for stop in range(start, 16):
            assert total(start, stop) == sum(weights[start:stop])


def test_potential_refusals_come_before_any_model_call():
    model = Counting(small_mlp())
    x = data(60)
    plain = nn.Linear(5, 5)  # outputs the values themselves: not a potential
    with pytest.raises(ValueError, match="potential network"):
        AmortizedShapley(model, explainer=plain).fit(
            x, baselines=0.0, target=0, budget=12, label_estimator="potential"
        )
    with pytest.raises(ValueError, match="coalitions and their values"):
        AmortizedShapley(model).fit(
            x, baselines=0.0, target=0, budget=12, labels=torch.zeros(60, 5),
            label_estimator="potential",
        )  # fmt: skip
    assert model.rows == 0
    # a plain network still trains, by FastSHAP's objective unless told otherwise
    report = AmortizedShapley(model, explainer=plain).fit(
        x, baselines=0.0, target=0, budget=12, epochs=1
    )
    assert report.label_estimator == "fastshap"
