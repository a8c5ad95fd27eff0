"""ExactShapley against Captum's ShapleyValues, a float64 brute force, and the axioms."""

from __future__ import annotations

import pytest
import torch
from captum.attr import ShapleyValues
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import ExactShapley
from captum_graphshap.plans.linear import shapley_from_all_coalitions

from .optional_deps import optional
from .reference import TableGame, brute_shapley, mlp, model_game


class MultiOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 6))

    def forward(self, x):
        return self.net(x).reshape(-1, 2, 3)


class TupleModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x1, x2, scale=None, shift=0.0):
        h = torch.tanh(self.a(x1) + self.b(x2.flatten(1)))
        if scale is not None:
            h = h * scale[:, None]
        return self.out(h) + shift


def _captum(model, inputs, **kwargs):
    return ShapleyValues(model).attribute(inputs, **kwargs)


def _assert_like_captum(ours, theirs, inputs):
    if isinstance(inputs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(inputs)
        for a, b, x in zip(ours, theirs, inputs):
            assert a.shape == x.shape and a.dtype == x.dtype
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    else:
        assert isinstance(ours, torch.Tensor)
        assert ours.shape == inputs.shape and ours.dtype == inputs.dtype
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


torch.manual_seed(0)
X5 = torch.randn(3, 5)
X1 = torch.randn(3, 3)
X2 = torch.randn(3, 2, 2)

CAPTUM_CASES = {
    "tensor, no baseline, int target": (mlp(5), X5, dict(target=1)),
    "scalar baseline, tensor target": (
        mlp(5),
        X5,
        dict(baselines=0.5, target=torch.tensor([0, 2, 1])),
    ),
    "batch-1 baseline, list target": (
        mlp(5),
        X5,
        dict(baselines=torch.randn(1, 5), target=[2, 0, 1]),
    ),
    "batch-N baseline, 0-d tensor target": (
        mlp(5),
        X5,
        dict(baselines=torch.randn(3, 5), target=torch.tensor(2)),
    ),
    "tuple target into (N, 2, 3) output": (MultiOutput(), X5, dict(target=(1, 2))),
    "list of tuple targets": (MultiOutput(), X5, dict(target=[(0, 1), (1, 2), (1, 0)])),
    "grouping feature mask": (
        mlp(5),
        X5,
        dict(target=0, feature_mask=torch.tensor([[0, 1, 1, 2, 0]])),
    ),
    "tuple inputs, tuple baselines, shared ids": (
        TupleModel(),
        (X1, X2),
        dict(
            baselines=(0.1, torch.randn(1, 2, 2)),
            target=2,
            feature_mask=(torch.tensor([[0, 1, 2]]), torch.tensor([[[3, 3], [0, 4]]])),
        ),
    ),
    "additional forward args": (
        TupleModel(),
        (X1, X2),
        dict(
            target=1,
            additional_forward_args=(torch.rand(3) + 0.5, 0.3),
            feature_mask=(torch.tensor([[0, 1, 2]]), torch.tensor([[[3, 3], [4, 4]]])),
        ),
    ),
}


@pytest.mark.parametrize("case", list(CAPTUM_CASES))
def test_matches_captum_shapley_values(case):
    model, inputs, kwargs = CAPTUM_CASES[case]
    ours = ExactShapley(model).attribute(inputs, **kwargs)
    theirs = _captum(model, inputs, **kwargs)
    _assert_like_captum(ours, theirs, inputs)


def test_matches_captum_with_per_example_feature_mask():
    model = mlp(5)
    mask = torch.tensor([[0, 0, 1, 2, 3], [0, 1, 2, 3, 3], [3, 2, 1, 0, 0]])
    ours = ExactShapley(model).attribute(X5, target=0, feature_mask=mask)
    theirs = _captum(model, X5, target=0, feature_mask=mask)
    _assert_like_captum(ours, theirs, X5)


def test_matches_captum_on_torchvision_resnet_patches():
    torchvision = optional("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=5).eval()
    image = torch.rand(1, 3, 32, 32)
    patches = torch.arange(4).reshape(2, 2).repeat_interleave(16, 0).repeat_interleave(16, 1)
    mask = patches.reshape(1, 1, 32, 32)
    ours = ExactShapley(model).attribute(image, target=3, feature_mask=mask)
    theirs = _captum(model, image, target=3, feature_mask=mask, perturbations_per_eval=4)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=5e-6)


@pytest.mark.parametrize("ppe", [None, 1, 7])
def test_float64_brute_force_at_1e8(ppe):
    model = mlp(6, dtype=torch.float64, seed=5)
    x = torch.randn(2, 6, dtype=torch.float64)
    baseline = torch.randn(2, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 2, 2, 3, 4]])
    got = ExactShapley(model).attribute(
        x, baselines=baseline, target=1, feature_mask=mask, perturbations_per_eval=ppe
    )
    assert got.dtype == torch.float64
    for n in range(2):
        v = model_game(model, x[n], baseline[n], mask[0], target=1)
        want = torch.tensor(brute_shapley(v, 5), dtype=torch.float64)[mask[0]]
        torch.testing.assert_close(got[n], want, rtol=0, atol=1e-8)


