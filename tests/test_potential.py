"""The Shapley potential (amortized/potential.py): its recursion, the explainer built on it,
and the sampled coalition rows it is trained on, against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import ExactShapley
from captum_graphshap.amortized.coalition_rows import design, sampled_rows
from captum_graphshap.amortized.potential import (
    ShapleyPotential,
    children,
    masked_inputs,
    recursion_residuals,
)
from captum_graphshap.engine.coalition_game import prepare_game


def game_model(d: int, seed: int) -> nn.Module:
    """A small tanh MLP with interactions of every order."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, 1)).double().eval()


class ExactPotentialBody(nn.Module):
    """Hart and Mas-Colell's potential of each masked input's game, by enumeration:
    ``P(A) = sum_{S subset A, S nonempty} (|S| - 1)! (|A| - |S|)! / |A|! (v(S) - v(empty))``."""

    def __init__(self, model: nn.Module, d: int) -> None:
        super().__init__()
        self.model, self.d = model, d

    def forward(self, masked: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        empty = self.model(torch.zeros(1, self.d, dtype=masked.dtype))[0, 0]
        out = []
        for row, mask in zip(masked, present.bool()):
            members = mask.nonzero()[:, 0].tolist()
            a, total = len(members), torch.zeros((), dtype=masked.dtype)
            for size in range(1, a + 1):
                weight = math.factorial(size - 1) * math.factorial(a - size) / math.factorial(a)
                for subset in itertools.combinations(members, size):
                    keep = torch.zeros(self.d, dtype=torch.bool)
                    keep[list(subset)] = True
                    value = self.model(torch.where(keep, row, 0.0)[None])[0, 0]
                    total = total + weight * (value - empty)
            out.append(total)
        return torch.stack(out)[:, None]


def bound(body: nn.Module, d: int) -> ShapleyPotential:
    potential = ShapleyPotential(body)
    potential.bind([torch.arange(d)[None]], [torch.zeros(1, 1, d, dtype=torch.float64)], [(d,)], d)
    return potential


@settings(max_examples=10, deadline=None)
@given(d=st.integers(1, 5), seed=st.integers(0, 99))
def test_differences_of_the_exact_potential_are_the_shapley_values(d, seed):
    model = game_model(d, seed)
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    phi = bound(ExactPotentialBody(model, d), d)(x)[..., 0]
    exact = ExactShapley(model).attribute(x, baselines=0.0, target=0)
    torch.testing.assert_close(phi, exact, atol=1e-10, rtol=0)


@settings(max_examples=10, deadline=None)
@given(d=st.integers(1, 5), seed=st.integers(0, 99))
def test_the_exact_potential_leaves_no_recursion_residual(d, seed):
    model = game_model(d, seed)
    potential = bound(ExactPotentialBody(model, d), d)
    x = torch.randn(2, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    every = torch.tensor(list(itertools.product([False, True], repeat=d)))[1:]  # non-empty
    example = torch.arange(2).repeat_interleave(len(every))
    present = every.repeat(2, 1)
    parent, child = children(present)
    both = potential.potentials(
        (x,), torch.cat([example, example[parent]]), torch.cat([present, child])
    )
    values = model(torch.where(present, x[example], 0.0)) - model(torch.zeros(1, d, dtype=x.dtype))
    residuals = recursion_residuals(both[: len(present)], both[len(present) :], parent, values)
    torch.testing.assert_close(residuals, torch.zeros_like(residuals), atol=1e-10, rtol=0)
    # and a wrong potential leaves one: the game itself is its potential only if additive
    wrong = recursion_residuals(values, values[parent] * 0 + 1, parent, values)
    assert float(wrong.detach().abs().max()) > 1e-3


def test_children_drop_each_present_feature_once():
    present = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    parent, child = children(present)
    assert parent.tolist() == [0, 0, 2, 2, 2]
    assert child.tolist() == [
        [False, False, True], [True, False, False],
        [False, True, True], [True, False, True], [True, True, False],
    ]  # fmt: skip


def test_masked_inputs_put_absent_features_at_the_baseline_elementwise():
    image = torch.arange(2 * 1 * 2 * 2, dtype=torch.float32).view(2, 1, 2, 2) + 1
    mask = torch.tensor([[[[0, 1], [0, 1]]]])
    baseline = torch.full((1, 1, 2, 2), -1.0)
    out = masked_inputs(
        (image,),
        (mask,),
        (baseline,),
        torch.tensor([1, 0]),
        torch.tensor([[True, False], [False, True]]),
    )[0]
    assert out[0, 0].tolist() == [[5.0, -1.0], [7.0, -1.0]]
    assert out[1, 0].tolist() == [[-1.0, 2.0], [-1.0, 4.0]]


def test_a_feature_at_its_baseline_gets_exactly_zero_from_any_body():
    body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    wrapped = lambda masked, present: body(torch.cat([masked, present], 1))  # noqa: E731
    potential = ShapleyPotential(LambdaBody(wrapped))
    potential.bind([torch.arange(4)[None]], [torch.zeros(1, 1, 4)], [(4,)], 4)
    x = torch.randn(5, 4)
    x[:, 2] = 0.0
    phi = potential(x)
    assert bool((phi[:, 2] == 0).all()) and bool((phi[:, [0, 1, 3]] != 0).all())


class LambdaBody(nn.Module):
    def __init__(self, function) -> None:
        super().__init__()
        self.function = function

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.function(*inputs)


@pytest.mark.parametrize("d, evaluations", [(3, 8), (4, 16), (6, 20), (10, 64)])
def test_the_design_spends_the_budget_in_complementary_pairs(d, evaluations):
    coalitions, weights = design(
        50, d, evaluations, torch.Generator().manual_seed(0), torch.device("cpu")
    )
    count = coalitions.shape[1]
    assert count <= evaluations
    assert bool((coalitions[:, 0] == False).all()) and bool(coalitions[:, 1].all())  # noqa: E712
    if 2**d <= evaluations:  # every coalition once
        assert count == 2**d
        assert len({tuple(c.tolist()) for c in coalitions[0]}) == 2**d
    else:
        pairs = (count - 2) // 2
        torch.testing.assert_close(
            coalitions[:, 2 : 2 + pairs], ~coalitions[:, 2 + pairs :], rtol=0, atol=0
        )
        sizes = coalitions[:, 2 : 2 + pairs].sum(2)
        assert int(sizes.min()) >= 1 and int(sizes.max()) <= d - 1
        assert len(set(sizes.flatten().tolist())) == d - 1  # every size drawn
        # each example its own draws
        assert not torch.equal(coalitions[0], coalitions[1])
    assert float(weights[..., :2].abs().max()) == 0.0


def test_the_fastshap_weights_make_the_design_the_shapley_kernel():
    # sizes uniform on 1..d-1, weights ~ 1 / (k (d - k)) (mean one per example): weighted,
    # the design's sizes follow the kernel's mass, ~ 1 / (k (d - k))
    d = 8
    coalitions, weights = design(
        20000, d, 30, torch.Generator().manual_seed(1), torch.device("cpu")
    )
    sizes = coalitions[:, 2:].sum(2)
    share = torch.bincount(sizes.flatten(), minlength=d + 1)[1:d].double() / sizes.numel()
    torch.testing.assert_close(share, torch.full_like(share, 1 / (d - 1)), atol=3e-3, rtol=0)
    scaled = weights[:, 2:] * sizes * (d - sizes)
    torch.testing.assert_close(scaled, scaled[:, :1].expand_as(scaled), atol=1e-12, rtol=0)
    torch.testing.assert_close(weights[:, 2:].mean(1), torch.ones(20000, dtype=torch.float64))


def test_sampled_rows_hold_the_centred_values_of_their_coalitions():
    model = game_model(5, 3)
    x = torch.randn(4, 5, dtype=torch.float64)
    game, _ = prepare_game(model, x, 0.0, 0)
    rows = sampled_rows(game, 20, torch.Generator().manual_seed(2))
    example = torch.arange(4).repeat_interleave(rows.coalitions.shape[1])
    flat = rows.coalitions.reshape(-1, 5)
    expected = model(torch.where(flat, x[example], 0.0)) - model(torch.zeros(1, 5, dtype=x.dtype))
    torch.testing.assert_close(rows.values.reshape(-1, 1), expected, atol=1e-12, rtol=0)
    assert int(game.evaluations.max()) <= 20


def potential_data_of(model: nn.Module, x: torch.Tensor, evaluations: int, seed: int = 0):
    from captum_graphshap.amortized.potential_training import PotentialData

    game, _ = prepare_game(model, x, 0.0, 0)
    rows = sampled_rows(game, evaluations, torch.Generator().manual_seed(seed))
    return PotentialData((x,), rows, (x != 0).bool(), None)


def test_the_recursion_loss_vanishes_at_the_exact_potential_only():
    from captum_graphshap.amortized.potential_training import recursion_loss

    d = 4
    model = game_model(d, 5)
    x = torch.randn(6, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    data = potential_data_of(model, x, 10)
    generator = torch.Generator().manual_seed(0)
    exact = recursion_loss(bound(ExactPotentialBody(model, d), d), data, 1.0, generator)
    assert float(exact.detach()) < 1e-20
    # the game as its own potential is right for additive games only
    game_as_potential = bound(
        LambdaBody(lambda masked, present: model(masked) - model(0 * masked[:1])), d
    )
    assert float(recursion_loss(game_as_potential, data, 1.0, generator).detach()) > 1e-6


def test_the_example_loss_is_fastshaps_weighted_error_at_the_examples():
    from captum_graphshap.amortized.potential_training import EXAMPLE_BATCH, example_loss

    d = 5
    model = game_model(d, 2)
    x = torch.randn(8, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    data = potential_data_of(model, x, 14)
    network = bound(LambdaBody(lambda masked, present: (masked**2).sum(1, keepdim=True)), d)
    loss = example_loss(network, data, 1.0, torch.Generator().manual_seed(3))
    picked = torch.randint(8, (EXAMPLE_BATCH,), generator=torch.Generator().manual_seed(3))
    raw = network(x[picked])[..., 0]
    gap = data.rows.values[picked, 1, 0]
    phi = raw + ((gap - raw.sum(1)) / d)[:, None]  # every feature is off the baseline
    predicted = (data.rows.coalitions[picked].double() * phi[:, None]).sum(2)
    squared = (data.rows.values[picked, :, 0] - predicted) ** 2
    expected = (data.rows.weights[picked] * squared).mean()
    torch.testing.assert_close(loss, expected, atol=1e-12, rtol=1e-10)


def test_the_default_steps_grow_with_the_square_root_of_the_rows():
    from captum_graphshap.amortized import potential_training as training

    model = game_model(4, 1)

    def steps(examples: int, evaluations: int) -> int:
        x = torch.randn(examples, 4, dtype=torch.float64)
        return training.default_steps(potential_data_of(model, x, evaluations))

    reference = training.REFERENCE_ROWS
    # 16 evaluations at d = 4: every coalition, 15 non-empty rows an example
    examples = reference // 15
    assert abs(steps(examples, 16) - training.POTENTIAL_STEPS) <= 1
    assert abs(steps(4 * examples, 16) - 2 * training.POTENTIAL_STEPS) <= 1
    assert steps(10, 16) == training.MIN_POTENTIAL_STEPS
    assert steps(10 * examples, 16) == training.MAX_POTENTIAL_STEPS  # sqrt(10) x 12,000


def test_large_inputs_reach_the_body_in_chunks_and_small_steps(monkeypatch):
    from captum_graphshap.amortized import potential as potential_module
    from captum_graphshap.amortized import potential_training as training

    d = 6
    model = game_model(d, 2)
    x = torch.randn(9, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    seen: list[int] = []
    layer = nn.Linear(2 * d, 1).double()

    def body(masked, present):
        seen.append(len(masked))
        return layer(torch.cat([masked, present], 1))

    potential = bound(LambdaBody(body), d)
    whole = potential(x)
    monkeypatch.setattr(potential_module, "BODY_ELEMENTS", 5 * d)  # 5 rows a body call
    seen.clear()
    torch.testing.assert_close(potential(x), whole, rtol=0, atol=1e-12)
    assert max(seen) == 5 and sum(seen) == 9 * (d + 1) + 1  # and the baseline's row
    # a step's batches shrink to keep STEP_ELEMENTS, never below one
    data = potential_data_of(model, x, 20)
    assert training.batch_sizes(data) == (4 * training.ROW_BATCH, training.ROW_BATCH, 32)
    monkeypatch.setattr(training, "STEP_ELEMENTS", 40 * d)  # 40 network rows
    assert training.batch_sizes(data) == (40, 10, 5)
    monkeypatch.setattr(training, "STEP_ELEMENTS", d)
    assert training.batch_sizes(data) == (1, 1, 1)
    generator = torch.Generator().manual_seed(0)
    assert torch.isfinite(training.recursion_loss(potential, data, 1.0, generator))
