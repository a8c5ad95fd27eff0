"""A fuzzing harness for background sets and the predicted class: ``references=`` and
``value="log_prob"`` without a target, against brute force.

With ``references=`` (``B`` rows) a coalition's value is the mean over the
references of the model's output with the features outside the coalition
taken from each reference; with ``value="log_prob"`` the output is the
log-softmax, at the class predicted on the input when no target is given.
Each example draws vectors (features grouped by a mask with ids that need not
be contiguous, or none), images (2 x 2 patches) or token ids (an embedding
model; the references other token ids), 1-4 references, the value
and target, and features that equal one reference, or every reference (a null
player of the averaged game only then). The properties:

* ``budget=`` counts model evaluations: no class spends more, whatever the
  references (each coalition costs one evaluation per reference) and the
  forward that finds the predicted class; a budget too small for that is
  refused before any model call (found by this harness: ``PairedKernelShap``,
  ``BayesShap`` and ``BivariateShapley`` spent ``B`` times the budget, and
  they and ``ShapleySampling`` one evaluation more under ``log_prob``);
* ``ExactShapley``, and ``PairedKernelShap`` and ``BayesShap`` at a budget
  that covers every coalition, give the brute-force Shapley values of the
  averaged game, as does ``OwenValue`` with one union, and ``BivariateShapley``
  its matrix (Masoomi et al.'s Eq. 6); ``MyersonValue``,
  ``LShapley`` and ``CShapley`` (both contexts) its values on the line;
  ``ShapleyResiduals`` its residual norms, global and local (a dense
  least-squares solve of each neighbourhood's game);
* ``return_uncertainty=True`` of a graph method is the per-reference
  values' mean and normal-quantile standard error (Merrick and Taly).

The tests at the end pin what else it found: ``BayesShap(focused=True)`` over
small budgets, ``CShapley``'s kernel variant crashing on one feature, and a
refusal that came after a smaller game of the batch had run the model.

Derandomised and few on CI, with ``test_fuzz.py``'s settings;
``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder with fresh draws.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass

import networkx as nx
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import captum_graphshap as cg

from .reference import brute_c_shapley, brute_l_shapley, brute_myerson, brute_shapley
from .test_bivariate import brute_bivariate
from .test_fuzz import FUZZ  # the same budget of examples, derandomised on CI
from .test_fuzz_contract import Model, _mask_ids
from .test_residuals import brute_local_norms, dense_residuals, table_of


@dataclass
class Case:
    """One drawn call: inputs ``(N, ...)``, references ``(B, ...)``, the mask, value, target."""

    inputs: torch.Tensor
    references: torch.Tensor
    mask: torch.Tensor | None
    value: str
    target: object
    owner: torch.Tensor  # (E,) each element's feature id (the mask, or one per element)

    @property
    def ids(self) -> list[int]:
        return sorted(set(self.owner.tolist()))


@st.composite
def cases(
    draw: st.DrawFn, most: int = 5, layouts: tuple[str, ...] = ("vectors", "images", "tokens")
):
    batch = draw(st.integers(1, 3))
    count = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    layout = draw(st.sampled_from(layouts))
    if layout == "images":  # 2 x 2 patches, the same in every channel
        shape: tuple[int, ...] = (draw(st.integers(1, 2)), 4, 4)
        patch = torch.arange(4)[:, None] // 2 * 2 + torch.arange(4)[None, :] // 2
        mask: torch.Tensor | None = patch.expand(1, shape[0], 4, 4)
        owner = mask.expand(1, *shape).reshape(-1)
    else:
        shape = (draw(st.integers(1, most + 2)),)
        if shape[0] > most or draw(st.booleans()):
            owner = torch.tensor(_mask_ids(draw, shape[0], most))
            mask = owner.view(1, *shape)
        else:
            owner, mask = torch.arange(shape[0]), None
    if layout == "tokens":  # token ids, the references padding or other tokens
        dtype = torch.long
        inputs = torch.randint(0, VOCABULARY, (batch, *shape), generator=g)
        references = torch.randint(0, VOCABULARY, (count, *shape), generator=g)
    else:
        inputs = torch.randn(batch, *shape, generator=g, dtype=torch.float64)
        references = torch.randn(count, *shape, generator=g, dtype=torch.float64)
    flat, ids = inputs.view(batch, -1), sorted(set(owner.tolist()))
    # a feature equal to one reference (it still varies against the others), or to
    # every reference (a null player of the averaged game)
    for kind in draw(st.lists(st.sampled_from(["one", "all"]), max_size=2)):
        chosen = owner == draw(st.sampled_from(ids))
        example = draw(st.integers(0, batch - 1))
        if kind == "all":
            references.view(count, -1)[:, chosen] = references.view(count, -1)[:1, chosen]
        flat[example, chosen] = references.view(count, -1)[draw(st.integers(0, count - 1)), chosen]
    value = draw(st.sampled_from(["output", "log_prob"]))
    target = draw(st.sampled_from([None, 1, "list"] if value == "log_prob" else [0, 2, "list"]))
    if target == "list":
        target = [draw(st.integers(0, 2)) for _ in range(batch)]
    return Case(inputs.to(dtype), references.to(dtype), mask, value, target, owner)


#: the token models' vocabulary
VOCABULARY = 6


class TokenModel(torch.nn.Module):
    """Token ids through an embedding, then the harness's tanh MLP: three outputs."""

    def __init__(self, length: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embedding = torch.randn(VOCABULARY, 3, generator=g, dtype=torch.float64)
        self.body = Model(3 * length, seed)
        self.refuse = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.refuse:
            raise AssertionError("the model was called before the input was refused")
        return self.body(self.embedding[ids].flatten(1))


def _model(case: Case, seed: int) -> torch.nn.Module:
    """The harness's model for the case's inputs: token ids or floats."""
    if case.inputs.dtype == torch.long:
        return TokenModel(case.inputs[0].numel(), seed)
    return Model(case.inputs[0].numel(), seed)


def _targets(model: Model, case: Case) -> list[int]:
    batch = case.inputs.shape[0]
    if case.target is None:
        with torch.no_grad():
            return model(case.inputs).argmax(dim=1).tolist()
    return case.target if isinstance(case.target, list) else [case.target] * batch


def _games(model: Model, case: Case, per_reference: bool = False) -> list:
    """Each example's game over the feature ids' positions ``0..d-1``: the mean over the
    references (or, ``per_reference``, one game per reference)."""
    targets = _targets(model, case)
    games = []
    for n in range(case.inputs.shape[0]):
        outputs = _reference_outputs(model, case, n, targets[n])
        if per_reference:
            count = case.references.shape[0]
            games.append([lambda s, b=b, f=outputs: float(f(s)[b]) for b in range(count)])
        else:
            games.append(lambda s, f=outputs: float(f(s).mean()))
    return games


def _reference_outputs(model: Model, case: Case, n: int, target: int):
    """``S -> (B,)``: example ``n``'s value of coalition ``S`` under each reference."""
    ids, x = case.ids, case.inputs.reshape(case.inputs.shape[0], -1)[n]
    refs = case.references.reshape(case.references.shape[0], -1)
    cache: dict[frozenset[int], torch.Tensor] = {}

    def outputs(s: frozenset[int]) -> torch.Tensor:
        if s not in cache:
            keep = torch.zeros(x.shape[0], dtype=torch.bool)
            for position in s:
                keep |= case.owner == ids[position]
            rows = torch.where(keep, x, refs).view(-1, *case.inputs.shape[1:])
            with torch.no_grad():
                out = model(rows).double()
            if case.value == "log_prob":
                out = out.log_softmax(dim=1)
            cache[s] = out[:, target]
        return cache[s]

    return outputs


def _per_feature(attributions: torch.Tensor, case: Case) -> torch.Tensor:
    """``(N, d)`` each feature's value, read off its first element."""
    flat = attributions.reshape(attributions.shape[0], -1).double()
    return flat[:, [int(torch.nonzero(case.owner == i)[0]) for i in case.ids]]


def _call(cls, model: Model, case: Case, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(model).attribute(
            case.inputs,
            target=case.target,
            feature_mask=case.mask,
            references=case.references,
            value=case.value,
            **options,
        )


def _on_the_line(case: Case) -> None:
    """One feature per position (no mask): the line of positions is the graph."""
    case.mask = None
    case.owner = torch.arange(case.inputs.shape[1])


def _tolerance(case: Case) -> float:
    if case.inputs.dtype == torch.long:  # token ids get float32 attributions, as Captum's
        return 1e-6
    return 2e-4 if case.inputs.dtype == torch.float32 else 1e-9


#: the budgeted classes, each with its cheapest settings
BUDGETED = {
    "PairedKernelShap": (cg.PairedKernelShap, {}),
    "PairedKernelShap kernel": (cg.PairedKernelShap, {"estimator": "kernel"}),
    "BayesShap": (cg.BayesShap, {}),
    "BayesShap focused": (cg.BayesShap, {"focused": True}),
    "ShapleySampling": (cg.ShapleySampling, {}),
    "BivariateShapley kernel": (cg.BivariateShapley, {"estimator": "kernel"}),
    "BivariateShapley permutation": (cg.BivariateShapley, {"estimator": "permutation"}),
    "OwenValue": (cg.OwenValue, {}),
    "CShapley": (cg.CShapley, {"k": 2, "over_budget": "kernel"}),
}


@FUZZ
@given(case=cases(), name=st.sampled_from(sorted(BUDGETED)), budget=st.integers(1, 120))
def test_no_class_spends_more_than_its_budget_whatever_the_references(case, name, budget):
    cls, options = BUDGETED[name]
    model = _model(case, budget)
    generator = torch.Generator().manual_seed(budget)
    if name != "OwenValue" and not name.startswith("CShapley"):
        options = {**options, "generator": generator}
    model.refuse = True  # a refusal must come before any model call
    try:
        _call(cls, model, case, budget=budget, **options)
    except (ValueError, TypeError):
        return  # refused before any model call (the model raises otherwise)
    except AssertionError:
        pass  # the call got past the checks: run it for real below
    model.refuse = False
    result = _call(cls, model, case, budget=budget, return_evaluations=True, **options)
    spent = result[-1]
    assert int(spent.max()) <= budget, (name, spent.tolist(), budget)


@FUZZ
@given(case=cases(), seed=st.integers(0, 2**16))
def test_exact_classes_give_the_averaged_games_shapley_values(case, seed):
    model = _model(case, seed)
    d, count = len(case.ids), case.references.shape[0]
    truth = torch.tensor([brute_shapley(v, d) for v in _games(model, case)], dtype=torch.float64)
    tolerance = _tolerance(case) * (1 + float(truth.abs().max()))
    exact = _per_feature(_call(cg.ExactShapley, model, case), case)
    torch.testing.assert_close(exact, truth, atol=tolerance, rtol=0)
    # Masoomi et al.'s matrix (Eq. 6), indexed by the mask's ids on both axes
    ids = torch.tensor(case.ids)
    matrix = _call(cg.BivariateShapley, model, case)[:, ids][:, :, ids].double()
    pairs = torch.stack([brute_bivariate(v, d) for v in _games(model, case)])
    torch.testing.assert_close(matrix, pairs, atol=tolerance, rtol=0, msg="BivariateShapley")
    # one union of every feature: the Owen value is the Shapley value (a hierarchy
    # names every id up to the largest, as Captum's masks number 0..d-1)
    union = list(range(max(case.ids) + 1))
    owen = _per_feature(_call(cg.OwenValue, model, case, hierarchy=[union]), case)
    torch.testing.assert_close(owen, truth, atol=tolerance, rtol=0, msg="OwenValue")
    # a budget that covers every coalition under every reference, and the class's forward
    covering = 2**d * count + int(case.value == "log_prob" and case.target is None)
    for cls in (cg.PairedKernelShap, cg.BayesShap):
        generator = torch.Generator().manual_seed(seed)
        result = _call(cls, model, case, budget=covering, generator=generator)
        torch.testing.assert_close(
            _per_feature(result, case), truth, atol=tolerance, rtol=0, msg=cls.__name__
        )


@FUZZ
@given(
    case=cases(layouts=("vectors", "tokens")),
    seed=st.integers(0, 2**16),
    k=st.integers(1, 3),
    context=st.sampled_from(["baseline", "input"]),
)
def test_l_and_c_shapley_of_the_averaged_game(case, seed, k, context):
    _on_the_line(case)
    model = _model(case, seed)
    line = nx.path_graph(len(case.ids))
    for cls, brute in ((cg.LShapley, brute_l_shapley), (cg.CShapley, brute_c_shapley)):
        truth = torch.tensor(
            [brute(v, line, k, context) for v in _games(model, case)], dtype=torch.float64
        )
        tolerance = _tolerance(case) * (1 + float(truth.abs().max()))
        values = _per_feature(_call(cls, model, case, k=k, context=context), case)
        torch.testing.assert_close(values, truth, atol=tolerance, rtol=0, msg=cls.__name__)


@FUZZ
@given(case=cases(layouts=("vectors", "tokens")), seed=st.integers(0, 2**16))
def test_myerson_values_and_their_interval_over_the_references(case, seed):
    _on_the_line(case)
    model = _model(case, seed)
    d, count = len(case.ids), case.references.shape[0]
    line = nx.path_graph(d)
    truth = torch.tensor([brute_myerson(v, line) for v in _games(model, case)], dtype=torch.float64)
    tolerance = _tolerance(case) * (1 + float(truth.abs().max()))
    values = _per_feature(_call(cg.MyersonValue, model, case), case)
    torch.testing.assert_close(values, truth, atol=tolerance, rtol=0)
    if count < 2:
        return
    per_reference = torch.tensor(
        [[brute_myerson(v, line) for v in games] for games in _games(model, case, True)],
        dtype=torch.float64,
    )  # (N, B, d)
    result = _call(cg.MyersonValue, model, case, return_uncertainty=True)
    z = statistics.NormalDist().inv_cdf(0.975)  # the default confidence, 0.95
    spread = z * per_reference.std(dim=1, correction=1) / count**0.5
    mean, half_width = (_per_feature(t, case) for t in (result.attributions, result.half_width))
    torch.testing.assert_close(mean, truth, atol=tolerance, rtol=0)
    torch.testing.assert_close(half_width, spread, atol=tolerance, rtol=0)


@FUZZ
@given(
    case=cases(layouts=("vectors", "tokens")),
    seed=st.integers(0, 2**16),
    k=st.integers(1, 2),
    context=st.sampled_from(["baseline", "input"]),
)
def test_local_shapley_residuals_of_the_averaged_game(case, seed, k, context):
    _on_the_line(case)
    model = _model(case, seed)
    d = len(case.ids)
    truth = []
    for v in _games(model, case):
        table = torch.tensor(table_of(v, d), dtype=torch.float64)
        truth.append(brute_local_norms(table, nx.path_graph(d), k, context))
    expected = torch.tensor(truth, dtype=torch.float64)
    norms = _per_feature(_call(cg.ShapleyResiduals, model, case, k=k, context=context), case)
    tolerance = _tolerance(case) * (1 + float(expected.abs().max())) * 10
    torch.testing.assert_close(norms, expected, atol=tolerance, rtol=0)


@FUZZ
@given(case=cases(most=4), seed=st.integers(0, 2**16))
def test_shapley_residuals_are_the_averaged_games_residual_norms(case, seed):
    model = _model(case, seed)
    d = len(case.ids)
    truth = []
    for v in _games(model, case):
        truth.append(dense_residuals(table_of(v, d), d)[2])
    expected = torch.tensor(truth, dtype=torch.float64)
    norms = _per_feature(_call(cg.ShapleyResiduals, model, case), case)
    tolerance = _tolerance(case) * (1 + float(expected.abs().max())) * 10
    torch.testing.assert_close(norms, expected, atol=tolerance, rtol=0)


@pytest.mark.parametrize("name", sorted(BUDGETED))
def test_budget_counts_each_reference_here_as_in_the_docs(name):
    """The regression: 3 references and ``budget=100`` at d = 10 cost at most 100."""
    cls, options = BUDGETED[name]
    model = Model(10, seed=0)
    case = Case(
        torch.randn(2, 10, dtype=torch.float64),
        torch.randn(3, 10, dtype=torch.float64),
        None,
        "output",
        0,
        torch.arange(10),
    )
    if name.startswith("CShapley"):
        options = {**options, "k": 1}
    spent = _call(cls, model, case, budget=100, return_evaluations=True, **options)[-1]
    assert 0 < int(spent.max()) <= 100


# ------------------------------------------------------------ what the harness found


@pytest.mark.parametrize(("d", "budget"), [(4, 4), (2, 5), (6, 9), (3, 7)])
def test_focused_bayes_shap_spends_at_most_its_budget(d, budget):
    """Its first round took ``d`` draws even where the budget had fewer, and its rounds
    were sized in coalitions, then drawn as pairs: 6 evaluations at d = 4, budget=4."""
    model = Model(d, seed=d)
    explained = cg.BayesShap(model).attribute(
        torch.randn(2, d, dtype=torch.float64),
        target=0,
        budget=budget,
        focused=True,
        generator=torch.Generator().manual_seed(0),
        return_evaluations=True,
    )
    assert 0 < int(explained.n_evaluations.max()) <= budget


def test_c_shapleys_kernel_variant_of_one_feature_is_its_whole_value():
    """One feature (every element under one id) and a budget below the plan: the kernel
    variant had no set between the empty and full ones and crashed (RuntimeError)."""
    model = Model(6, seed=0)
    x = torch.randn(2, 6, dtype=torch.float64)
    one = torch.zeros(1, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="needs 2 evaluations per example"):
        cg.CShapley(model).attribute(
            x, target=0, k=2, budget=1, over_budget="kernel", feature_mask=one
        )
    phi = cg.CShapley(model).attribute(
        x, target=0, k=2, budget=2, over_budget="kernel", feature_mask=one
    )
    gap = (model(x) - model(torch.zeros_like(x)))[:, 0]
    torch.testing.assert_close(phi[:, 0], gap)


@pytest.mark.parametrize("cls", [cg.PairedKernelShap, cg.BayesShap])
def test_a_budget_too_small_for_one_example_is_refused_before_any_model_call(cls):
    """Example 0 has a feature at its baseline (a game of one feature, 2 evaluations),
    example 1 none (two features: 2 is too few). The smaller game ran first, then the
    larger refused: now the larger games go first."""
    model = Model(2, seed=0)
    model.refuse = True
    x = torch.tensor([[0.0, 1.0], [2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="budget=2"):
        cls(model).attribute(x, target=0, budget=2, generator=torch.Generator().manual_seed(0))
