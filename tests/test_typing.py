"""What a type checker and ``typing.get_type_hints`` learn about ``attribute`` and its result."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import torch

import captum_graphshap as cg
from captum_graphshap.attr.base import GameAttribution, KernelAttribution, SampledAttribution

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]

CLASSES = [
    getattr(cg, name)
    for name in cg.__all__
    if isinstance(getattr(cg, name), type) and issubclass(getattr(cg, name), GameAttribution)
]


def test_every_public_attribution_class_is_checked():
    names = {c.__name__ for c in CLASSES}
    assert {"ExactShapley", "ShapleySampling", "PairedKernelShap", "BayesShap", "Shear"} <= names
    assert {"LShapley", "CShapley", "MyersonValue", "BivariateShapley", "ShapleyResiduals"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_type_hints_of_attribute_name_the_result_and_every_option(cls):
    hints = typing.get_type_hints(cls.attribute)
    returns = hints["return"]
    assert returns is not Any
    assert set(typing.get_args(returns)) == {
        torch.Tensor,
        tuple[torch.Tensor, ...],
        cg.Explanation[Any],
    }
    options = typing.get_type_hints(cls.Options)
    signature = inspect.signature(cls.attribute)
    for field in dataclasses.fields(cls.Options):
        assert options[field.name] is not Any, f"{cls.__name__}.Options.{field.name} is Any"
        assert hints[field.name] == options[field.name]
        assert signature.parameters[field.name].annotation == options[field.name]


def test_explanation_declares_every_extra_a_class_returns():
    extras = {
        "half_width",
        "n_evaluations",
        "derivative_evaluations",
        "shapley",
        "report",
        "edge_residuals",
        "inessential_games",
        "neighbourhoods",
    }
    assert set(typing.get_type_hints(cg.Explanation)) == {"_fields", "attributions", *extras}


@pytest.mark.skipif(not hasattr(typing, "get_overloads"), reason="typing.get_overloads: 3.11+")
@pytest.mark.parametrize("family", [GameAttribution, SampledAttribution, KernelAttribution])
def test_the_overloads_list_every_return_flag_of_every_class(family):
    # A return_* option missing from the overloads would fall into **options of the
    # first overload, so a type checker would call its Explanation a tensor.
    flags = {
        f.name
        for cls in CLASSES
        for f in dataclasses.fields(cls.Options)
        if f.name.startswith("return_")
    }
    overloads = typing.get_overloads(family.__dict__["attribute"])
    assert len(overloads) == 3
    annotations = [
        {
            name: p.annotation
            for name, p in inspect.signature(o).parameters.items()
            if p.kind is p.KEYWORD_ONLY
        }
        for o in overloads
    ]
    assert [set(a) for a in annotations] == [flags] * 3
    assert {*annotations[0].values()} == {"Literal[False]"}
    assert {*annotations[1].values()} == {"Literal[True]"}
    assert {*annotations[2].values()} == {"bool"}


def test_a_result_with_extras_is_an_explanation_and_plain_attributions_are_not():
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    explainer = cg.ShapleySampling(model)
    plain = explainer.attribute(x, target=0, generator=torch.Generator().manual_seed(1))
    result = explainer.attribute(
        x, target=0, return_evaluations=True, generator=torch.Generator().manual_seed(1)
    )
    assert not isinstance(plain, cg.Explanation)
    assert isinstance(result, cg.Explanation) and isinstance(result, tuple)
    assert type(result).__name__ == "Explanation"
    assert result._fields == ("attributions", "n_evaluations")
    torch.testing.assert_close(result.attributions, plain, atol=0, rtol=0)
    with pytest.raises(AttributeError):
        _ = result.half_width  # declared for type checkers, absent unless asked for


# A user's script: the lines marked "# error: CODE" must fail type checking with that
# code, every other line must pass (it is only type-checked, never run).
USER_SCRIPT = """\
import torch
from captum_graphshap import (
    BayesShap, Explanation, ExactShapley, PairedKernelShap, ShapleySampling, Shear,
)

