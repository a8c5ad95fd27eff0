"""A fuzzing harness for ``target=None`` on a model of several outputs: every output
at once is each output alone.

Captum's multi-output convention (and ours): without ``target`` a model of
``K`` outputs is explained for every output, the attributions ``(N, K, ...)``.
Our classes run the method once per output and replay the first run's model
values for the others, the random draws restarted, so the call costs the
evaluations of one output. On the contract harness's random layouts (vectors,
images with patches, tuples; masks; baselines; a feature at its baseline, so
the batch is explained in groups) each class must give:

* ``result[:, k]`` equal to the call with ``target=k`` and the same seed;
* the evaluations of one output, not ``K`` times them, and never above
  ``budget=``; ``Shear``'s outputs each have their own derivatives and rows,
  so they share the budget (each output's values are ``target=k``'s at its
  share; found here: they spent up to 1.8 times the budget);
* a budget's refusal for every output as for one;
* the same with a background set (``references=``) in place of the baselines
  and with ``return_uncertainty=True``: each output's half-widths too;
* Captum's aggregated mode (one number for the whole batch): the batch is one
  example, the deterministic classes give the sum of the examples' values and
  the efficient ones add up to the batch's ``F(x) - F(baseline)``.

Found by this harness: with a feature at its baseline each output's run
evaluated the model again (the groups' games had tapes of their own), and
``ShapleySampling``'s window read what the run had spent off the evaluations
made, which the replays do not add: the outputs after the first drew another
window (``budget=12`` at d = 3: values 0.019 from ``target=k``'s).

Derandomised and few on CI, with ``test_fuzz.py``'s settings;
``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder with fresh draws.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import captum_graphshap as cg

from .test_fuzz import FUZZ  # the same budget of examples, derandomised on CI
from .test_fuzz_contract import CALLS, CLASSES, Model, _call, _gap, _per_feature

#: the model's outputs (test_fuzz_contract.Model)
OUTPUTS = 3


def _explain(name: str, model: Model, case, budget: int | None, seed: int):
    """The call's attributions (a tuple) and evaluations, or the refusal's type."""
    try:
        result = _call(name, model, case, budget, seed)
    except (ValueError, TypeError) as error:
        return type(error), None
    attributions = result.attributions
    return (attributions if isinstance(attributions, tuple) else (attributions,)), (
        result.n_evaluations
    )


def _share(name: str, budget: int | None) -> int | None:
    """The budget an output alone gets in multi-output mode: ``Shear``'s outputs each
    have their own derivatives and rows, so they share it."""
    return budget // OUTPUTS if name == "Shear" and budget is not None else budget


@FUZZ
@given(**CALLS)
def test_every_output_at_once_is_each_output_alone(case, name, budget, seed):
    elements = sum(x[0].numel() for x in case.inputs)
    model = Model(elements, seed)
    case.target = None
    every, spent = _explain(name, model, case, budget, seed)
    alone = []
    for k in range(OUTPUTS):
        case.target = k
        alone.append(_explain(name, model, case, _share(name, budget), seed))
    if spent is None:  # refused: then for one output too
        assert all(evaluations is None for _, evaluations in alone), name
        return
    if CLASSES[name][3] and budget is not None:  # a class that takes budget=
        assert bool((spent <= budget).all()), (name, spent, budget)
    for k, (attributions, evaluations) in enumerate(alone):
        assert evaluations is not None, (name, k)
        for whole, one in zip(every, attributions):
            assert whole.shape == (one.shape[0], OUTPUTS, *one.shape[1:]), name
            torch.testing.assert_close(whole[:, k], one, rtol=0, atol=0, msg=f"{name} {k}")
        if name == "Shear":  # its derivatives (cooperators) are each output's own
            assert bool((spent <= OUTPUTS * evaluations).all()), (name, spent, evaluations)
            assert bool((evaluations <= spent).all()), (name, spent, evaluations)
        else:
            assert torch.equal(spent, evaluations), (name, spent, evaluations)


class CountingModel(Model):
    """The harness's model, counting the rows it is called on."""

    def __init__(self, elements: int, seed: int) -> None:
        super().__init__(elements, seed)
        self.rows = 0

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.rows += inputs[0].shape[0]
        return super().forward(*inputs)


