"""The runnable examples in the public classes' docstrings are tests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import captum_graphshap

from .optional_deps import optional

MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(captum_graphshap.__path__, "captum_graphshap.")
    if ".demo" not in name and not name.endswith(".minilm") and ".text" not in name
)


#: Modules whose examples need an optional package (skipped locally without it, as
#: ``optional`` does; CI installs every extra).
EXAMPLE_NEEDS = {
    "captum_graphshap.interop.shap_explanation": "shap",
    "captum_graphshap.interop.shapiq_values": "shapiq",
    "captum_graphshap.llm.llm_shapley": "transformers",
    "captum_graphshap.distributed.shards": "pyarrow",  # the [ray] extra installs it
}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    if name in EXAMPLE_NEEDS:
        optional(EXAMPLE_NEEDS[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0


def test_every_public_class_has_an_example():
    missing = [
        name
        for name in captum_graphshap.__all__
        if isinstance(getattr(captum_graphshap, name), type)
        and ">>>" not in (getattr(captum_graphshap, name).__doc__ or "")
    ]
    assert not missing, f"public classes without a runnable example: {missing}"
