"""SHEAR: cross-contributions against dense Hessians, Eq. (14) against brute force."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shear import Shear
from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.plans.cross_contributions import select_cooperators
from captum_graphshap.plans.shear import shear_coalitions, shear_estimates

from .reference import CallCounter, brute_shapley, model_game


def softplus_mlp(d: int, seed: int = 0, hidden: int = 12) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, hidden), nn.Softplus(), nn.Linear(hidden, 3)).double()


class TwoInputs(nn.Module):
    """A smooth model of a tuple input: interactions within and across tensors."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Linear(4, 6).double()
        self.b = nn.Linear(3, 6).double()
        self.head = nn.Linear(6, 2).double()

    def forward(self, x1, x2):
        return self.head(torch.tanh(self.a(x1) * self.b(x2)))


class TripleProducts(nn.Module):
    """f(x) = x0 x1 x2 + x3 x4 x5 + ...: each feature interacts with two others only."""

    def forward(self, x):
        return x.view(x.shape[0], -1, 3).prod(dim=2).sum(dim=1)


def dense_eta(model, x, baseline, masks, target, d):
    """eta_ij = |delta_i^T (H + H^T) delta_j| from torch.autograd.functional.hessian."""
    inputs = x if isinstance(x, tuple) else (x,)
    baselines = baseline if isinstance(baseline, tuple) else (baseline,)
    masks = masks if isinstance(masks, tuple) else (masks,)
    sizes = [t[0].numel() for t in inputs]
    out = []
    for n in range(inputs[0].shape[0]):
        flat = torch.cat([t[n].reshape(-1) for t in inputs])

        def f(z, n=n):
            parts = torch.split(z, sizes)
            rows = tuple(p.view(1, *t.shape[1:]) for p, t in zip(parts, inputs))
            return model(*rows)[0, target]

        hessian = torch.autograd.functional.hessian(f, flat)
        delta = torch.cat([(t[n] - b[0]).reshape(-1) for t, b in zip(inputs, baselines)])
        ids = torch.cat([m[0].expand(t.shape[1:]).reshape(-1) for m, t in zip(masks, inputs)])
        directions = torch.zeros(d, flat.numel(), dtype=torch.float64)
        directions[ids, torch.arange(flat.numel())] = delta
        out.append((directions @ (hessian + hessian.T) @ directions.T).abs())
    return torch.stack(out)


def test_cross_contributions_match_dense_hessian_with_grouped_features():
    model = softplus_mlp(6)
    x = torch.randn(3, 6, dtype=torch.float64)
    baseline = torch.randn(1, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 2, 2, 3]])
    eta = Shear(model).cross_contributions(x, baseline, target=2, feature_mask=mask)
    assert eta.shape == (3, 4, 4)
    torch.testing.assert_close(
        eta, dense_eta(model, x, baseline, mask, 2, 4), rtol=1e-9, atol=1e-12
    )


