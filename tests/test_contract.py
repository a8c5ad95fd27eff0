"""The public contract, once, for every public Attribution class.

Captum's argument order and forms (tensor or tuple inputs, float or token ids,
every baseline and target form, shared and per-example masks,
``additional_forward_args``), output shapes and dtypes, refusal of bad input
before any model call, reproducibility, ``budget=`` honoured and reported, and
nothing left on the explainer.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import captum_graphshap as cg

D = 6
N = 3

SHAPLEY_VALUES_ORDER = [
    "inputs",
    "baselines",
    "target",
    "additional_forward_args",
    "feature_mask",
    "perturbations_per_eval",
    "show_progress",
]
SAMPLING_ORDER = [*SHAPLEY_VALUES_ORDER[:5], "n_samples", *SHAPLEY_VALUES_ORDER[5:]]
KERNEL_ORDER = [*SAMPLING_ORDER[:7], "return_input_shape", "show_progress"]

#: class -> (Captum's positional order, cheap reproducible options)
CLASSES = {
    cg.ExactShapley: (SHAPLEY_VALUES_ORDER, {}),
    cg.MyersonValue: (SHAPLEY_VALUES_ORDER, {}),
    cg.LShapley: (SHAPLEY_VALUES_ORDER, {"k": 1}),
    cg.CShapley: (SHAPLEY_VALUES_ORDER, {"k": 1}),
    cg.ShapleyResiduals: (SHAPLEY_VALUES_ORDER, {}),
    cg.ShapleySampling: (SAMPLING_ORDER, {"n_samples": 6}),
    cg.Shear: (SAMPLING_ORDER, {"n_samples": 16}),
    cg.BivariateShapley: (SAMPLING_ORDER, {}),
    cg.PairedKernelShap: (KERNEL_ORDER, {"n_samples": 40}),
    cg.BayesShap: (KERNEL_ORDER, {"n_samples": 40}),
}
IDS = [cls.__name__ for cls in CLASSES]
RANDOMISED = [cg.ShapleySampling, cg.Shear, cg.PairedKernelShap, cg.BayesShap]
#: sampled classes and the options that make budget= apply
BUDGETED = {
    cg.ShapleySampling: {},
    cg.Shear: {"cross_contribution": "hessian"},
    cg.PairedKernelShap: {},
    cg.BayesShap: {},
    cg.BivariateShapley: {"method": "kernel"},
}


class CountingModel(nn.Module):
    """A smooth model of one or two inputs that counts its calls and rows."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(D, 8), nn.Tanh(), nn.Linear(8, 3))
        self.calls = 0
        self.rows: list[int] = []

    def forward(self, x, extra=None, scale=None):
        self.calls += 1
        self.rows.append(x.shape[0])
        if extra is not None:
            x = torch.cat([x, extra], dim=1)
        out = self.net(x.float())
        return out * scale[:, None] if scale is not None else out


