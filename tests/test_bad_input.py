"""Every bad argument gets a ValueError/TypeError naming it, before any model call."""

from __future__ import annotations

import pytest
import torch

from captum_graphshap import ExactShapley, FeatureGraph, LineGraph, MyersonValue


class CountingModel(torch.nn.Module):
    def __init__(self, out: int = 3) -> None:
        super().__init__()
        self.calls = 0
        self.out = out

    def forward(self, *inputs, **kwargs):
        self.calls += 1
        flat = torch.cat([x.flatten(1).float() for x in inputs], dim=1)
        return flat.sum(dim=1, keepdim=True).repeat(1, self.out)


X = torch.randn(2, 5)

# (name, call kwargs, error type, message fragment). The fragment names the argument.
CASES = [
    ("batch sizes differ", dict(inputs=(X, torch.randn(3, 2))), ValueError, "batch size"),
    ("inputs not a tensor", dict(inputs=[1.0, 2.0]), TypeError, "inputs"),
    (
        "NaN in inputs",
        dict(inputs=torch.tensor([[1.0, float("nan")]])),
        ValueError,
        "inputs contains NaN",
    ),
    (
        "baseline does not broadcast",
        dict(baselines=torch.zeros(1, 4)),
        ValueError,
        "baselines has shape",
    ),
    (
        "baseline batch mismatch",
        dict(baselines=torch.zeros(3, 5)),
        ValueError,
        "baselines has shape",
    ),
    ("baseline NaN", dict(baselines=float("nan")), ValueError, "baselines"),
    ("baseline count", dict(baselines=(0.0, 1.0)), ValueError, "baselines has 2 entries"),
    (
        "baseline on another device",
        dict(baselines=torch.zeros(1, 5, device="meta")),
        ValueError,
        "move it",
    ),
    ("target list length", dict(target=[0, 1, 2]), ValueError, "target list has 3 entries"),
    ("target float tensor", dict(target=torch.tensor([0.5, 1.0])), TypeError, "target"),
    ("target bad type", dict(target="cat"), TypeError, "target"),
    (
        "mask wrong shape",
        dict(feature_mask=torch.zeros(1, 4, dtype=torch.long)),
        ValueError,
        "feature_mask has shape",
    ),
    ("mask float", dict(feature_mask=torch.zeros(1, 5)), TypeError, "feature_mask has dtype"),
    (
        "mask negative",
        dict(feature_mask=torch.tensor([[0, -1, 1, 2, 3]])),
        ValueError,
        "feature_mask has negative",
    ),
    (
        "mask count",
        dict(feature_mask=(torch.zeros(1, 5, dtype=torch.long),) * 2),
        ValueError,
        "feature_mask has 2",
    ),
    ("unknown value", dict(value="logits"), ValueError, "value must be one of"),
    ("ppe zero", dict(perturbations_per_eval=0), ValueError, "perturbations_per_eval"),
    ("ppe float", dict(perturbations_per_eval=2.5), TypeError, "perturbations_per_eval"),
    (
        "baselines and references",
        dict(baselines=0.0, references=torch.zeros(3, 5)),
        ValueError,
        "not both",
    ),
    ("references shape", dict(references=torch.zeros(3, 4)), ValueError, "references has shape"),
    ("too many features", dict(inputs=torch.randn(1, 21)), ValueError, "2,097,152 coalitions"),
]


# A line of 21 features is a small Myerson plan, so that case is ExactShapley's only;
# MyersonValue's own size refusal is tested below.
PAIRS = [
    (m, c[0])
    for m in (ExactShapley, MyersonValue)
    for c in CASES
    if not (m is MyersonValue and c[0] == "too many features")
]


@pytest.mark.parametrize(("method", "name"), PAIRS, ids=[f"{m.__name__}-{n}" for m, n in PAIRS])
def test_bad_argument_is_refused_before_the_model_runs(name, method):
    _, kwargs, error, fragment = next(c for c in CASES if c[0] == name)
    kwargs = dict(kwargs)
    inputs = kwargs.pop("inputs", X)
    if method is MyersonValue and isinstance(inputs, tuple) and name != "batch sizes differ":
        kwargs["graph"] = LineGraph(5)
    kwargs.setdefault("target", 0)
    model = CountingModel()
    with pytest.raises(error, match=fragment):
        method(model).attribute(inputs, **kwargs)
    assert model.calls == 0


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="bogus"):
        ExactShapley(CountingModel()).attribute(X, target=0, bogus=1)


def test_target_out_of_range_names_target_and_range():
    with pytest.raises(ValueError, match=r"target 7 is out of range .* valid indices are 0..2"):
        ExactShapley(CountingModel()).attribute(X, target=7)


def test_non_integer_token_baseline():
    tokens = torch.randint(0, 10, (2, 4))
    model = CountingModel()
    with pytest.raises(ValueError, match="baselines has non-integer values"):
        ExactShapley(model).attribute(tokens, baselines=0.5, target=0)
    assert model.calls == 0


def test_myerson_graph_errors():
    model = CountingModel()
    with pytest.raises(ValueError, match="graph has 4 nodes but feature_mask defines 5"):
        MyersonValue(model).attribute(X, target=0, graph=LineGraph(4))
    with pytest.raises(TypeError, match="graph must be a FeatureGraph"):
        MyersonValue(model).attribute(X, target=0, graph="line")
    with pytest.raises(ValueError, match="graph is a list of 3 graphs"):
        MyersonValue(model).attribute(X, target=0, graph=[LineGraph(5)] * 3)
    with pytest.raises(ValueError, match="pass graph="):
        MyersonValue(model).attribute((X, X), target=0)
    assert model.calls == 0


def test_myerson_refuses_an_exploding_plan_with_the_count():
    complete = FeatureGraph.from_adjacency(torch.ones(21, 21))
    model = CountingModel()
    with pytest.raises(ValueError, match=r"more than 1,?048,?57\d"):
        MyersonValue(model).attribute(torch.randn(1, 21), target=0, graph=complete)
    assert model.calls == 0
