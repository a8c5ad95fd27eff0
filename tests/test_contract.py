"""The public contract, once, for every public Attribution class.

Captum's argument order and forms (tensor or tuple inputs, float or token ids,
every baseline and target form, shared and per-example masks,
``additional_forward_args``), output shapes, dtypes and devices, values
(against Captum's ``ShapleyValues`` where a class is exact, efficiency where a
sampled class guarantees it), refusal of bad input before any model call,
reproducibility, the result convention (NamedTuples whose first field is
``attributions``; ``n_evaluations`` equal to the model rows counted per
example), ``budget=`` honoured and reported, and nothing left on the explainer.
"""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
import torch
from captum.attr import ShapleyValues
from torch import nn

import captum_graphshap as cg

D = 6
N = 3

#: Cases that fail only because a class is not on the base adapter yet, keyed by
#: (class name, check) -> reason; they are xfail(strict=False). Empty once every
#: class is converted: delete an entry when its case passes.
XFAIL: dict[tuple[str, str], str] = {}

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

#: class -> (Captum's positional order, cheap options for a d = 6 call)
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
RANDOMISED = [cg.ShapleySampling, cg.Shear, cg.PairedKernelShap, cg.BayesShap]
GRAPH_CLASSES = (cg.MyersonValue, cg.LShapley, cg.CShapley)
#: classes whose attributions sum to f(x) - f(baseline) whatever the model
#: (Myerson on the connected line graph inferred for (N, L) inputs)
EFFICIENT = [
    cg.ExactShapley,
    cg.MyersonValue,
    cg.ShapleySampling,
    cg.PairedKernelShap,
    cg.BayesShap,
]
#: sampled classes (and the options that make budget= apply)
BUDGETED = {
    "ShapleySampling": (cg.ShapleySampling, {}),
    "Shear": (cg.Shear, {"cross_contribution": "hessian"}),
    "PairedKernelShap": (cg.PairedKernelShap, {}),
    "BayesShap": (cg.BayesShap, {}),
    "BivariateShapley-permutation": (cg.BivariateShapley, {"estimator": "permutation"}),
    "BivariateShapley-kernel": (cg.BivariateShapley, {"estimator": "kernel"}),
}
#: forward equivalents Shear adds per example for its Hessian cross-contributions
#: (ShearOptions: one gradient-tracked check forward plus 4 per Hessian-vector
#: product, d + 1 of them with "auto"'s probe); an exact plan (n_samples >= 2^d) needs none.
SHEAR_HESSIAN_COST = 1 + 4 * (D + 1)


def cases(classes, check):
    """``pytest.param`` per class, xfail where ``XFAIL`` lists (class, check)."""
    out = []
    for cls in classes:
        reason = XFAIL.get((cls.__name__, check))
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        out.append(pytest.param(cls, id=cls.__name__, marks=marks))
    return out


class CountingModel(nn.Module):
    """A smooth model of one or two inputs that counts its calls and rows.

    ``ids`` (an ``additional_forward_args`` tensor of batch N, ``arange(N)``)
    is expanded per perturbation by the engine, so the rows each example got
    can be counted; ``scale`` (batch N) and ``factor`` (a Python number)
    multiply the output. Rows evaluated with gradients enabled are derivative
    passes (Shear), counted apart.
    """

    def __init__(
        self, d: int = D, outputs: int = 3, dtype=torch.float32, shape=None, seed: int = 0
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, outputs)).to(dtype)
        self.dtype = dtype
        self.shape = shape
        self.calls = 0
        self.rows = 0
        self.grad_rows = 0
        self.per_example = torch.zeros(N, dtype=torch.long)

    def forward(self, x, extra=None, ids=None, scale=None, factor=None):
        self.calls += 1
        if torch.is_grad_enabled():
            self.grad_rows += x.shape[0]
        else:
            self.rows += x.shape[0]
            if ids is not None:
                self.per_example += torch.bincount(ids, minlength=N)
        if extra is not None:
            x = torch.cat([x, extra], dim=1)
        out = self.net(x.to(self.dtype))
        if scale is not None:
            out = out * scale[:, None]
        if factor is not None:
            out = out * factor
        return out if self.shape is None else out.reshape(-1, *self.shape)