@pytest.mark.parametrize("name", ["ExactShapley", "PairedKernelShap", "ShapleySampling"])
def test_every_output_costs_the_rows_of_one_with_features_at_the_baseline(name):
    """Example 0 has feature 0 at its baseline: the batch is two games; each output's
    run used to create them anew with empty tapes and evaluate the model again."""
    x = torch.tensor([[0.0, -0.3, 0.7], [0.4, -0.3, 0.7]], dtype=torch.float64)
    cls, options, _, _, _ = CLASSES[name]
    counts = []
    for target in (None, 1):
        model = CountingModel(3, seed=0)
        if name != "ExactShapley":
            options = {**options, "generator": torch.Generator().manual_seed(0), "budget": 8}
        explained = cls(model).attribute(x, target=target, return_evaluations=True, **options)
        counts.append((model.rows, explained.n_evaluations.tolist()))
    assert counts[0] == counts[1], (name, counts)


@pytest.mark.parametrize("budget", [12, 14, 16])
def test_shapley_samplings_window_is_the_same_for_every_output(budget):
    """d = 3 and a budget whose rest buys a window after the whole orderings: every
    output's run must draw the window the first drew."""
    x = torch.tensor([[3.2, 2.7, 3.9], [2.4, 3.3, 3.1]], dtype=torch.float64)
    explained = []
    for target in (None, 1):
        explained.append(
            cg.ShapleySampling(CountingModel(3, seed=0)).attribute(
                x, target=target, budget=budget, generator=torch.Generator().manual_seed(0)
            )
        )
    torch.testing.assert_close(explained[0][:, 1], explained[1], rtol=0, atol=0)


#: the classes with intervals: over orderings (ShapleySampling), the posterior
#: (BayesShap), over references (the graph methods: only with references)
INTERVALS = ("ShapleySampling", "BayesShap", "MyersonValue", "LShapley", "CShapley")


@FUZZ
@given(**CALLS, references=st.integers(0, 3), intervals=st.booleans())
def test_every_output_at_once_with_references_and_intervals(
    case, name, budget, seed, references, intervals
):
    """As above, with a background set in place of the baselines and intervals."""
    elements = sum(x[0].numel() for x in case.inputs)
    model = Model(elements, seed)
    extra: dict = {}
    if references:
        g = torch.Generator().manual_seed(seed)
        background = tuple(
            torch.randn(references, *x.shape[1:], generator=g).to(x.dtype) for x in case.inputs
        )
        extra["references"] = background[0] if len(background) == 1 else background
        case.baselines = None
    if intervals and name in INTERVALS:
        extra["return_uncertainty"] = True

    def explain(target):
        case.target = target
        share = budget if target is None else _share(name, budget)
        try:
            result = _call(name, model, case, share, seed, **extra)
        except (ValueError, TypeError) as error:
            return type(error)
        return result._asdict()

    every = explain(None)
    for k in range(OUTPUTS):
        alone = explain(k)
        if isinstance(every, type) or isinstance(alone, type):
            assert every == alone, (name, k, every, alone)  # refused for every output as for one
            continue
        assert every.keys() == alone.keys(), name
        for key, whole in every.items():
            if key == "n_evaluations":
                if name != "Shear":
                    assert torch.equal(whole, alone[key]), (name, whole, alone[key])
                continue
            parts = whole if isinstance(whole, tuple) else (whole,)
            ones = alone[key] if isinstance(alone[key], tuple) else (alone[key],)
            for a, b in zip(parts, ones):
                torch.testing.assert_close(a[:, k], b, rtol=0, atol=0, msg=f"{name} {key} {k}")


#: the deterministic classes, whose aggregated answer is the sum of the examples'
#: (their games add up over the batch and their estimators are linear in the values)
LINEAR = ("ExactShapley", "MyersonValue", "LShapley", "CShapley")