def test_token_ids_with_embedding_model():
    torch.manual_seed(0)
    embedding = nn.Embedding(30, 4).double()
    head = nn.Linear(4, 1).double()

    def model(tokens):
        return head(torch.tanh(embedding(tokens)).sum(dim=1))

    tokens = torch.randint(1, 30, (2, 5))
    got = ExactShapley(model).attribute(tokens, baselines=0)
    assert got.shape == tokens.shape and got.is_floating_point()
    for n in range(2):
        v = model_game(model, tokens[n], torch.zeros(5, dtype=torch.long), torch.arange(5))
        torch.testing.assert_close(
            got[n].double(),
            torch.tensor(brute_shapley(v, 5), dtype=torch.float64),
            rtol=0,
            atol=1e-6,
        )


def test_references_average_over_a_background_set():
    model = mlp(4, dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64)
    refs = torch.randn(6, 4, dtype=torch.float64)
    got = ExactShapley(model).attribute(x, target=0, references=refs)
    # Shapley is linear in the game, and the averaged game is the mean game.
    per_ref = torch.stack(
        [ExactShapley(model).attribute(x, baselines=r[None], target=0) for r in refs]
    )
    torch.testing.assert_close(got, per_ref.mean(0), rtol=0, atol=1e-12)


def test_log_prob_value_sums_to_log_prob_gain():
    model = mlp(4, dtype=torch.float64)
    x = torch.randn(3, 4, dtype=torch.float64)
    got = ExactShapley(model).attribute(x, value="log_prob")
    log_p = torch.log_softmax(model(x), dim=1)
    predicted = log_p.argmax(dim=1)
    log_p0 = torch.log_softmax(model(torch.zeros(1, 4, dtype=torch.float64)), dim=1)[0]
    torch.testing.assert_close(
        got.sum(dim=1), log_p[torch.arange(3), predicted] - log_p0[predicted], rtol=0, atol=1e-10
    )


# --------------------------------------------------------------------- axioms
def _table(draw_values: list[float], d: int) -> torch.Tensor:
    return torch.tensor(draw_values[: 2**d], dtype=torch.float64)


def _explain_table(table: torch.Tensor) -> torch.Tensor:
    game = TableGame(table)
    ones = torch.ones(1, game.d, dtype=torch.float64)
    return ExactShapley(game).attribute(ones, baselines=0.0)[0]


tables = st.integers(min_value=1, max_value=6).flatmap(
    lambda d: st.lists(st.floats(-10, 10, allow_nan=False), min_size=2**d, max_size=2**d).map(
        lambda values: torch.tensor(values, dtype=torch.float64)
    )
)


@settings(max_examples=40, deadline=None)
@given(tables)
def test_efficiency(table):
    phi = _explain_table(table)
    assert abs(float(phi.sum()) - float(table[-1] - table[0])) < 1e-9


@settings(max_examples=40, deadline=None)
@given(tables, st.data())
def test_symmetry(table, data):
    d = table.numel().bit_length() - 1
    if d < 2:
        return
    i, j = data.draw(st.lists(st.integers(0, d - 1), min_size=2, max_size=2, unique=True))
    # Make the game symmetric in i and j: v(S) = v(S with i and j swapped).
    codes = torch.arange(2**d)
    bit_i, bit_j = (codes >> i) & 1, (codes >> j) & 1
    swapped = codes - (bit_i << i) - (bit_j << j) + (bit_i << j) + (bit_j << i)
    symmetric = (table + table[swapped]) / 2
    phi = _explain_table(symmetric)
    assert abs(float(phi[i] - phi[j])) < 1e-9


@settings(max_examples=40, deadline=None)
@given(tables, st.data())
def test_dummy(table, data):
    d = table.numel().bit_length() - 1
    k = data.draw(st.integers(0, d - 1))
    codes = torch.arange(2**d)
    without_k = codes & ~(1 << k)
    phi = _explain_table(table[without_k])  # v(S) = v(S - k)
    assert abs(float(phi[k])) < 1e-9


@settings(max_examples=30, deadline=None)
@given(tables, st.floats(-3, 3, allow_nan=False), st.integers(0, 2**31 - 1))
def test_linearity(table, scale, seed):
    other = torch.randn(
        table.numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    combined = _explain_table(scale * table + other)
    torch.testing.assert_close(
        combined, scale * _explain_table(table) + _explain_table(other), rtol=0, atol=1e-9
    )


@settings(max_examples=25, deadline=None)
@given(tables)
def test_estimator_matches_brute_force(table):
    d = table.numel().bit_length() - 1
    phi = shapley_from_all_coalitions(table[None])[0]
    game = TableGame(table)
    want = brute_shapley(lambda s: game.value(s), d)
    torch.testing.assert_close(phi, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-9)


@pytest.mark.parametrize("dense_limit", [0, 16], ids=["hypercube-pairing", "cached-matrix"])
def test_both_estimator_paths_match_brute_force(dense_limit, monkeypatch):
    import captum_graphshap.plans.linear as estimators

    monkeypatch.setattr(estimators, "DENSE_SHAPLEY_MAX_D", dense_limit)
    table = torch.randn(2**7, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    game = TableGame(table)
    phi = estimators.shapley_from_all_coalitions(torch.stack([table, 2 * table]))
    want = torch.tensor(brute_shapley(game.value, 7), dtype=torch.float64)
    torch.testing.assert_close(phi, torch.stack([want, 2 * want]), rtol=0, atol=1e-12)
