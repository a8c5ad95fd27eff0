"""A fuzzing harness for the engine's options: ``additional_forward_args``,
``perturbations_per_eval`` and ``reuse_buffers`` change how the rows reach the
model, never the answer.

On the contract harness's random calls (layouts, masks, baselines, targets, a
feature at its baseline, budgets), the model also takes Captum's additional
forward arguments: a per-example tensor (expanded with each example's rows) and
a plain number (passed as is). Each class must give:

* with ``perturbations_per_eval`` from 1 (one coalition per call) to many, and
  with ``reuse_buffers=True``, the values of the default call (to rounding: the
  model's matrix products see other batch sizes) and the same evaluations;
* each example explained alone, with its own row of the per-example argument,
  its row of the batch's answer (the argument follows its example through the
  groups of examples with features at the baseline).

Derandomised and few on CI, with ``test_fuzz.py``'s settings;
``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder with fresh draws.
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from .test_fuzz import FUZZ  # the same budget of examples, derandomised on CI
from .test_fuzz_contract import CALLS, Case, Model, _call


class ModelWithArguments(Model):
    """The harness's model times a per-example scale, plus a constant shift."""

    def forward(self, *args: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        *inputs, scale, shift = args
        out = super().forward(*inputs)
        return out * scale.to(out.dtype)[:, None] + shift


def _explain(name: str, model: Model, case: Case, budget, seed: int, scale, **engine):
    """Attributions (a tuple) and evaluations, the model given ``(scale, 0.25)``."""
    result = _call(name, model, case, budget, seed, additional_forward_args=(scale, 0.25), **engine)
    attributions = result.attributions
    return attributions if isinstance(attributions, tuple) else (
        attributions,
    ), result.n_evaluations


def _example(case: Case, row: int) -> Case:
    """The case of example ``row`` alone."""

    def pick(value):
        if isinstance(value, torch.Tensor) and value.shape[0] == case.inputs[0].shape[0] > 1:
            return value[row : row + 1]
        if isinstance(value, tuple):
            return tuple(pick(v) for v in value)
        return value

    target = case.target[row : row + 1] if isinstance(case.target, list) else case.target
    return Case(pick(case.inputs), case.mask, pick(case.baselines), target, case.ids, 0)


def _close(first, second, message: str) -> None:
    for a, b in zip(first, second):
        scale = 1e-9 if a.dtype == torch.float64 else 1e-4
        tolerance = scale * (1 + float(b.abs().max()) if b.numel() else 1)
        torch.testing.assert_close(a, b, rtol=0, atol=tolerance, msg=message)


@FUZZ
@given(
    **CALLS,
    per_eval=st.sampled_from([1, 2, 3, 7, 64]),
    reuse=st.booleans(),
    data=st.data(),
)
def test_engine_options_change_how_rows_reach_the_model_not_the_answer(
    case, name, budget, seed, per_eval, reuse, data
):
    batch = case.inputs[0].shape[0]
    model = ModelWithArguments(sum(x[0].numel() for x in case.inputs), seed)
    scale = torch.tensor(
        data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, -3.0]), min_size=batch, max_size=batch))
    )
    try:
        plain = _explain(name, model, case, budget, seed, scale)
    except (ValueError, TypeError):
        return  # refused (a budget below the plan): the contract harness checks why
    engine = {"perturbations_per_eval": per_eval, "reuse_buffers": reuse}
    chunked = _explain(name, model, case, budget, seed, scale, **engine)
    _close(chunked[0], plain[0], f"{name} {engine}")
    assert torch.equal(chunked[1], plain[1]), (name, engine, chunked[1], plain[1])
    for row in range(batch):
        alone = _explain(name, model, _example(case, row), budget, seed, scale[row : row + 1])
        _close(alone[0], tuple(a[row : row + 1] for a in plain[0]), f"{name} example {row}")