class TokenModel(nn.Module):
    """Token ids -> class scores (an embedding bag), pad id 0."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.embedding = nn.Embedding(20, 4)
        self.head = nn.Linear(4, 3)
        self.calls = 0

    def forward(self, tokens):
        self.calls += 1
        return self.head(torch.tanh(self.embedding(tokens).sum(dim=1)))


def options_for(cls, **extra):
    """The class's cheap options, with a fresh seeded generator where it draws."""
    out = dict(CLASSES[cls][1])
    if cls in RANDOMISED or extra.get("estimator") in ("kernel", "permutation"):
        out["generator"] = torch.Generator().manual_seed(0)
    out.update(extra)
    return out


X = torch.randn(N, D, generator=torch.Generator().manual_seed(2))


def expected_shape(cls, inputs):
    if cls is cg.BivariateShapley:
        d = inputs.shape[1]
        return (inputs.shape[0], d, d)
    return inputs.shape


# ------------------------------------------------------------------ signature


@pytest.mark.parametrize("cls", cases(CLASSES, "signature"))
def test_captum_positional_order_and_keyword_only_options(cls):
    order, _ = CLASSES[cls]
    parameters = list(inspect.signature(cls.attribute).parameters.values())[1:]
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == order
    rest = parameters[len(order) :]
    assert rest and all(p.kind is p.KEYWORD_ONLY for p in rest)
    assert {"return_evaluations", "references", "value"} <= {p.name for p in rest}
    if cls in (*RANDOMISED, cg.BivariateShapley):
        assert {"generator", "budget"} <= {p.name for p in rest}


# ------------------------------------------------------------------ input forms


@pytest.mark.parametrize("cls", cases(CLASSES, "baselines"))
@pytest.mark.parametrize(
    "baselines",
    [None, 0.5, torch.zeros(1, D), torch.full((N, D), -0.25)],
    ids=["none", "scalar", "batch-1", "batch-N"],
)
def test_tensor_inputs_every_baseline_form(cls, baselines):
    out = cls(CountingModel()).attribute(X, baselines=baselines, target=1, **options_for(cls))
    assert isinstance(out, torch.Tensor)
    assert out.shape == expected_shape(cls, X)
    assert out.dtype == X.dtype and out.device == X.device
    assert bool(torch.isfinite(out).all()) and bool(out.abs().sum() > 0)
    # a baseline given as a scalar, a batch-1 or a batch-N tensor is the same baseline
    if baselines is not None and not isinstance(baselines, float):
        full = baselines.expand(N, D).clone()
        again = cls(CountingModel()).attribute(X, baselines=full, target=1, **options_for(cls))
        torch.testing.assert_close(out, again, atol=0, rtol=0)


@pytest.mark.parametrize("cls", cases(CLASSES, "float64"))
def test_float64_inputs_keep_their_dtype(cls):
    model = CountingModel(dtype=torch.float64)
    out = cls(model).attribute(X.double(), target=0, **options_for(cls))
    assert out.dtype == torch.float64 and out.shape == expected_shape(cls, X)


