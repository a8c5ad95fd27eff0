"""A contract fuzzer for AmortizedShapley: random layouts, targets and label estimators.

Each example draws a layout (a vector, a tuple of two tensors, an image with a
patch mask, token ids), a model with one or three outputs, a target form (an
index, one per example, or every output), a label estimator and a budget, fits
on a few dozen examples for one epoch, and asserts what ``attribute`` promises
whatever the fit's accuracy: Captum's shapes, efficiency to 1e-5, exact zeros
for features at their baseline, the same values after a ``state_dict`` round
trip, and a refusal before any model call for inputs of another shape.
``GRAPHSHAP_FUZZ_EXAMPLES=N`` runs N random examples instead of the
derandomised few.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import AmortizedShapley

from .test_fuzz import FUZZ

COUNT = 48  # training examples: at least 40 (fit's minimum)


class Model(nn.Module):
    """``outputs`` outputs of any layout: a tanh MLP over the flattened (embedded) inputs."""

    def __init__(self, layout: str, elements: int, outputs: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layout, self.rows = layout, 0
        self.embedding = nn.Embedding(9, 2) if layout == "tokens" else None
        width = 2 * elements if layout == "tokens" else elements
        self.net = nn.Sequential(nn.Linear(width, 12), nn.Tanh(), nn.Linear(12, outputs))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.rows += inputs[0].shape[0]
        if self.embedding is not None:
            flat = self.embedding(inputs[0]).flatten(1)
        else:
            flat = torch.cat([t.flatten(1) for t in inputs], dim=1)
        return self.net(flat)


def layout_data(layout: str, count: int, seed: int):
    """Inputs (a tuple), the mask (or None), a baseline per tensor, the number of features."""
    g = torch.Generator().manual_seed(seed)
    if layout == "vector":
        return (torch.randn(count, 5, generator=g),), None, (0.0,), 5
    if layout == "tuple":
        inputs = (torch.randn(count, 2, generator=g), torch.randn(count, 2, 3, generator=g))
        masks = (torch.tensor([[0, 1]]), torch.tensor([[[2, 2, 2], [3, 3, 3]]]))
        return inputs, masks, (0.0, 0.0), 4
    if layout == "image":
        rows = torch.arange(4) // 2
        mask = (rows[:, None] * 2 + rows[None, :])[None, None]
        return (torch.rand(count, 1, 4, 4, generator=g),), mask, (0.0,), 4
    return (torch.randint(1, 9, (count, 5), generator=g),), None, (0,), 5


def per_feature(attributions: tuple[torch.Tensor, ...], masks, d: int) -> torch.Tensor:
    """``(N, ..., d)``: each feature's value (read at its first element)."""
    flat = torch.cat([a.flatten(start_dim=a.dim() - t) for a, t in attributions], dim=-1)
    if masks is None:
        return flat
    ids = torch.cat([m.flatten() for m in masks])
    first = torch.stack([(ids == k).nonzero()[0, 0] for k in range(d)])
    return flat[..., first]


@FUZZ
@given(
    layout=st.sampled_from(["vector", "tuple", "image", "tokens"]),
    target_form=st.sampled_from(["index", "per example", "every output"]),
    estimator=st.sampled_from([None, "fastshap", "kernel", "permutation", "regression_mc"]),
    extra=st.integers(0, 10),
    null=st.booleans(),
    seed=st.integers(0, 999),
)
def test_the_explainer_keeps_the_contract_on_random_layouts(
    layout, target_form, estimator, extra, null, seed
):
    inputs, masks, baselines, d = layout_data(layout, COUNT + 4, seed)
    outputs = 1 if target_form == "index" and seed % 2 else 3
    model = Model(layout, sum(t[0].numel() for t in inputs), outputs, seed)
    train, test = tuple(t[:COUNT] for t in inputs), tuple(t[COUNT:] for t in inputs)
    if null:  # the first test example's feature 0 at its baseline, every element of it
        first = test[0][0].view(-1)
        ids = masks[0].reshape(-1) if masks is not None else torch.arange(first.numel())
        first[ids.expand(first.numel()) == 0] = baselines[0]
    target = {"index": outputs - 1, "per example": None, "every output": None}[target_form]
    fit_target = torch.arange(COUNT) % 3 if target_form == "per example" else target
    test_target = torch.arange(4) % 3 if target_form == "per example" else target
    given_inputs = train if len(train) > 1 else train[0]
    explainer = AmortizedShapley(model, feature_mask=masks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explainer.fit(
            given_inputs, baselines=baselines if len(train) > 1 else baselines[0],
            target=fit_target, budget=2 * d + 2 + extra, epochs=1, label_estimator=estimator,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip
    call = test if len(test) > 1 else test[0]
    phi = explainer.attribute(call, target=test_target)
    parts = phi if isinstance(phi, tuple) else (phi,)
    every = target_form == "every output"
    for part, tensor in zip(parts, test):
        assert part.shape == ((4, 3) if every else (4,)) + tuple(tensor.shape[1:])
        assert part.is_floating_point() and bool(torch.isfinite(part).all())
    values = per_feature(tuple((p, t.dim() - 1) for p, t in zip(parts, test)), masks, d)
    with torch.no_grad():
        reference = tuple(torch.full_like(t[:1], b) for t, b in zip(test, baselines))
        gap = model(*test) - model(*reference)
    if target_form == "per example":
        gap = gap.gather(1, test_target[:, None])[:, 0]
    elif not every:
        gap = gap[:, target]
    torch.testing.assert_close(values.sum(-1).double(), gap.double(), atol=1e-5, rtol=0)
    if null:
        assert bool((values[0, ..., 0] == 0).all())
    loaded = AmortizedShapley(model, feature_mask=masks)
    loaded.load_state_dict(explainer.state_dict())
    again = loaded.attribute(call, target=test_target)
    for first, second in zip(parts, again if isinstance(again, tuple) else (again,)):
        assert torch.equal(first, second)
    model.rows = 0
    wrong = tuple(torch.cat([t, t[:, :1]], dim=1) for t in test)
    with pytest.raises((ValueError, TypeError)):
        explainer.attribute(wrong if len(wrong) > 1 else wrong[0], target=test_target)
    assert model.rows == 0