@FUZZ
@given(**CALLS)
def test_a_model_that_answers_the_whole_batch_is_explained_as_one_example(case, name, budget, seed):
    """Captum's aggregated mode: ``forward_func`` returns one number for the batch. The
    game of a coalition is then the sum of the examples' values; the linear classes
    give the sum of their values per example, the efficient ones add up to the
    batch's ``F(x) - F(baseline)``."""
    elements = sum(x[0].numel() for x in case.inputs)
    model = Model(elements, seed)
    target = 0 if case.target == "list" or isinstance(case.target, list) else case.target
    case.target = target
    if case.mask is not None and any(m.shape[0] != 1 for m in case.mask):
        return  # the mode needs a mask shared by the batch
    _, _, efficient, _, _ = CLASSES[name]

    class Whole(torch.nn.Module):
        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return model(*inputs)[:, target].sum()

    try:
        per_example = _call(name, model, case, budget, seed).attributions
        case.target = None
        whole = _call(name, Whole(), case, budget, seed).attributions
    except (ValueError, TypeError):
        return
    per_example = per_example if isinstance(per_example, tuple) else (per_example,)
    whole = whole if isinstance(whole, tuple) else (whole,)
    for a, b in zip(whole, per_example):
        assert a.shape == (1, *b.shape[1:]), name
        scale = 1e-9 if a.dtype == torch.float64 else 2e-4
        tolerance = scale * (1 + float(b.abs().sum(0).max()))
        if name in LINEAR:
            torch.testing.assert_close(a[0], b.sum(0), rtol=0, atol=tolerance, msg=name)
    if efficient:  # each feature's value read off its first element
        case.target = target
        gap = float(_gap(model, case).sum())
        shapes = [x.shape[1:] for x in case.inputs]
        total = float(_per_feature(whole, case, shapes).sum())
        assert abs(total - gap) <= 10 * scale * (1 + abs(gap)), (name, total, gap)


@pytest.mark.parametrize(("d", "budget"), [(3, 200), (4, 120), (5, 300)])
def test_shapley_samplings_control_variate_pays_every_outputs_derivatives(d, budget):
    """The rows are shared by the outputs, the Taylor surrogate's derivatives are each
    output's own: all of them within ``budget=`` (they spent up to 1.9 times it), each
    output's values those of ``target=k`` with the other outputs' derivatives taken off."""
    from captum_graphshap.engine.derivatives import taylor_cost

    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    options = {"control_variate": "taylor", "antithetic": False, "return_evaluations": True}

    def explain(target, spend):
        generator = torch.Generator().manual_seed(0)
        return cg.ShapleySampling(Model(d, seed=d)).attribute(
            x, target=target, budget=spend, generator=generator, **options
        )

    every = explain(None, budget)
    assert bool((every.n_evaluations <= budget).all()), every.n_evaluations
    for k in range(OUTPUTS):
        alone = explain(k, budget - (OUTPUTS - 1) * taylor_cost(d))
        torch.testing.assert_close(every.attributions[:, k], alone.attributions, rtol=0, atol=0)


@pytest.mark.parametrize(("d", "budget"), [(4, 200), (6, 240), (6, 300)])
def test_shears_outputs_share_its_budget(d, budget):
    """Each output has its own derivatives, cooperators and rows: together they spent
    up to 1.8 times ``budget=`` (137 of 80 at d = 6); now each output gets a third."""
    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))

    def explain(target, spend):
        generator = torch.Generator().manual_seed(0)
        return cg.Shear(Model(d, seed=d)).attribute(
            x, target=target, budget=spend, generator=generator, return_evaluations=True
        )

    every = explain(None, budget)
    assert bool((every.n_evaluations <= budget).all()), every.n_evaluations
    for k in range(OUTPUTS):
        alone = explain(k, budget // OUTPUTS)
        torch.testing.assert_close(every.attributions[:, k], alone.attributions, rtol=0, atol=0)
