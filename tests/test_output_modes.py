"""Captum's output modes, for every class: multi-output models without a target,
and models that answer a whole batch with one value (aggregated mode).

Captum's ``ShapleyValues`` is the reference: same shapes, same values.
"""

from __future__ import annotations

import pytest
import torch
from captum.attr import ShapleyValues

import captum_graphshap as cg

torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]])

MODELS = {
    "two outputs per example": lambda x: NET(x),
    "scalar per batch": lambda x: NET(x).sum(),
    "python float per batch": lambda x: float(NET(x).sum()),
    "shape (1,) per batch": lambda x: NET(x).sum().reshape(1),
    "three values per batch": lambda x: torch.stack(
        [NET(x).sum(), NET(x)[:, 0].sum(), NET(x).max()]
    ),
}

EXACT = [cg.ExactShapley, cg.BivariateShapley, cg.ShapleyResiduals]
SAMPLED = [
    (cg.ShapleySampling, {"n_samples": 400, "antithetic": True}),
    (cg.PairedKernelShap, {"n_samples": 2000}),
    (cg.BayesShap, {"n_samples": 2000}),
]


@pytest.mark.parametrize("name", MODELS)
def test_exact_shapley_matches_captum_shapes_and_values(name):
    model = MODELS[name]
    with torch.no_grad():
        expected = ShapleyValues(model).attribute(X)
    got = cg.ExactShapley(model).attribute(X)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected.to(got.dtype), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("cls, options", SAMPLED, ids=[c.__name__ for c, _ in SAMPLED])
def test_sampled_classes_follow_the_same_modes(name, cls, options):
    model = MODELS[name]
    with torch.no_grad():
        expected = ShapleyValues(model).attribute(X)
    got = cls(model).attribute(X, generator=torch.Generator().manual_seed(0), **options)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected.to(got.dtype), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("name", MODELS)
def test_graph_methods_follow_the_same_modes(name):
    # on a line of 3 with k = 2 every ball is the whole set: L-Shapley is exact
    model = MODELS[name]
    with torch.no_grad():
        expected = ShapleyValues(model).attribute(X)
    got = cg.LShapley(model).attribute(X, k=2)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected.to(got.dtype), atol=1e-5, rtol=1e-5)


def test_multi_output_costs_the_evaluations_of_one_output():
    rows = []

    def counting(x):
        rows.append(x.shape[0])
        return NET(x)

    result = cg.ShapleySampling(counting).attribute(
        X, n_samples=10, generator=torch.Generator().manual_seed(1), return_evaluations=True
    )
    assert result.attributions.shape == (2, 2, 3)
    assert int(result.n_evaluations.sum()) == sum(rows)
    single = cg.ShapleySampling(NET).attribute(
        X, target=1, n_samples=10, generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(result.attributions[:, 1], single)


def test_aggregated_mode_calls_the_model_once_per_coalition_on_the_whole_batch():
    calls = []

    def batch_total(x):
        calls.append(x.shape[0])
        return NET(x).sum()

    out = cg.ExactShapley(batch_total).attribute(X)
    assert out.shape == (1, 3)
    assert set(calls[1:]) == {X.shape[0]}  # the first call detects the mode
    assert len(calls) == 1 + 2**3


def test_aggregated_mode_needs_a_shared_mask():
    with pytest.raises(ValueError, match="feature_mask must be shared"):
        cg.ExactShapley(lambda x: NET(x).sum()).attribute(
            X, feature_mask=torch.tensor([[0, 1, 2], [0, 0, 1]])
        )


class _CountingMultiOutput(torch.nn.Module):
    """Three outputs per example; counts the rows it is called on."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(7, 3)
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return torch.tanh(self.linear(x)) * x.sum(dim=1, keepdim=True)


def test_multi_output_models_are_evaluated_once_and_budgets_hold():
    """The call that finds several outputs is replayed, not evaluated (and counted) twice."""
    from captum_graphshap import ExactShapley, LShapley, ShapleySampling

    x = torch.randn(2, 7, generator=torch.Generator().manual_seed(1))
    cases = [
        (ExactShapley, {}),
        (LShapley, {"k": 1}),
        (ShapleySampling, {"budget": 48, "generator": torch.Generator().manual_seed(0)}),
    ]
    for cls, options in cases:
        model = _CountingMultiOutput()
        phi, evaluations = cls(model).attribute(x, return_evaluations=True, **options)
        assert phi.shape == (2, 3, 7)
        assert model.rows == int(evaluations.sum())
        if "budget" in options:
            assert int(evaluations.max()) <= 48
        for output in range(3):  # each output's values equal a run with that target
            single = dict(options)
            if "generator" in single:
                single["generator"] = torch.Generator().manual_seed(0)
            expected = cls(_CountingMultiOutput()).attribute(x, target=output, **single)
            torch.testing.assert_close(phi[:, output], expected)
