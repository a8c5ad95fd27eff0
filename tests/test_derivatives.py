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
        (nn.Tanh, "auto", lambda d: 1 + HVP_COST * d),  # no fallback needed
        # a ReLU network's Hessian is 0: "auto" pays for both forms, its stated maximum
        (nn.ReLU, "auto", lambda d: cross_contribution_cost("auto", d)),
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