@pytest.mark.parametrize("cls", cases(CLASSES, "targets"))
def test_every_target_form_selects_the_same_outputs(cls):
    model = CountingModel()

    def run(inputs, target):
        return cls(model).attribute(inputs, target=target, **options_for(cls))

    as_int = run(X, 2)
    torch.testing.assert_close(as_int, run(X, [2] * N), atol=0, rtol=0)
    as_list = run(X, [0, 1, 2])
    torch.testing.assert_close(as_list, run(X, torch.tensor([0, 1, 2])), atol=0, rtol=0)
    assert not torch.equal(as_list, as_int)
    if cls not in RANDOMISED:  # per-row calls draw other samples
        for row in range(N):
            alone = run(X[row : row + 1], row)
            torch.testing.assert_close(as_list[row], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", cases(CLASSES, "tuple target"))
def test_tuple_target_of_a_multi_dimensional_output(cls):
    flat = cls(CountingModel(outputs=6)).attribute(X, target=5, **options_for(cls))
    shaped = CountingModel(outputs=6, shape=(2, 3))
    out = cls(shaped).attribute(X, target=(1, 2), **options_for(cls))
    torch.testing.assert_close(out, flat, atol=0, rtol=0)


@pytest.mark.parametrize("cls", cases(CLASSES, "tuple inputs"))
def test_tuple_inputs_with_a_mask_spanning_both(cls):
    extra = {"graph": cg.LineGraph(4)} if cls in GRAPH_CLASSES else {}
    left, right = X[:, :4], X[:, 4:]
    mask = (torch.tensor([[0, 0, 1, 2]]), torch.tensor([[2, 3]]))  # feature 2 spans both
    out = cls(CountingModel()).attribute(
        (left, right),
        baselines=(0.0, torch.zeros(1, 2)),
        target=0,
        feature_mask=mask,
        **options_for(cls, **extra),
    )
    if cls is cg.BivariateShapley:
        assert isinstance(out, torch.Tensor) and out.shape == (N, 4, 4)
        return
    assert isinstance(out, tuple) and [t.shape for t in out] == [left.shape, right.shape]
    assert all(t.dtype == X.dtype for t in out)
    # elements of one feature share its value, across the two tensors
    torch.testing.assert_close(out[0][:, 3], out[1][:, 0], atol=0, rtol=0)
    torch.testing.assert_close(out[0][:, 0], out[0][:, 1], atol=0, rtol=0)
    if cls in EFFICIENT:
        model = CountingModel()
        with torch.no_grad():
            gap = (
                model(left, right)[:, 0]
                - model(torch.zeros_like(left), torch.zeros_like(right))[:, 0]
            )
        total = out[0][:, [0, 2, 3]].sum(1) + out[1][:, 1]  # one element per feature
        torch.testing.assert_close(total, gap, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cls", cases(CLASSES, "additional_forward_args"))
def test_additional_forward_args_are_expanded_per_perturbation(cls):
    """A per-example scale (batch N) and a Python factor: the games are scaled,
    so (same draws) every example's attributions are scaled by scale * factor."""
    scale = torch.tensor([1.0, 2.0, 0.5])
    plain = cls(CountingModel()).attribute(X, target=1, **options_for(cls))
    scaled = cls(CountingModel()).attribute(
        X,
        target=1,
        additional_forward_args=(None, None, scale, 3.0),
        **options_for(cls),
    )
    factor = (3.0 * scale).view(N, *[1] * (plain.dim() - 1))
    torch.testing.assert_close(scaled, plain * factor, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cls", cases(CLASSES, "per-example masks"))
def test_per_example_masks(cls):
    masks = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 4, 5], [0, 1, 1, 1, 1, 2]])
    extra = {}
    if cls in GRAPH_CLASSES:
        extra["graph"] = [cg.LineGraph(3), cg.LineGraph(6), cg.LineGraph(3)]
    model = CountingModel()
    out = cls(model).attribute(X, target=1, feature_mask=masks, **options_for(cls, **extra))
    if cls is cg.BivariateShapley:
        assert out.shape == (N, 6, 6)
        # example 0 has 3 features: rows and columns of the unused ids are 0
        assert bool((out[0, 3:] == 0).all()) and bool((out[0, :, 3:] == 0).all())
        return
    assert out.shape == X.shape
    torch.testing.assert_close(out[0, 0], out[0, 1], atol=0, rtol=0)
    torch.testing.assert_close(out[2, 1], out[2, 4], atol=0, rtol=0)
    if cls in EFFICIENT:
        with torch.no_grad():
            gap = model(X)[:, 1] - model(torch.zeros_like(X))[:, 1]
        once = torch.stack([out[0, [0, 2, 4]].sum(), out[1].sum(), out[2, [0, 1, 5]].sum()])
        torch.testing.assert_close(once, gap, atol=1e-5, rtol=1e-4)


