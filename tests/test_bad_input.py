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


# The newcomer's mistakes: each error says what to do, before any model call.


def test_a_misspelt_captum_argument_suggests_the_right_name():
    from captum_graphshap import PairedKernelShap

    model = CountingModel()
    with pytest.raises(TypeError, match=r"'baseline': did you mean 'baselines'\?"):
        PairedKernelShap(model).attribute(X, baseline=0.0, target=1)
    with pytest.raises(TypeError, match=r"'budgte': did you mean 'budget'\?"):
        PairedKernelShap(model).attribute(X, target=1, budgte=64)
    assert model.calls == 0


def test_an_unrelated_unknown_option_gets_no_suggestion():
    with pytest.raises(TypeError) as error:
        ExactShapley(CountingModel()).attribute(X, target=1, colour="red")
    assert "'colour'" in str(error.value) and "did you mean" not in str(error.value)


def test_a_plan_too_large_to_read_states_its_count_as_a_power_of_two():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2))
    with pytest.raises(ValueError) as error:
        ExactShapley(model).attribute(torch.rand(1, 1, 28, 28), target=1)
    message = str(error.value)
    assert "would evaluate 2^784 coalitions per example" in message
    assert "d = 784" in message and "1,048,576 (2^20)" in message
    assert not any(len(word) > 30 for word in message.split())  # no 237-digit count


def test_count_text_writes_digits_then_powers_of_two():
    from captum_graphshap.plans.limits import count_text

    assert count_text(234_952) == "234,952"
    assert count_text(10**15) == "1,000,000,000,000,000"
    assert count_text(2**784) == "2^784"
    assert count_text(3 * 2**60) == "about 2^61.6"  # log2(3) + 60 = 61.58


def test_a_model_class_instead_of_an_instance_says_to_build_one():
    with pytest.raises(TypeError) as error:
        ExactShapley(torch.nn.Linear)
    message = str(error.value)
    assert "got the class Linear, not a model: pass an instance" in message
    assert "`ExactShapley(Linear(in_features, out_features))`" in message
    assert "`ExactShapley(Linear(8, 3))`" in message


def test_a_model_instance_and_a_plain_function_are_accepted():
    ExactShapley(torch.nn.Linear(5, 3))
    ExactShapley(lambda x: x.sum(dim=1, keepdim=True))


def test_integer_inputs_to_a_float_model_name_the_cast_and_the_embedding():
    model = torch.nn.Linear(5, 3)
    ids = torch.randint(0, 4, (2, 5))
    with pytest.raises(TypeError) as error:
        ExactShapley(model).attribute(ids, target=1)
    message = str(error.value)
    assert "integer inputs (int64) to a float model" in message
    assert "cast with `.float()`" in message and "embedding" in message
    assert isinstance(error.value.__cause__, RuntimeError)  # torch's own error is kept
    # the same inputs cast as the message says are explained, and token ids to an
    # embedding work as they are
    assert ExactShapley(model).attribute(ids.float(), target=1).shape == (2, 5)
    embedding = torch.nn.Sequential(
        torch.nn.Embedding(4, 2), torch.nn.Flatten(), torch.nn.Linear(10, 3)
    )
    assert ExactShapley(embedding).attribute(ids, baselines=0, target=1).shape == (2, 5)


def test_a_float_model_error_on_float_inputs_is_left_as_torch_raised_it():
    def broken(x):
        raise RuntimeError("mat1 and mat2 must have the same dtype, but got Float and Half")

    with pytest.raises(RuntimeError, match="Float and Half"):
        ExactShapley(broken).attribute(X, target=0)


@pytest.mark.parametrize("d", [2, 5, 8])
def test_the_kernel_estimator_refuses_a_budget_below_its_minimum(d):
    from captum_graphshap import PairedKernelShap

    model = CountingModel()
    x = torch.randn(2, d)
    with pytest.raises(ValueError) as error:
        PairedKernelShap(model).attribute(x, target=1, estimator="kernel", budget=2 * d - 1)
    message = str(error.value)
    assert f"budget={2 * d - 1} is too small" in message and f"budget >= 2 d = {2 * d}" in message
    assert model.calls == 0


def test_the_kernel_estimators_minimum_budget_determines_the_fit():
    # d - 1 distinct complementary pairs and efficiency pin every attribution of a
    # linear game (exact there once determined), and one pair fewer cannot: at
    # budget 2 d the fit is exact for some draw, at 2 d - 2 it is refused.
    from captum_graphshap import PairedKernelShap

    d = 4
    model = torch.nn.Linear(d, 1)
    x = torch.randn(3, d)
    exact = ExactShapley(model).attribute(x)
    errors = [
        float(
            (
                PairedKernelShap(model).attribute(
                    x, estimator="kernel", budget=2 * d, generator=torch.Generator().manual_seed(s)
                )
                - exact
            )
            .abs()
            .max()
        )
        for s in range(10)
    ]
    assert min(errors) < 1e-5, errors
    with pytest.raises(ValueError, match="too small"):
        PairedKernelShap(model).attribute(x, estimator="kernel", budget=2 * d - 2)
