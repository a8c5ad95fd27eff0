"""A fuzzing harness for the contract every class shares: random layouts, masks, budgets.

Each example draws an input layout (a batch of vectors, of images whose mask
groups pixels into patches, or a tuple of two tensors), a feature mask with
ids that need not be contiguous (or none), a dtype, a baseline form, a target
form, a budget (for the sampled classes) and a feature left at its baseline.
Every public class is then called as a Captum user would, and the answer
must keep what no answer may break:

* the attributions have the input's shape (Captum's convention: every element
  of a feature carries the feature's value) and dtype, and are finite;
* a feature at its baseline gets exactly zero (the dummy axiom);
* the efficient classes add up to ``f(x) - f(baseline)``;
* no example costs more model rows than ``budget=``;
* the same generator seed gives the same values;
* an example explained alone gets its row of the batch, whatever features the
  other examples have at the baseline (the batch is explained in groups), with
  baselines or a background set (``references=``);
* a refusal is a ``ValueError`` or ``TypeError`` raised before any model call.

Derandomised and few on CI, with ``test_fuzz.py``'s settings;
``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder with fresh draws.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import captum_graphshap as cg

from .test_fuzz import FUZZ  # the same budget of examples, derandomised on CI

#: (class, options, efficient, budgeted, null): cheap settings for at most 8 features;
#: ``null``: what a feature at its baseline gets, "zero" (dropped before planning),
#: "rounding" (differences of equal values, weighted and summed) or "any" (Myerson: a
#: null player can join the graph's components, so its value need not be 0)
CLASSES = {
    "ExactShapley": (cg.ExactShapley, {}, True, False, "zero"),
    "MyersonValue": (cg.MyersonValue, {}, False, False, "any"),
    "LShapley": (cg.LShapley, {"k": 1}, False, False, "rounding"),
    "CShapley": (cg.CShapley, {"k": 1}, False, False, "rounding"),
    "ShapleySampling": (cg.ShapleySampling, {}, True, True, "zero"),
    "PairedKernelShap": (cg.PairedKernelShap, {}, True, True, "zero"),
    "BayesShap": (cg.BayesShap, {}, True, True, "zero"),
    "Shear": (cg.Shear, {}, False, True, "zero"),
}
RANDOMISED = ("ShapleySampling", "PairedKernelShap", "BayesShap", "Shear")


@dataclass
class Case:
    """One drawn call: inputs, mask, baselines, target, and the features' first elements."""

    inputs: tuple[torch.Tensor, ...]
    mask: tuple[torch.Tensor, ...] | None
    baselines: object
    target: object
    ids: list[int]  # the feature ids, sorted
    at_baseline: int  # the id of the feature set to its baseline