TOKENS = torch.randint(1, 20, (N, 5), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("cls", cases(CLASSES, "token ids"))
def test_token_ids(cls):
    model = TokenModel()
    if cls is cg.Shear:
        with pytest.raises(TypeError, match="needs gradients"):
            cls(model).attribute(TOKENS, baselines=0, target=0, **options_for(cls))
        assert model.calls == 0
        return
    out = cls(model).attribute(TOKENS, baselines=0, target=1, **options_for(cls))
    assert out.shape == expected_shape(cls, TOKENS)
    assert out.dtype == torch.get_default_dtype() and out.device == TOKENS.device
    assert bool(torch.isfinite(out).all()) and bool(out.abs().sum() > 0)
    if cls in EFFICIENT:
        with torch.no_grad():
            gap = model(TOKENS)[:, 1] - model(torch.zeros_like(TOKENS))[:, 1]
        torch.testing.assert_close(out.sum(1), gap, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------ values


def _complete(d):
    return cg.FeatureGraph.from_adjacency(torch.ones(d, d) - torch.eye(d))


#: (label, class, options): classes whose values are exactly Shapley's here
EXACT = [
    ("ExactShapley", cg.ExactShapley, {}),
    ("MyersonValue-complete-graph", cg.MyersonValue, {"graph": _complete(D)}),
    ("LShapley-k=d-1-line", cg.LShapley, {"k": D - 1, "graph": cg.LineGraph(D)}),
    ("CShapley-complete-graph", cg.CShapley, {"k": 1, "graph": _complete(D)}),
    ("Shear-n_samples=2^d", cg.Shear, {"n_samples": 2**D}),
    ("BivariateShapley-shapley", cg.BivariateShapley, {"return_shapley": True}),
]


@pytest.fixture(scope="module")
def captum_shapley():
    model = CountingModel(dtype=torch.float64)
    x, baselines = X.double(), torch.full((1, D), 0.3, dtype=torch.float64)
    expected = ShapleyValues(model).attribute(
        x, baselines=baselines, target=[0, 2, 1], perturbations_per_eval=64
    )
    # Captum sums in the default dtype (float32) even for float64 inputs
    return model, x, baselines, expected.double()


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        pytest.param(
            c,
            o,
            id=label,
            marks=[pytest.mark.xfail(reason=XFAIL[(c.__name__, "values")], strict=False)]
            if (c.__name__, "values") in XFAIL
            else [],
        )
        for label, c, o in EXACT
    ],
)
def test_exact_values_equal_captums_shapley_values(cls, options, captum_shapley):
    model, x, baselines, expected = captum_shapley
    out = cls(model).attribute(x, baselines=baselines, target=[0, 2, 1], **options)
    if cls is cg.BivariateShapley:
        out = out.shapley
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", cases([c for c in EFFICIENT if c in RANDOMISED], "efficiency"))
def test_sampled_classes_are_efficient(cls, captum_shapley):
    model, x, baselines, expected = captum_shapley
    out = cls(model).attribute(x, baselines=baselines, target=[0, 2, 1], **options_for(cls))
    torch.testing.assert_close(out.sum(1), expected.sum(1), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, expected, atol=1e-5)  # sampled, not exact here


def _brute_bivariate(v, d):
    """E2[i, j] = sum over S of D - i containing j of the Shapley weight times v(S+i) - v(S)."""
    out = torch.zeros(d, d, dtype=torch.float64)
    for i, j in itertools.permutations(range(d), 2):
        others = [k for k in range(d) if k not in (i, j)]
        for size in range(len(others) + 1):
            weight = math.factorial(size + 1) * math.factorial(d - size - 2) / math.factorial(d)
            for subset in itertools.combinations(others, size):
                s = frozenset(subset) | {j}
                out[i, j] += weight * (v(s | {i}) - v(s))
    return out


