"""The train-mode guard finds the model behind the usual wrappers of a forward function.

A lambda closing over the model, a lambda naming a global model, a bound method
of a wrapper object, ``functools.partial``: each warns as the module itself
does, and each leaves the model's buffers as they were. An eval-mode model
behind the same wrappers gives no warning, so the warning is about the model
found and not about the wrapper.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from captum_graphshap import ExactShapley, LShapley
from captum_graphshap.attr.guards import reachable_modules

D = 4


class Classifier(torch.nn.Module):
    """A BERT-like call: token features and an attention mask, an object with ``logits``."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(D)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Linear(D, 2)

    def forward(self, x, attention_mask=None):
        if attention_mask is not None:
            x = x * attention_mask
        return type("Output", (), {"logits": self.head(self.drop(self.norm(x)))})()


class Wrapper:
    """A user's wrapper: a plain object holding the model, explained through a method."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def predict(self, x, mask):
        return self.model(x, attention_mask=mask).logits


GLOBAL_MODEL = Classifier()


def wrapped(model: torch.nn.Module) -> dict[str, object]:
    """The forward functions of the issue, each calling ``model``."""

    def through_global(x, mask):
        return GLOBAL_MODEL(x, attention_mask=mask).logits

    return {
        "closure": lambda x, mask: model(x, attention_mask=mask).logits,
        "bound_method": Wrapper(model).predict,
        "partial": functools.partial(
            lambda x, mask, net: net(x, attention_mask=mask).logits, net=model
        ),
        "partial_of_closure": functools.partial(
            lambda x, mask: model(x, attention_mask=mask).logits
        ),
        "global": through_global,
    }


KINDS = ["closure", "bound_method", "partial", "partial_of_closure", "global"]


def model_for(kind: str) -> torch.nn.Module:
    if kind == "global":
        GLOBAL_MODEL.train()
        return GLOBAL_MODEL
    torch.manual_seed(0)
    return Classifier()


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrapped_model_in_train_mode_warns_and_keeps_its_buffers(kind):
    model = model_for(kind)
    forward = wrapped(model)[kind]
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, D)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match=r"train mode.*BatchNorm1d, Dropout"):
        ExactShapley(forward).attribute(x, target=0, additional_forward_args=(mask,))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert int(after["norm.num_batches_tracked"]) == int(before["norm.num_batches_tracked"])
    assert model.training  # the mode itself is the user's


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_wrappers_around_an_eval_model_do_not_warn(kind):
    model = model_for(kind).eval()
    forward = wrapped(model)[kind]
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = LShapley(forward).attribute(
            x, target=0, additional_forward_args=(torch.ones(3, D),), k=1
        )
    assert got.shape == x.shape
    GLOBAL_MODEL.train()


def test_reachable_modules_finds_each_model_once_and_not_its_submodules():
    model, other = Classifier(), Classifier()
    both = lambda x: model(x).logits + other(x).logits + model.head(x)  # noqa: E731
    found = reachable_modules(both)
    assert {id(m) for m in found} == {id(model), id(other)}
    assert reachable_modules(model.forward) == [model]
    assert reachable_modules(lambda x: x * 2) == []
    # two references deep and no further: a model inside a wrapper inside a wrapper
    # inside a partial is beyond the cheap search
    deep = functools.partial(Wrapper(Wrapper(model)).predict)
    assert reachable_modules(deep) == []