def test_cross_contributions_of_tuple_inputs_with_a_mask_spanning_both():
    model = TwoInputs()
    x = (torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64))
    baseline = (
        torch.zeros(1, 4, dtype=torch.float64),
        torch.full((1, 3), 0.5, dtype=torch.float64),
    )
    masks = (torch.tensor([[0, 1, 1, 2]]), torch.tensor([[3, 0, 4]]))
    eta = Shear(model).cross_contributions(x, baseline, target=1, feature_mask=masks)
    torch.testing.assert_close(
        eta, dense_eta(model, x, baseline, masks, 1, 5), rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("n_samples", [32, 64])
def test_budget_of_two_to_the_d_is_exact_shapley(n_samples):
    model = softplus_mlp(5, seed=3)
    x = torch.randn(4, 5, dtype=torch.float64)
    got = Shear(model).attribute(x, target=0, n_samples=n_samples)
    want = ExactShapley(model).attribute(x, target=0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_exact_when_every_interaction_partner_is_a_cooperator():
    # d = 9 in three triples; N = 8 gives log2(8/2) = 2 cooperators: the
    # partners, which eta finds, and the random others do not interact.
    model = TripleProducts()
    x = torch.randn(5, 9, dtype=torch.float64) + 1.0
    baseline = torch.randn(1, 9, dtype=torch.float64)
    shear = Shear(model)
    eta = shear.cross_contributions(x, baseline)
    partners = select_cooperators(eta, 2).sort(dim=2).values
    triples = torch.arange(9).view(3, 3)
    for i in range(9):
        expected = [j for j in triples[i // 3].tolist() if j != i]
        assert partners[:, i].tolist() == [expected] * 5
    got = shear.attribute(x, baseline, n_samples=8, generator=torch.Generator().manual_seed(0))
    for n in range(5):
        v = model_game(model, x[n], baseline[0], torch.arange(9))
        torch.testing.assert_close(
            got[n], torch.tensor(brute_shapley(v, 9), dtype=torch.float64), rtol=0, atol=1e-12
        )


def test_eq_14_by_hand_on_a_table_game():
    """The estimator applied to a hand-enumerated plan equals Eq. (14) written out."""
    d, m = 5, 2
    generator = torch.Generator().manual_seed(4)
    table = torch.randn(2**d, dtype=torch.float64, generator=generator)
    cooperators = torch.tensor([[[1, 2], [0, 4], [3, 0], [2, 1], [0, 3]]])
    plan = shear_coalitions(cooperators, antithetic=True, generator=generator)
    codes = (plan.long() * (2 ** torch.arange(d))).sum(-1)  # (1, d, 2^m, 2)
    estimate = shear_estimates(table[codes])
    for i in range(d):
        total = 0.0
        for s in range(2**m):
            subset = {cooperators[0, i, b].item() for b in range(m) if s >> b & 1}
            present = {j for j in range(d) if plan[0, i, s, 0, j]} - subset
            assert i not in present and not present & set(cooperators[0, i].tolist())
            without = sum(2**j for j in subset | present)
            weight = 1.0 / ((m + 1) * math.comb(m, len(subset)))
            total += weight * float(table[without + 2**i] - table[without])
        assert estimate[0, i].item() == pytest.approx(total, abs=1e-12)


def test_antithetic_pairs_give_complementary_non_cooperators():
    batch, d, m = 3, 7, 2
    eta = torch.rand(batch, d, d, generator=torch.Generator().manual_seed(0))
    cooperators = select_cooperators(eta + eta.transpose(1, 2), m)
    plan = shear_coalitions(cooperators, True, torch.Generator().manual_seed(1))
    assert plan.shape == (batch, d, 2**m, 2, d)
    eye = torch.eye(d, dtype=torch.bool)
    assert torch.equal(plan[..., 1, :], plan[..., 0, :] | eye[None, :, None, :])
    assert not plan[..., 0, :][eye[None, :, None, :].expand(batch, d, 2**m, d)].any()
    chosen = torch.zeros(batch, d, d, dtype=torch.bool)
    chosen.scatter_(2, cooperators, True)
    others = ~chosen & ~eye
    for s in range(2**m):
        complement = 2**m - 1 - s
        a = plan[:, :, s, 0] & others
        b = plan[:, :, complement, 0] & others
        assert torch.equal(a ^ b, others) and not (a & b).any()
        assert torch.equal(plan[:, :, s, 0] & chosen | plan[:, :, complement, 0] & chosen, chosen)
    independent = shear_coalitions(cooperators, False, torch.Generator().manual_seed(1))
    pair_sums = (independent[:, :, 0, 0] & others) ^ (independent[:, :, 3, 0] & others)
    assert not torch.equal(pair_sums, others)


def test_reproducible_with_a_generator_and_random_without_one():
    model = softplus_mlp(8, seed=5)
    x = torch.randn(3, 8, dtype=torch.float64)
    shear = Shear(model)
    first = shear.attribute(x, target=1, generator=torch.Generator().manual_seed(7))
    again = shear.attribute(x, target=1, generator=torch.Generator().manual_seed(7))
    other = shear.attribute(x, target=1, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_accuracy_improves_with_the_budget_and_beats_random_cooperators():
    model = softplus_mlp(10, seed=2, hidden=24)
    x = torch.randn(30, 10, dtype=torch.float64) * 2
    exact = ExactShapley(model).attribute(x, target=0)
    errors = []
    for n in (4, 16, 64):
        got = Shear(model).attribute(
            x, target=0, n_samples=n, generator=torch.Generator().manual_seed(0)
        )
        errors.append((got - exact).abs().sum(1).mean().item())
    assert errors[0] > errors[1] > errors[2]


def relu_blocks_mlp(blocks: int, size: int = 3, seed: int = 0) -> nn.Module:
    """A ReLU MLP whose hidden units each see one block of features.

    Features interact within their block only. Blocks of three: with pairs,
    antithetic sampling is exact whatever the cooperators (a non-cooperating
    partner is present in exactly one of two complementary terms).
    """
    generator = torch.Generator().manual_seed(seed)
    hidden = 8
    first = nn.Linear(size * blocks, hidden * blocks).double()
    weight = torch.zeros(hidden * blocks, size * blocks, dtype=torch.float64)
    for b in range(blocks):
        weight[b * hidden : (b + 1) * hidden, size * b : size * (b + 1)] = torch.randn(
            hidden, size, generator=generator, dtype=torch.float64
        )
    last = nn.Linear(hidden * blocks, 1).double()
    with torch.no_grad():
        first.weight.copy_(weight)
        first.bias.copy_(0.3 * torch.randn(hidden * blocks, generator=generator))
        last.weight.copy_(torch.randn(1, hidden * blocks, generator=generator, dtype=torch.float64))
    return nn.Sequential(first, nn.ReLU(), last)


def test_relu_network_warns_and_gradient_fallback_beats_random_cooperators():
    d = 9
    model = relu_blocks_mlp(3)
    x = torch.randn(40, d, dtype=torch.float64)
    shear = Shear(model)
    with pytest.warns(UserWarning, match="arbitrary"):
        eta = shear.cross_contributions(x, kind="hessian")
    assert torch.count_nonzero(eta) == 0  # ReLU: the Hessian vanishes
    with pytest.warns(UserWarning, match="piecewise-linear"):
        auto = shear.attribute(
            x, n_samples=8, estimator="paper", generator=torch.Generator().manual_seed(0)
        )
    gradient = shear.attribute(
        x,
        n_samples=8,
        estimator="paper",
        cross_contribution="gradient",
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(auto, gradient)
    exact = ExactShapley(model).attribute(x)
    fallback_error = (gradient - exact).abs().sum(1)

    # the same estimator with two random cooperators per feature
    game, _ = prepare_game(model, x)
    generator = torch.Generator().manual_seed(1)
    scores = torch.rand(40, d, d, generator=generator, dtype=torch.float64)
    plan = shear_coalitions(select_cooperators(scores, 2), True, generator)
    rows = torch.arange(40).repeat_interleave(plan[0].numel() // d)
    values = game.evaluate_rows(rows, plan.reshape(-1, d)).view(*plan.shape[:-1])
    random_error = (shear_estimates(values) - exact).abs().sum(1)
    assert fallback_error.mean() < 0.5 * random_error.mean()
    # where the gradient reveals both partners of every feature, the estimate is exact
    chosen = select_cooperators(shear.cross_contributions(x, kind="gradient"), 2).sort(2).values
    partners = torch.tensor(
        [[j for j in range(3 * (i // 3), 3 * (i // 3) + 3) if j != i] for i in range(d)]
    )
    found = (chosen == partners).all(dim=2).all(dim=1)
    assert found.sum() >= 10
    torch.testing.assert_close(gradient[found], exact[found], rtol=0, atol=1e-12)


def test_hessian_mode_on_relu_warns_that_cooperators_are_arbitrary():
    model = relu_blocks_mlp(2)
    with pytest.warns(UserWarning, match="arbitrary"):
        Shear(model).attribute(
            torch.randn(2, 6, dtype=torch.float64), cross_contribution="hessian", n_samples=4
        )


def test_float32_images_with_patches_and_progress(capsys):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.Softplus(), nn.Flatten(), nn.Linear(3 * 36, 4)
    )
    x = torch.randn(2, 1, 6, 6)
    mask = (torch.arange(6)[:, None] // 3 * 2 + torch.arange(6)[None, :] // 3).view(1, 1, 6, 6)
    got = Shear(model).attribute(x, target=3, feature_mask=mask, n_samples=16, show_progress=True)
    want = ExactShapley(model).attribute(x, target=3, feature_mask=mask)
    assert got.dtype == torch.float32 and got.shape == x.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert "Shear" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:the Hessian cross-contributions")  # saturated tanh
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    log_n=st.integers(2, 4),
    dummy=st.integers(0, 5),
)
def test_a_dummy_feature_gets_exactly_zero(seed, log_n, dummy):
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(6, generator=generator, dtype=torch.float64)
    weights[dummy] = 0.0
    pair = torch.randn(6, 6, generator=generator, dtype=torch.float64)
    pair[dummy] = 0.0
    pair[:, dummy] = 0.0

    def model(x):
        return x @ weights + torch.tanh(((x @ pair) * x).sum(1))

    x = torch.randn(3, 6, generator=generator, dtype=torch.float64)
    # Eq. (14) (a difference of the same coalition with and without the
    # feature); the regression estimator gives a dummy only approximately 0
    got = Shear(model).attribute(x, n_samples=2**log_n, estimator="paper", generator=generator)
    # zero up to the rounding of the matmul, whose summation order may vary
    assert torch.all(got[:, dummy].abs() <= 1e-12)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_samples": 12}, ValueError, "power of two.*8 or 16"),
        ({"n_samples": 2}, ValueError, "n_samples must be >= 4"),
        ({"n_samples": 16.0}, TypeError, "n_samples must be an int"),
        ({"cross_contribution": "fisher"}, ValueError, "cross_contribution"),
        ({"antithetic": "yes"}, TypeError, "antithetic"),
        ({"generator": 3}, TypeError, "torch.Generator"),
        ({"target": [0, 1, 2]}, ValueError, "target"),
    ],
)
def test_bad_options_fail_before_any_model_call(kwargs, error, match):
    model = CallCounter(softplus_mlp(4))
    with pytest.raises(error, match=match):
        Shear(model).attribute(torch.randn(2, 4, dtype=torch.float64), **kwargs)
    assert model.calls == 0


def test_token_ids_are_refused_with_a_suggestion():
    model = CallCounter(nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(20, 1)))
    tokens = torch.randint(1, 10, (2, 5))
    with pytest.raises(TypeError, match="ShapleySampling"):
        Shear(model).attribute(tokens, baselines=0)
    with pytest.raises(TypeError, match="gradients"):
        Shear(model).cross_contributions(tokens, baselines=0)
    assert model.calls == 0


def test_a_plan_above_the_limit_is_refused_with_its_count():
    model = CallCounter(nn.Linear(100, 1).double())
    with pytest.raises(ValueError, match="3,276,800 coalitions"):
        Shear(model).attribute(torch.randn(1, 100, dtype=torch.float64), n_samples=2**15)
    assert model.calls == 0


def test_a_budget_below_the_smallest_plan_is_refused_with_the_budget_that_suffices():
    """d = 44: 4 evaluations per feature (176 rows) and the derivatives' forward
    equivalents; the message gives their sum, which then runs."""
    model = CallCounter(nn.Sequential(nn.Linear(44, 8), nn.Tanh(), nn.Linear(8, 1)).double())
    x = torch.randn(1, 44, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"budget=440 is too small.*raise budget to (\d+)") as info:
        Shear(model).attribute(x, target=0, budget=440)
    assert model.calls == 0
    enough = int(info.value.args[0].split("raise budget to ")[1].split()[0])
    assert 440 < enough <= 1024
    Shear(model).attribute(x, target=0, budget=enough)
    with pytest.raises(ValueError, match="too small"):
        Shear(model).attribute(x, target=0, budget=enough - 1)


def test_no_warning_for_smooth_models():
    model = softplus_mlp(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Shear(model).attribute(torch.randn(2, 6, dtype=torch.float64), target=0, n_samples=8)


@pytest.mark.parametrize("kind", ["auto", "hessian", "gradient"])
def test_a_model_without_derivatives_is_refused_clearly(kind):
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    for model in (lambda x: net(x).detach(), lambda x: (net(x) * 10).round().long()):
        with pytest.raises(TypeError, match="Shear needs a differentiable model"):
            Shear(model).attribute(
                torch.randn(2, 6), target=0, n_samples=8, cross_contribution=kind
            )


class FusedAttention(torch.nn.Module):
    """Self-attention through torch's fused kernel, whose CPU backward has no derivative."""

    def __init__(self, d: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Linear(1, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x[..., None])[:, None]  # (N, 1 head, d, 8)
        mixed = torch.nn.functional.scaled_dot_product_attention(tokens, tokens, tokens)
        return mixed.sum(dim=(1, 2, 3))


def test_a_model_without_second_derivatives_falls_back_to_gradients():
    """Fused attention kernels have no double backward on the CPU: 'auto' takes the
    cooperators from gradient differences, with a warning; 'hessian' says why it cannot."""
    model = FusedAttention(6)
    x = torch.randn(2, 6)
    with pytest.warns(UserWarning, match="no second derivative"):
        phi = Shear(model).attribute(x, budget=200)
    with torch.no_grad():
        gap = model(x) - model(torch.zeros_like(x))
    torch.testing.assert_close(phi.sum(1), gap, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="not implemented"):
        Shear(model).attribute(x, budget=200, cross_contribution="hessian")