def test_bivariate_exact_matrix_against_its_definition(captum_shapley):
    model, x, baselines, _ = captum_shapley
    out = cg.BivariateShapley(model).attribute(x[:1], baselines=baselines, target=0)
    assert bool((out.diagonal(dim1=1, dim2=2) == 0).all())

    def v(s):
        row = torch.where(torch.isin(torch.arange(D), torch.tensor(sorted(s))), x[0], baselines[0])
        with torch.no_grad():
            return float(model(row[None])[0, 0])

    torch.testing.assert_close(out[0], _brute_bivariate(v, D), atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("estimator", ["permutation", "kernel"])
def test_bivariate_sampled_matrices_have_a_zero_diagonal(estimator):
    out = cg.BivariateShapley(CountingModel()).attribute(
        X, target=0, **options_for(cg.BivariateShapley, estimator=estimator)
    )
    assert out.shape == (N, D, D)
    assert bool((out.diagonal(dim1=1, dim2=2) == 0).all()) and bool(out.abs().sum() > 0)


class _Interaction(nn.Module):
    """f = x1 + 2 x2 x3 (output 0) and the additive x1 + x2 + x3 (output 1)."""

    def forward(self, x):
        return torch.stack([x[:, 0] + 2 * x[:, 1] * x[:, 2], x.sum(1)], dim=1)


def test_shapley_residuals_values():
    x = torch.ones(1, 3, dtype=torch.float64)
    residuals = cg.ShapleyResiduals(_Interaction())
    out = residuals.attribute(x, baselines=0.0, target=0)
    s = math.sqrt(2)
    torch.testing.assert_close(out, torch.tensor([[0.0, s, s]], dtype=torch.float64))
    additive = residuals.attribute(x, baselines=0.0, target=1)
    torch.testing.assert_close(additive, torch.zeros_like(x), atol=1e-12, rtol=0)


# ------------------------------------------------------------------ bad input


META = torch.zeros(1, D, device="meta")
BAD_INPUT = [
    ("NaN input", dict(inputs=torch.full((1, D), float("nan"))), ValueError, "NaN"),
    ("baseline shape", dict(baselines=torch.zeros(1, D + 1)), ValueError, "baselines"),
    ("baseline batch", dict(baselines=torch.zeros(2, D)), ValueError, "baselines"),
    ("baseline device", dict(baselines=META), ValueError, "meta"),
    ("unknown option", dict(not_an_option=1), TypeError, "not_an_option"),
    ("show_progress", dict(show_progress="yes"), TypeError, "show_progress"),
    (
        "mask shape",
        dict(feature_mask=torch.zeros(1, D + 2, dtype=torch.long)),
        ValueError,
        "feature_mask",
    ),
    ("mask dtype", dict(feature_mask=torch.zeros(1, D)), TypeError, "feature_mask"),
    ("target list length", dict(target=[0, 1]), ValueError, "target"),
]


@pytest.mark.parametrize("cls", cases(CLASSES, "bad input"))
@pytest.mark.parametrize("case", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_refused_before_any_model_call(cls, case):
    _, kwargs, error, fragment = case
    model = CountingModel()
    call = {"inputs": X, "target": 0, **options_for(cls), **kwargs}
    with pytest.raises(error, match=fragment):
        cls(model).attribute(**call)
    assert model.calls == 0


@pytest.mark.parametrize("cls", cases(CLASSES, "target range"))
def test_target_out_of_range_is_refused_after_one_probing_call(cls):
    """No class can know the output size before calling the model: the first
    (small) call tells it, and the out-of-range target is refused then."""
    model = CountingModel()
    with pytest.raises(ValueError, match=r"target 7 is out of range .* 0\.\.2"):
        cls(model).attribute(X, target=7, **options_for(cls))
    assert model.calls == 1


# ------------------------------------------------------------------ reproducibility

# Shear's regression estimator enumerates every coalition once its d N rows
# cover 2^d (n_samples=16 at d=6 is exact Shapley, whatever the seed)
SEEDED = [(c, {"n_samples": 4} if c is cg.Shear else {}) for c in RANDOMISED] + [
    (cg.BivariateShapley, {"estimator": "permutation"}),
    (cg.BivariateShapley, {"estimator": "kernel"}),
]


@pytest.mark.parametrize(
    ("cls", "extra"),
    SEEDED,
    ids=[c.__name__ + "".join(f"-{v}" for v in e.values()) for c, e in SEEDED],
)
def test_reproducible_with_a_generator(cls, extra):
    model = CountingModel()

    def run(seed):
        options = options_for(cls, generator=torch.Generator().manual_seed(seed), **extra)
        return cls(model).attribute(X, target=1, **options)

    torch.testing.assert_close(run(4), run(4), atol=0, rtol=0)
    assert not torch.equal(run(4), run(5))


# ------------------------------------------------------------------ result convention

IDS = torch.arange(N)


@pytest.mark.parametrize("cls", cases(CLASSES, "n_evaluations"))
def test_n_evaluations_is_what_the_model_saw_and_nothing_stays_on_the_explainer(cls):
    model = CountingModel()
    explainer = cls(model)
    before = set(vars(explainer))
    result = explainer.attribute(
        X,
        target=1,
        additional_forward_args=(None, IDS),
        return_evaluations=True,
        **options_for(cls),
    )
    assert set(vars(explainer)) == before
    assert type(result).__name__ == "Explanation"
    assert result._fields == ("attributions", "n_evaluations")
    phi, count = result  # unpacks like a pair
    assert phi is result.attributions and phi.shape == expected_shape(cls, X)
    assert count.shape == (N,) and count.dtype == torch.long
    assert int(model.per_example.sum()) == model.rows  # every row was attributed
    derivatives = SHEAR_HESSIAN_COST if cls is cg.Shear else 0
    # Shear: one differentiability check (N rows), the probe's Hessian-vector product
    # (N rows), then one per feature, the directions stacked along the batch (D * N rows).
    assert model.grad_rows == ((2 + D) * N if cls is cg.Shear else 0)
    torch.testing.assert_close(count, model.per_example + derivatives, atol=0, rtol=0)
    if cls in (cg.ExactShapley, cg.ShapleyResiduals, cg.BivariateShapley):
        assert count.tolist() == [2**D] * N  # every coalition once


UNCERTAIN = [
    ("ShapleySampling", cg.ShapleySampling, {}),
    ("BayesShap", cg.BayesShap, {}),
    ("LShapley-references", cg.LShapley, {"references": torch.randn(4, D)}),
    ("CShapley-references", cg.CShapley, {"references": torch.randn(4, D)}),
]


@pytest.mark.parametrize(
    ("cls", "extra"), [(c, e) for _, c, e in UNCERTAIN], ids=[u[0] for u in UNCERTAIN]
)
def test_return_uncertainty_gives_attributions_and_half_width(cls, extra):
    explainer = cls(CountingModel())
    result = explainer.attribute(X, target=0, return_uncertainty=True, **options_for(cls, **extra))
    assert result._fields == ("attributions", "half_width")
    phi, half = result
    assert phi.shape == half.shape == X.shape and phi.dtype == half.dtype == X.dtype
    assert bool((half >= 0).all()) and bool((half > 0).any())
    both = explainer.attribute(
        X, target=0, return_uncertainty=True, return_evaluations=True, **options_for(cls, **extra)
    )
    assert both._fields == ("attributions", "half_width", "n_evaluations")
    torch.testing.assert_close(both.attributions, phi, atol=0, rtol=0)
    torch.testing.assert_close(both.half_width, half, atol=0, rtol=0)


OTHER_EXTRAS = [
    (cg.ShapleyResiduals, {"return_residuals": True}, ("edge_residuals", "inessential_games")),
    (cg.BivariateShapley, {"return_shapley": True}, ("shapley",)),
    (cg.BayesShap, {"return_report": True}, ("report",)),
]


@pytest.mark.parametrize(
    ("cls", "flag", "fields"), OTHER_EXTRAS, ids=[c.__name__ for c, _, _ in OTHER_EXTRAS]
)
def test_other_extras_follow_the_attributions(cls, flag, fields):
    plain = cls(CountingModel()).attribute(X, target=0, **options_for(cls))
    result = cls(CountingModel()).attribute(X, target=0, **options_for(cls, **flag))
    assert result._fields == ("attributions", *fields)
    torch.testing.assert_close(result.attributions, plain, atol=0, rtol=0)


# ------------------------------------------------------------------ budget

D_BUDGET = 8
X_BUDGET = torch.randn(N, D_BUDGET, generator=torch.Generator().manual_seed(6))


@pytest.mark.parametrize(("cls", "extra"), BUDGETED.values(), ids=list(BUDGETED))
@pytest.mark.parametrize("budget", [40, 100, 300])
def test_budget_is_honoured_and_reported(cls, extra, budget):
    model = CountingModel(d=D_BUDGET)
    options = options_for(cls, budget=budget, **extra)
    options.pop("n_samples", None)
    call = dict(target=1, additional_forward_args=(None, IDS), return_evaluations=True)
    derivatives = 1 + 4 * D_BUDGET if cls is cg.Shear else 0  # cross_contribution="hessian"
    if cls is cg.Shear and budget < 4 * D_BUDGET + derivatives:
        # too small for N = 4 rows per feature plus the Hessian: refused unrun
        with pytest.raises(ValueError, match="budget"):
            cls(model).attribute(X_BUDGET, **call, **options)
        assert model.calls == 0
        return
    result = cls(model).attribute(X_BUDGET, **call, **options)
    per_example = model.per_example + derivatives
    assert bool((per_example <= budget).all())
    torch.testing.assert_close(result.n_evaluations, per_example, atol=0, rtol=0)
    # most of the budget is used (it chooses n_samples from a worst-case cost)
    assert int(per_example.max()) > budget // 3


@pytest.mark.parametrize(("cls", "extra"), BUDGETED.values(), ids=list(BUDGETED))
def test_budget_with_n_samples_or_too_small_is_refused_before_any_model_call(cls, extra):
    model = CountingModel()
    options = options_for(cls, **extra)
    options["n_samples"] = options.get("n_samples") or 16
    with pytest.raises(ValueError, match="budget"):
        cls(model).attribute(X, target=1, budget=100, **options)
    options.pop("n_samples")
    with pytest.raises(ValueError, match="budget"):
        cls(model).attribute(X, target=1, budget=1, **options)
    assert model.calls == 0