class Model(torch.nn.Module):
    """A tanh MLP over every input element, three outputs, float64 inside; with
    ``refuse`` set, any call fails the test."""

    def __init__(self, elements: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.hidden = torch.randn(elements, 12, generator=g, dtype=torch.float64) / elements**0.5
        self.head = torch.randn(12, 3, generator=g, dtype=torch.float64)
        self.refuse = False

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.refuse:
            raise AssertionError("the model was called before the input was refused")
        flat = torch.cat([t.reshape(t.shape[0], -1).double() for t in inputs], dim=1)
        out = torch.tanh(flat @ self.hidden) @ self.head
        return out.to(inputs[0].dtype)


def _mask_ids(draw: st.DrawFn, elements: int, most: int = 8) -> list[int]:
    """Each element's feature id: at most ``most`` features, ids spread over 0-15."""
    count = draw(st.integers(1, min(most, elements)))
    ids = sorted(draw(st.lists(st.integers(0, 15), min_size=count, max_size=count, unique=True)))
    owner = draw(st.lists(st.sampled_from(ids), min_size=elements, max_size=elements))
    owner[: len(ids)] = ids  # every id owns an element
    return draw(st.permutations(owner))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    batch = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    layout = draw(st.sampled_from(["vectors", "images", "tuple"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if layout == "vectors":
        shapes = [(draw(st.integers(1, 8)),)]
    elif layout == "images":
        shapes = [(draw(st.integers(1, 2)), 4, 4)]
    else:
        shapes = [(draw(st.integers(1, 4)),), (draw(st.integers(1, 4)),)]
    inputs = tuple(torch.randn(batch, *s, generator=g).to(dtype) for s in shapes)
    elements = sum(int(torch.tensor(s).prod()) for s in shapes)
    masked = draw(st.booleans()) and layout != "images"
    if layout == "images":  # 2 x 2 patches, the same in every channel
        patch = torch.arange(4)[:, None] // 2 * 2 + torch.arange(4)[None, :] // 2
        mask: tuple[torch.Tensor, ...] | None = (patch.expand(1, shapes[0][0], 4, 4),)
    elif masked:
        owner = torch.tensor(_mask_ids(draw, elements))
        cuts = [0]
        for s in shapes:
            cuts.append(cuts[-1] + int(torch.tensor(s).prod()))
        mask = tuple(owner[a:b].view(1, *s) for a, b, s in zip(cuts, cuts[1:], shapes))
    else:
        mask = None
    if mask is None:
        flat_ids = list(range(elements))
    else:
        flat_ids = torch.cat([m.expand(1, *s).reshape(-1) for m, s in zip(mask, shapes)]).tolist()
    ids = sorted(set(flat_ids))
    form = draw(st.sampled_from(["none", "scalar", "shared", "per-example"]))
    if form == "none":
        base = tuple(torch.zeros(1, *s, dtype=dtype) for s in shapes)
        baselines: object = None
    elif form == "scalar":
        value = draw(st.sampled_from([0.0, 0.5, -1.0]))
        base = tuple(torch.full((1, *s), value, dtype=dtype) for s in shapes)
        baselines = value if len(shapes) == 1 else tuple(value for _ in shapes)
    else:
        rows = 1 if form == "shared" else batch
        base = tuple(torch.randn(rows, *s, generator=g).to(dtype) for s in shapes)
        baselines = base[0] if len(base) == 1 else base
    # one feature (all its elements, in every example) at its baseline
    at_baseline = draw(st.sampled_from(ids))
    inputs = _set_feature(inputs, base, flat_ids, at_baseline)
    target = draw(st.sampled_from([0, 2, "list"]))
    if target == "list":
        target = [draw(st.integers(0, 2)) for _ in range(batch)]
    return Case(inputs, mask, baselines, target, ids, at_baseline)


def _set_feature(
    inputs: tuple[torch.Tensor, ...], base: tuple[torch.Tensor, ...], flat_ids: list[int], i: int
) -> tuple[torch.Tensor, ...]:
    out, start = [], 0
    for x, b in zip(inputs, base):
        size = x[0].numel()
        chosen = torch.tensor(flat_ids[start : start + size]) == i
        flat = x.reshape(x.shape[0], -1).clone()
        flat[:, chosen] = b.expand_as(x).reshape(x.shape[0], -1)[:, chosen]
        out.append(flat.view_as(x))
        start += size
    return tuple(out)


def _per_feature(
    attributions: tuple[torch.Tensor, ...], case: Case, shapes: list[torch.Size]
) -> torch.Tensor:
    """``(N, d)`` each feature's value, read off its first element."""
    flat = torch.cat([a.reshape(a.shape[0], -1).double() for a in attributions], dim=1)
    if case.mask is None:
        return flat
    owner = torch.cat([m.expand(1, *s).reshape(-1) for m, s in zip(case.mask, shapes)])
    first = [int(torch.nonzero(owner == i)[0]) for i in case.ids]
    return flat[:, first]


def _gap(model: Model, case: Case) -> torch.Tensor:
    """``(N,)`` f(x) - f(baseline) at each example's target."""
    batch = case.inputs[0].shape[0]
    if case.baselines is None:
        base = tuple(torch.zeros_like(x) for x in case.inputs)
    elif isinstance(case.baselines, float):
        base = tuple(torch.full_like(x, case.baselines) for x in case.inputs)
    else:
        given = case.baselines if isinstance(case.baselines, tuple) else (case.baselines,)
        base = tuple(
            torch.full_like(x, b) if isinstance(b, float) else b.expand_as(x)
            for x, b in zip(case.inputs, given)
        )
    with torch.no_grad():
        high, low = model(*case.inputs).double(), model(*base).double()
    target = case.target if isinstance(case.target, list) else [case.target] * batch
    rows = torch.arange(batch)
    return high[rows, target] - low[rows, target]


def _call(name: str, model: Model, case: Case, budget: int | None, seed: int, **extra):
    """The class called as a Captum user would, ``extra`` added to the options."""
    cls, options, _, budgeted, _ = CLASSES[name]
    options = dict(options)
    if name in RANDOMISED:
        options["generator"] = torch.Generator().manual_seed(seed)
    if budgeted and budget is not None:
        options["budget"] = budget
    inputs = case.inputs[0] if len(case.inputs) == 1 else case.inputs
    mask = None if case.mask is None else (case.mask[0] if len(case.mask) == 1 else case.mask)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(model).attribute(
            inputs,
            baselines=case.baselines,
            target=case.target,
            feature_mask=mask,
            return_evaluations=True,
            **options,
            **extra,
        )


#: one drawn call of every class: a case, the class, a budget (or none) and a seed
CALLS = {
    "case": cases(),
    "name": st.sampled_from(sorted(CLASSES)),
    "budget": st.one_of(st.none(), st.integers(2, 300)),
    "seed": st.integers(0, 2**16),
}


@FUZZ
@given(**CALLS)
def test_every_class_keeps_the_contract_on_random_layouts(case, name, budget, seed):
    _, _, efficient, budgeted, null = CLASSES[name]
    shapes = [x.shape[1:] for x in case.inputs]
    elements = sum(x[0].numel() for x in case.inputs)
    model = Model(elements, seed)
    try:
        result = _call(name, model, case, budget, seed)
    except (ValueError, TypeError) as error:
        # a refusal names what to change; the budget classes refuse budgets below
        # their smallest plan, Shear a model it cannot differentiate twice
        assert str(error), name
        return
    attributions = result.attributions
    attributions = attributions if isinstance(attributions, tuple) else (attributions,)
    assert [a.shape for a in attributions] == [x.shape for x in case.inputs], name
    assert [a.dtype for a in attributions] == [x.dtype for x in case.inputs], name
    assert all(bool(torch.isfinite(a).all()) for a in attributions), name
    phi = _per_feature(attributions, case, shapes)
    dummy = phi[:, case.ids.index(case.at_baseline)]
    scale = 1e-5 if case.inputs[0].dtype == torch.float32 else 1e-12
    if null == "zero":
        assert torch.equal(dummy, torch.zeros_like(dummy)), (name, phi)
    elif null == "rounding":
        assert bool((dummy.abs() <= scale * (1 + phi.abs().max())).all()), (name, phi)
    if budgeted and budget is not None:
        assert bool((result.n_evaluations <= budget).all()), (name, result.n_evaluations, budget)
    if efficient:
        gap = _gap(model, case)
        tolerance = 10 * scale * (1 + gap.abs().max())
        assert torch.allclose(phi.sum(1), gap, atol=float(tolerance), rtol=0), (name, phi, gap)
    if name in RANDOMISED:
        again = _call(name, model, case, budget, seed).attributions
        again = again if isinstance(again, tuple) else (again,)
        assert all(torch.equal(a, b) for a, b in zip(attributions, again)), name


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_a_refusal_comes_before_any_model_call(name):
    # the harness's model refuses to be called: an unknown target form must be refused first
    x = torch.randn(2, 4)
    model = Model(4, 0)
    model.refuse = True
    cls, options, _, _, _ = CLASSES[name]
    with pytest.raises((ValueError, TypeError)):
        cls(model).attribute(x, target=[0, 1, 2], **options)


@FUZZ
@given(
    data=st.data(),
    name=st.sampled_from(RANDOMISED),
    batch=st.integers(2, 4),
    elements=st.integers(2, 13),
    budget=st.one_of(st.none(), st.integers(20, 200)),
    seed=st.integers(0, 2**16),
)
def test_an_example_gets_its_row_whatever_the_others_features_at_the_baseline(
    data, name, batch, elements, budget, seed
):
    # each example with its own features at the baseline: the batch is explained in
    # groups, one per distinct set, and each group's draws start where the call's did
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, elements, generator=g, dtype=torch.float64)
    per_example = data.draw(st.booleans())
    base = torch.randn(batch if per_example else 1, elements, generator=g, dtype=torch.float64)
    # no mask, one shared by the batch, or one per example (superpixels: then the
    # estimators that read the layout group the examples by their own windows, from
    # 10 features on)
    form = data.draw(st.sampled_from(["none", "shared", "per example"]))
    owner = None
    if form != "none":
        rows = batch if form == "per example" else 1
        owner = torch.tensor([_mask_ids(data.draw, elements, 12) for _ in range(rows)])
    # or a background set of 2-3 references (Shear takes none): a feature is then a
    # null player only where it equals every reference
    count = 0 if per_example or name == "Shear" else data.draw(st.sampled_from([0, 2, 3]))
    references = torch.randn(count, elements, generator=g, dtype=torch.float64)
    most = elements if data.draw(st.booleans()) else 2  # many at the baseline, or few
    for row in range(batch):
        null = data.draw(st.sets(st.integers(0, elements - 1), max_size=most))
        chosen = torch.tensor(sorted(null), dtype=torch.long)
        x[row, chosen] = base[row if per_example else 0, chosen]
        if count and data.draw(st.booleans()):  # equal to one reference, or to all
            x[row, chosen] = references[0, chosen]
            references[:, chosen[: len(chosen) // 2]] = references[0, chosen[: len(chosen) // 2]]
    model = Model(elements, seed)
    extra = {"references": references} if count else {}

    def explain(rows: slice) -> torch.Tensor:
        mask = None if owner is None else (owner[rows] if form == "per example" else owner,)
        baselines = None if count else base[rows] if per_example else base
        sub = Case((x[rows],), mask, baselines, 1, [], 0)
        try:
            return _call(name, model, sub, budget, seed, **extra).attributions
        except (ValueError, TypeError):
            return torch.full_like(x[rows], torch.nan)

    whole = explain(slice(None))
    alone = torch.cat([explain(slice(row, row + 1)) for row in range(batch)])
    if bool(whole.isnan().all()):
        # a budget too small for one example's features refuses the batch (the others
        # alone may fit: fewer features vary there)
        assert bool(alone.isnan().all(dim=1).any()), name
        return
    torch.testing.assert_close(alone, whole, rtol=0, atol=1e-10)