model = torch.nn.Linear(4, 2)
x = torch.randn(3, 4)

phi: torch.Tensor = ShapleySampling(model).attribute(x, target=0)
parts: tuple[torch.Tensor, ...] = ExactShapley(model).attribute((x,), target=0)
fitted: torch.Tensor = PairedKernelShap(model).attribute(x, None, 0, None, None, 64)
r = ShapleySampling(model).attribute(x, target=0, return_uncertainty=True)
half: torch.Tensor = r.half_width
first: torch.Tensor = r.attributions
explained: Explanation[torch.Tensor] = r
phi_again, half_again = r
both = BayesShap(model).attribute(x, target=0, return_uncertainty=True, return_evaluations=True)
count: torch.Tensor = both.n_evaluations
spent: torch.Tensor = Shear(model).attribute(
    x, target=0, return_derivative_evaluations=True
).derivative_evaluations
flag = bool(x.sum() > 0)
either = ShapleySampling(model).attribute(x, target=0, return_evaluations=flag)
if isinstance(either, Explanation):
    n: torch.Tensor = either.n_evaluations
else:
    plain: torch.Tensor = either

phi.half_width  # error: attr-defined
wrong: torch.Tensor = r  # error: assignment
either.n_evaluations  # error: union-attr
not_a_tensor: torch.Tensor = ExactShapley(model).attribute((x,), target=0)  # error: assignment
ShapleySampling(model).attribute(x, n_samples="many")  # error: call-overload
"""


def test_mypy_strict_on_a_user_script_knows_a_tensor_from_an_explanation(tmp_path):
    optional("mypy")
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            # as for an installed package: the library's own code is not the user's to check
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            str(script),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    found = {
        (int(line), code)
        for line, code in re.findall(
            r"user_script\.py:(\d+): error: .*\[([a-z-]+)\]$", result.stdout, re.M
        )
    }
    expected = {
        (number, line.rsplit("# error: ", 1)[1])
        for number, line in enumerate(USER_SCRIPT.splitlines(), start=1)
        if "# error: " in line
    }
    assert found == expected, result.stdout + result.stderr


def _help_text(cls: type) -> str:
    import pydoc

    return pydoc.render_doc(cls, renderer=pydoc.plaintext)


@pytest.mark.parametrize("name", ["PairedKernelShap", "BayesShap", "ShapleySampling", "Shear"])
def test_help_is_wrapped_and_documents_each_option_once(name):
    import captum_graphshap

    cls = getattr(captum_graphshap, name)
    text = _help_text(cls)
    # the composed docstring is wrapped (a word longer than the width may stand alone)
    doc = cls.attribute.__doc__.splitlines()
    assert max(len(line) for line in doc) <= 90, max(doc, key=len)
    assert max(len(line) for line in cls.Options.__doc__.splitlines()) <= 90
    # each option is documented once, in attribute; Options points there
    for option in dataclasses.fields(cls.Options):
        entries = [line for line in doc if line.startswith(f"    {option.name}: ")]
        assert len(entries) == 1, (option.name, entries)
    assert "Args:" not in cls.Options.__doc__
    assert f"documented in ``{name}.attribute``" in text


def test_help_leaves_out_captums_kernel_sampler():
    from captum_graphshap import PairedKernelShap

    text = _help_text(PairedKernelShap)
    assert "kernel_shap_perturb_generator" not in text
    assert "kernel_shap_similarity_kernel" not in text
    assert "kernel_shap_perturb_generator" not in dir(PairedKernelShap)
    # still an attribute, as Captum's code may look it up
    assert callable(PairedKernelShap.kernel_shap_perturb_generator)


def test_the_options_text_is_kept_for_the_composed_docstring():
    from captum_graphshap import PairedKernelShap

    assert "estimator:" in PairedKernelShap.Options._args_doc
    # (whitespace normalised: the composed text is rewrapped, a phrase may span lines)
    assert "Shapley kernel" in " ".join(PairedKernelShap.attribute.__doc__.split())
