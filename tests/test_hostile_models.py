"""Hostile but realistic models, for every class: the model's failures are never silent.

NaN outputs are reported, train mode is warned about and leaves the model as it
was, out-of-memory halves the chunk, stored inputs are not overwritten, the
user's tensors are never mutated, and unused feature ids are dummies.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import captum_graphshap as cg
from captum_graphshap import ExactShapley

D = 5

#: (class, keyword options that make it cheap and reproducible)
CLASSES = [
    (cg.ExactShapley, {}),
    (cg.MyersonValue, {}),
    (cg.LShapley, {"k": 1}),
    (cg.CShapley, {"k": 1}),
    (cg.ShapleySampling, {"n_samples": 8}),
    (cg.PairedKernelShap, {"n_samples": 40}),
    (cg.Shear, {"n_samples": 32}),
    (cg.BivariateShapley, {}),
    (cg.ShapleyResiduals, {}),
    (cg.BayesShap, {"n_samples": 40}),
]
IDS = [cls.__name__ for cls, _ in CLASSES]
RANDOMISED = {cg.ShapleySampling, cg.PairedKernelShap, cg.Shear, cg.BayesShap}


def options(cls, extra):
    out = dict(extra)
    if cls in RANDOMISED:
        out["generator"] = torch.Generator().manual_seed(0)
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        out["graph"] = cg.LineGraph(D)
    return out


def smooth(x):
    return torch.tanh(x @ torch.linspace(-1.0, 1.0, x.shape[1])[:, None]) + x[:, :1] * x[:, 1:2]


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_nan_outputs_are_an_error_naming_coalitions_and_examples(cls, extra):
    def model(x):
        out = smooth(x)
        # NaN whenever features 0 and 1 are both absent, in example 1 only
        absent = (x[:, 0] == 0) & (x[:, 1] == 0) & (x[:, 4] > 1.5)
        return torch.where(absent[:, None], torch.nan, out)

    x = torch.tensor([[1.0, 2.0, 0.5, -1.0, 1.0], [0.5, -0.5, 1.0, 2.0, 2.0]])
    with pytest.raises(ValueError, match=r"NaN or infinite values .* in examples \[1\]"):
        cls(model).attribute(x, **options(cls, extra))
    propagated = cls(model).attribute(x, on_nan="propagate", **options(cls, extra))
    assert not bool(torch.isfinite(propagated[1]).all())


class BatchNormModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(D)
        self.head = torch.nn.Linear(D, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(x)))


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_train_mode_warns_and_leaves_the_model_unchanged(cls, extra):
    torch.manual_seed(0)
    model = BatchNormModel()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match="train mode.*BatchNorm1d"):
        cls(model).attribute(torch.randn(3, D), **options(cls, extra))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert int(after["norm.num_batches_tracked"]) == 0
    assert model.training  # the mode itself is the user's


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_out_of_memory_halves_the_chunk_and_retries(cls, extra):
    x = torch.randn(2, D, generator=torch.Generator().manual_seed(1))
    expected = cls(smooth).attribute(x, perturbations_per_eval=1, **options(cls, extra))
    calls = {"refused": 0}

    def tight(inp):
        if inp.shape[0] > 4:
            calls["refused"] += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return smooth(inp)

    with pytest.warns(RuntimeWarning, match="out of memory"):
        got = cls(tight).attribute(x, perturbations_per_eval=8, **options(cls, extra))
    assert calls["refused"] >= 1
    torch.testing.assert_close(got, expected)


def test_other_errors_are_raised_after_one_try_at_one_coalition_per_call():
    # a model that takes one example at a time (Captum's LLM wrappers) fails on
    # batches; one coalition per call is tried once, and a real error raised
    calls = []

    def broken(x):
        calls.append(x.shape[0])
        raise RuntimeError("shape mismatch in layer 3")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no misleading "falling back" warning
        with pytest.raises(RuntimeError, match="shape mismatch"):
            ExactShapley(broken).attribute(torch.randn(2, 3))
    assert calls == [16, 2]  # all 8 coalitions x 2 examples, then one coalition


def test_a_forward_of_one_example_at_a_time_is_called_one_coalition_per_call():
    def one_at_a_time(x):
        if x.shape[0] != 1:
            raise IndexError("this forward takes one example")
        return smooth(x)

    x = torch.randn(1, D)
    with pytest.warns(RuntimeWarning, match="one coalition per call"):
        got = ExactShapley(one_at_a_time).attribute(x)
    torch.testing.assert_close(got, ExactShapley(smooth).attribute(x))


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_stored_inputs_are_not_overwritten(cls, extra):
    stored = []

    def recording(x):
        stored.append((x, x.clone()))
        return smooth(x)

    cls(recording).attribute(torch.randn(2, D), **options(cls, extra))
    assert len(stored) >= 1
    assert all(torch.equal(kept, copy) for kept, copy in stored)


def test_reuse_buffers_is_an_explicit_trade():
    stored = []

    def recording(x):
        stored.append((x, x.clone()))
        return smooth(x)

    ExactShapley(recording).attribute(
        torch.randn(2, D), perturbations_per_eval=4, reuse_buffers=True
    )
    assert any(not torch.equal(kept, copy) for kept, copy in stored)


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_user_inputs_are_never_mutated(cls, extra):
    def in_place(x):
        x.mul_(2.0)  # a model that works in place on its input
        return torch.log_softmax(torch.cat([smooth(x), -smooth(x)], dim=1), dim=1)

    x = torch.randn(2, D)
    copy = x.clone()
    cls(in_place).attribute(x, value="log_prob", **options(cls, extra))
    assert torch.equal(x, copy)


@pytest.mark.parametrize(
    "cls, extra",
    [c for c in CLASSES if c[0] is not cg.ShapleyResiduals],
    ids=[i for i in IDS if i != "ShapleyResiduals"],
)
def test_unused_feature_ids_are_dummies(cls, extra):
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        pytest.skip("graph nodes are the feature ids: a gap is a node of its own")
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(3))
    gaps = torch.tensor([[0, 2, 5, 7, 8, 9]])
    dense = torch.tensor([[0, 1, 2, 3, 4, 5]])
    opts = options(cls, extra)
    with_gaps = cls(smooth).attribute(x, feature_mask=gaps, **opts)
    opts = options(cls, extra)
    without = cls(smooth).attribute(x, feature_mask=dense, **opts)
    if cls is cg.BivariateShapley:
        ids = gaps[0]
        torch.testing.assert_close(with_gaps[:, ids[:, None], ids[None, :]], without)
        unused = torch.ones(10, dtype=torch.bool)
        unused[ids] = False
        assert with_gaps[:, unused].abs().max() == 0 and with_gaps[:, :, unused].abs().max() == 0
        return
    torch.testing.assert_close(with_gaps, without)


def test_unused_ids_do_not_change_residual_norms():
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(3))
    gaps = cg.ShapleyResiduals(smooth).attribute(x, feature_mask=torch.tensor([[0, 2, 5, 7, 8, 9]]))
    dense = cg.ShapleyResiduals(smooth).attribute(x)
    torch.testing.assert_close(gaps, dense)


@pytest.mark.parametrize(
    "cls", [cg.PairedKernelShap, cg.BayesShap, cg.ShapleyResiduals, cg.BivariateShapley]
)
def test_ragged_per_example_masks_match_one_example_at_a_time(cls):
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(4))
    masks = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 3, 3]])
    extra = {"n_samples": 60} if cls in RANDOMISED else {}
    together = cls(smooth).attribute(x, feature_mask=masks, **extra)
    for row in range(3):
        used = int(masks[row].max()) + 1
        alone = cls(smooth).attribute(x[row : row + 1], feature_mask=masks[row : row + 1], **extra)
        if cls is cg.BivariateShapley:
            torch.testing.assert_close(together[row, :used, :used], alone[0, :used, :used])
        elif cls in RANDOMISED:
            # the draws differ between the calls; efficiency pins the per-feature sum
            per_feature = together[row].unique_consecutive()
            assert per_feature.numel() <= used
        else:
            torch.testing.assert_close(together[row], alone[0])


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_empty_tensor_in_a_tuple_gets_an_empty_attribution(cls, extra):
    if cls in (cg.MyersonValue, cg.LShapley, cg.CShapley):
        extra = {**extra, "graph": cg.LineGraph(D)}

    def model(x, empty):
        return smooth(x)

    x = torch.randn(2, D)
    opts = options(cls, extra)
    opts.pop("graph", None) if cls not in (cg.MyersonValue, cg.LShapley, cg.CShapley) else None
    out = cls(model).attribute((x, torch.zeros(2, 0)), **opts)
    if cls is cg.BivariateShapley:
        assert out.shape == (2, D, D)
    else:
        assert out[0].shape == (2, D) and out[1].shape == (2, 0)


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_no_features_and_meta_tensors_are_refused_before_any_model_call(cls, extra):
    calls = []

    def model(x):
        calls.append(1)
        return x.sum(dim=1, keepdim=True)

    with pytest.raises(ValueError, match="no elements to attribute"):
        cls(model).attribute(torch.zeros(2, 0), **options(cls, extra))
    with pytest.raises(ValueError, match="meta device"):
        cls(model).attribute(torch.zeros(2, D, device="meta"), **options(cls, extra))
    assert calls == []


@pytest.mark.parametrize("cls, extra", CLASSES, ids=IDS)
def test_bool_inputs_with_a_bool_baseline(cls, extra):
    weights = torch.linspace(1.0, 2.0, D)

    def model(flags):
        return (flags.float() * weights).sum(dim=1, keepdim=True)

    flags = torch.tensor([[True, False, True, True, False]])
    if cls is cg.Shear:
        with pytest.raises(TypeError, match="needs gradients"):
            cls(model).attribute(flags, **options(cls, extra))
        return
    out = cls(model).attribute(flags, baselines=False, **options(cls, extra))
    if cls is cg.BivariateShapley:
        assert out.shape == (1, D, D)
        return
    if cls is cg.ShapleyResiduals:
        assert float(out.abs().max()) < 1e-6  # an additive model has no residual
        return
    own = flags.float() * weights
    if cls is cg.BayesShap:  # a posterior mean, shrunk towards the prior
        torch.testing.assert_close(out, own, atol=0.2, rtol=0)
    elif cls is cg.CShapley:  # Eq. (6)'s weights over a k-ball do not sum to 1
        assert float(out[~flags].abs().max()) < 1e-12  # but absent flags are dummies
    else:  # an additive model: each feature gets its own effect
        torch.testing.assert_close(out, own, atol=1e-5, rtol=1e-5)


def test_out_of_memory_is_reported_once_with_the_size_that_worked():
    def tight(inp):
        if inp.shape[0] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return smooth(inp)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ExactShapley(tight).attribute(torch.randn(1, D), perturbations_per_eval=32)
    halved = [w for w in caught if "out of memory" in str(w.message)]
    assert len(halved) == 1 and "retrying with 2 rows per call" in str(halved[0].message)
