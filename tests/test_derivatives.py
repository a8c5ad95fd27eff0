"""engine/derivatives.py: the derivatives of a game, their values and their counts.

The plans receive derivatives as tensors: no plan module runs autograd, and
the engine module imports neither the plans nor the attribution classes.
"""

from __future__ import annotations

import ast
import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.engine.derivatives import (
    GRADIENT_COST,
    HVP_COST,
    cross_contribution_cost,
    cross_contributions,
    derivative_setup,
    hessian_feature_matrix,
    hessian_vanishes,
    in_chunks,
    taylor_cost,
    taylor_expansion,
)

PACKAGE = Path(__file__).resolve().parents[1] / "captum_graphshap"


def mlp(activation: type[nn.Module], d: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, 8), activation(), nn.Linear(8, 2)).double()


@pytest.mark.parametrize(
    ("activation", "kind", "expected"),
    [
        (nn.Tanh, "hessian", lambda d: 1 + HVP_COST * d),
        (nn.Tanh, "gradient", lambda d: 1 + GRADIENT_COST * (d + 1)),
        (nn.Tanh, "auto", lambda d: 1 + HVP_COST * (d + 1)),  # the probe, no fallback
        # a ReLU network's Hessian is 0: the probe says so, and "auto" pays for it and
        # the gradient form only
        (nn.ReLU, "auto", lambda d: 1 + HVP_COST + GRADIENT_COST * (d + 1)),
    ],
)
def test_cross_contributions_charge_their_forward_equivalents(activation, kind, expected):
    d = 5
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    game, _ = prepare_game(mlp(activation, d), x, 0.0, target=1)
    before = game.evaluations.clone()
    with pytest.warns(UserWarning) if activation is nn.ReLU else _no_warning():
        eta = cross_contributions(game, kind)
    assert eta.shape == (3, d, d)
    assert (game.evaluations - before).tolist() == [expected(d)] * 3
    assert expected(d) <= cross_contribution_cost(kind, d)


def test_taylor_expansion_of_a_quadratic_model_is_its_closed_form_and_is_counted():
    d = 4
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(d, d, generator=generator, dtype=torch.float64)
    b = torch.randn(d, generator=generator, dtype=torch.float64)

    def model(x):
        return (x @ b + ((x @ a) * x).sum(dim=1))[:, None]

    x = torch.randn(2, d, generator=generator, dtype=torch.float64)
    base = torch.randn(2, d, generator=generator, dtype=torch.float64)
    game, _ = prepare_game(model, x, base, target=0)
    terms = taylor_expansion(game, 0.25, "test")
    point = base + 0.25 * (x - base)
    delta = x - base
    symmetric = a + a.T
    torch.testing.assert_close(terms.value, model(point)[:, 0], rtol=0, atol=1e-12)
    gradient = (point @ symmetric + b) * delta  # g_i = delta_i d f / d x_i
    torch.testing.assert_close(terms.gradient, gradient, rtol=0, atol=1e-12)
    hessian = delta[:, :, None] * symmetric * delta[:, None, :]  # delta_i H_ij delta_j
    torch.testing.assert_close(terms.hessian, hessian, rtol=0, atol=1e-12)
    assert game.evaluations.tolist() == [taylor_cost(d)] * 2
    assert not terms.hessian.requires_grad


def test_integer_inputs_are_refused_before_any_model_call():
    calls = []

    def model(x):
        calls.append(x.shape)
        return x.double()

    game, _ = prepare_game(model, torch.ones(2, 3, dtype=torch.long), 0, target=0)
    with pytest.raises(TypeError, match=r"Shear needs gradients, but inputs\[0\]"):
        cross_contributions(game, "hessian")
    with pytest.raises(TypeError, match=r"taylor'? needs gradients"):
        taylor_expansion(game, 0.5, "control_variate='taylor'")
    assert calls == [] and game.evaluations.tolist() == [0, 0]


def test_plans_run_no_autograd_and_the_engine_imports_no_layer_above():
    for path in sorted((PACKAGE / "plans").glob("*.py")):
        text = path.read_text()
        for word in ("autograd", "requires_grad", "enable_grad", "value_fn"):
            assert word not in text, f"plans/{path.name} uses {word}: derivatives belong in engine"
    for path in sorted((PACKAGE / "engine").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):  # function-level imports too
            if not isinstance(node, ast.ImportFrom):
                continue
            parts = (node.module or "").split(".")
            package = parts[1] if node.level == 0 and len(parts) > 1 else parts[0]
            above = node.level == 2 or (node.level == 0 and parts[0] == "captum_graphshap")
            assert not (above and package in {"plans", "attr"}), f"engine/{path.name}: {parts}"


@contextlib.contextmanager
def _no_warning() -> Iterator[None]:
    """Fail on any warning (``pytest.warns(None)`` is gone)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_the_probe_finds_a_hessian_that_cancels_along_the_summed_deltas():
    """f = (x_1 - x_2)^2 at x = (1, 1) from 0: H (delta_1 + delta_2) = 0, yet
    delta_1' H delta_2 = -2; the probe's random weights must not be fooled, and
    "auto" must give the Hessian form's cross-contributions, counted as such."""

    def model(x):
        return ((x[:, 0] - x[:, 1]) ** 2)[:, None]

    x = torch.ones(1, 2, dtype=torch.float64)
    game, _ = prepare_game(model, x, 0.0, target=0)
    before = game.evaluations.clone()
    with _no_warning():
        eta = cross_contributions(game, "auto")
    torch.testing.assert_close(eta[0], torch.tensor([[4.0, 4.0], [4.0, 4.0]], dtype=torch.float64))
    assert (game.evaluations - before).tolist() == [1 + HVP_COST * 3]


@pytest.mark.parametrize("activation", [nn.ReLU, nn.Tanh, nn.Identity])
def test_the_probe_agrees_with_the_full_hessian_on_whether_it_vanishes(activation):
    d = 6
    model = mlp(activation, d)
    x = torch.randn(4, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    game, _ = prepare_game(model, x, 0.0, target=1)
    value_fn, baselines = derivative_setup(game)
    deltas = tuple(t - b for t, b in zip(game.inputs, baselines))
    masks = game.features.masks
    probe = hessian_vanishes(value_fn, game.inputs, deltas, masks, d)
    full = hessian_feature_matrix(value_fn, game.inputs, deltas, masks, d)
    assert probe.tolist() == full.flatten(1).eq(0).all(dim=1).tolist()
    assert bool(probe.all()) == (activation is not nn.Tanh)


def test_out_of_memory_halves_a_derivative_chunk_and_keeps_the_finished_ones():
    calls = []

    def step(ids):
        calls.append(ids.tolist())
        if ids.numel() > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return ids * 10

    parts = in_chunks(torch.arange(7), 4, step)
    assert torch.cat(parts).tolist() == [0, 10, 20, 30, 40, 50, 60]
    assert calls == [[0, 1, 2, 3], [0, 1], [2, 3], [4, 5], [6]]


def test_an_error_other_than_out_of_memory_is_not_retried():
    def step(ids):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        in_chunks(torch.arange(4), 4, step)