class TokenModel(nn.Module):
    """Token ids -> class scores (an embedding bag), pad id 0."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.embedding = nn.Embedding(20, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, tokens):
        return self.head(torch.tanh(self.embedding(tokens).sum(dim=1)))


def options_for(cls, **extra):
    out = dict(CLASSES[cls][1])
    if cls in RANDOMISED or extra.get("method") in ("kernel", "sampling"):
        out["generator"] = torch.Generator().manual_seed(0)
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        out.setdefault("graph", None)
    out.update(extra)
    return out


X = torch.randn(N, D, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_captum_positional_order_and_keyword_only_options(cls):
    order, _ = CLASSES[cls]
    parameters = list(inspect.signature(cls.attribute).parameters.values())[1:]
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == order
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters[len(order) :])
    assert cls.__doc__ and ">>>" in cls.__doc__


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize(
    "baselines",
    [None, 0.5, torch.zeros(1, D), torch.full((N, D), -0.25)],
    ids=["none", "scalar", "batch-1", "batch-N"],
)
def test_tensor_inputs_every_baseline_form(cls, baselines):
    out = cls(CountingModel()).attribute(X, baselines=baselines, target=1, **options_for(cls))
    expected = (N, D, D) if cls is cg.BivariateShapley else X.shape
    assert out.shape == expected and out.dtype == X.dtype and out.device == X.device
    assert bool(torch.isfinite(out).all())


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize(
    "target", [2, torch.tensor([0, 1, 2]), [2, 1, 0]], ids=["int", "tensor", "list"]
)
def test_every_target_form_selects_the_same_outputs(cls, target):
    as_list = [2] * N if isinstance(target, int) else list(torch.as_tensor(target).tolist())
    model = CountingModel()
    together = cls(model).attribute(X, target=target, **options_for(cls))
    for row, label in enumerate(as_list):
        alone = cls(model).attribute(X[row : row + 1], target=label, **options_for(cls))
        if cls in RANDOMISED:
            assert alone.shape[1:] == together.shape[1:]
        else:
            torch.testing.assert_close(together[row], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_tuple_inputs_with_a_mask_spanning_both_and_additional_args(cls):
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        graph = cg.LineGraph(4)
        extra = {"graph": graph}
    else:
        extra = {}
    left, right = X[:, :4], X[:, 4:]
    mask = (torch.tensor([[0, 0, 1, 2]]), torch.tensor([[2, 3]]))  # feature 2 spans both
    scale = torch.tensor([1.0, 2.0, 0.5])
    out = cls(CountingModel()).attribute(
        (left, right),
        baselines=(0.0, torch.zeros(1, 2)),
        target=0,
        additional_forward_args=(scale,),
        feature_mask=mask,
        **options_for(cls, **extra),
    )
    if cls is cg.BivariateShapley:
        assert out.shape == (N, 4, 4)
        return
    assert isinstance(out, tuple) and [t.shape for t in out] == [left.shape, right.shape]
    # elements of one feature share its value, across the two tensors
    torch.testing.assert_close(out[0][:, 3], out[1][:, 0])
    torch.testing.assert_close(out[0][:, 0], out[0][:, 1])


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_per_example_masks(cls):
    masks = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 4, 5], [0, 1, 1, 1, 1, 2]])
    extra = {}
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        extra["graph"] = [cg.LineGraph(3), cg.LineGraph(6), cg.LineGraph(3)]
    out = cls(CountingModel()).attribute(
        X, target=1, feature_mask=masks, **options_for(cls, **extra)
    )
    if cls is cg.BivariateShapley:
        assert out.shape == (N, 6, 6)
        return
    assert out.shape == X.shape
    torch.testing.assert_close(out[0, 0], out[0, 1])  # grouped elements share a value


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_token_ids(cls):
    tokens = torch.randint(1, 20, (N, 5), generator=torch.Generator().manual_seed(3))
    explainer = cls(TokenModel())
    if cls is cg.Shear:
        model = CountingModel()
        with pytest.raises(TypeError, match="needs gradients"):
            cls(model).attribute(tokens, baselines=0, target=0)
        assert model.calls == 0
        return
    out = explainer.attribute(tokens, baselines=0, target=1, **options_for(cls))
    expected = (N, 5, 5) if cls is cg.BivariateShapley else tokens.shape
    assert out.shape == expected and out.dtype == torch.get_default_dtype()


BAD_INPUT = [
    ("NaN input", dict(inputs=torch.tensor([[float("nan")] * D])), ValueError, "NaN"),
    ("baseline shape", dict(baselines=torch.zeros(1, D + 1)), ValueError, "baselines"),
    ("unknown option", dict(not_an_option=1), TypeError, "not_an_option"),
    ("show_progress", dict(show_progress="yes"), TypeError, "show_progress"),
    (
        "mask shape",
        dict(feature_mask=torch.zeros(1, D + 2, dtype=torch.long)),
        ValueError,
        "feature_mask",
    ),
    ("mask dtype", dict(feature_mask=torch.zeros(1, D)), TypeError, "feature_mask"),
]


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
@pytest.mark.parametrize("case", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_refused_before_any_model_call(cls, case):
    _, kwargs, error, fragment = case
    model = CountingModel()
    call = {"inputs": X, "target": 0, **options_for(cls), **kwargs}
    with pytest.raises(error, match=fragment):
        cls(model).attribute(**call)
    assert model.calls == 0


@pytest.mark.parametrize("cls", RANDOMISED, ids=[c.__name__ for c in RANDOMISED])
def test_reproducible_with_a_generator(cls):
    model = CountingModel()

    def run(seed):
        options = options_for(cls, generator=torch.Generator().manual_seed(seed))
        return cls(model).attribute(X, target=1, **options)

    torch.testing.assert_close(run(4), run(4), atol=0, rtol=0)
    assert not torch.equal(run(4), run(5))


@pytest.mark.parametrize("cls", BUDGETED, ids=[c.__name__ for c in BUDGETED])
@pytest.mark.parametrize("budget", [60, 150, 400])
def test_budget_is_honoured_and_reported(cls, budget):
    model = CountingModel()
    options = options_for(cls, budget=budget, **BUDGETED[cls])
    options.pop("n_samples", None)
    result = cls(model).attribute(X, target=1, return_evaluations=True, **options)
    assert result.n_evaluations.shape == (N,)
    assert int(result.n_evaluations.max()) <= budget
    if cls is not cg.Shear:  # SHEAR also counts derivative passes, not model rows
        assert int(result.n_evaluations.sum()) == sum(model.rows)


@pytest.mark.parametrize("cls", BUDGETED, ids=[c.__name__ for c in BUDGETED])
def test_budget_with_n_samples_or_too_small_is_refused_before_any_model_call(cls):
    model = CountingModel()
    options = options_for(cls, **BUDGETED[cls])
    options["n_samples"] = options.get("n_samples") or 10
    with pytest.raises(ValueError, match="budget"):
        cls(model).attribute(X, target=1, budget=100, **options)
    options.pop("n_samples")
    with pytest.raises(ValueError, match="budget"):
        cls(model).attribute(X, target=1, budget=1, **options)
    assert model.calls == 0


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_extras_are_a_named_tuple_and_nothing_stays_on_the_explainer(cls):
    explainer = cls(CountingModel())
    before = set(vars(explainer))
    result = explainer.attribute(X, target=1, return_evaluations=True, **options_for(cls))
    assert result._fields[0] == "attributions" and result._fields[-1] == "n_evaluations"
    _, count = result  # unpacks like a pair
    assert count.dtype == torch.long and bool((count > 0).all())
    assert set(vars(explainer)) == before
