"""The ported Captum cases that fail with our classes, with the cause: one table.

``XFAIL`` maps a case (its node id below ``tests/captum_ported/``) to the cause of
its failure; every case not listed passes. Each entry becomes
``pytest.mark.xfail(reason=<cause>, strict=True)``, so a case that starts passing
fails until its entry is removed: a fix flips exactly one entry.

No listed case is a wrong value. The four DataLoader cases count DataLoader
passes, which grow with the method; their attribution values match
FeatureAblation's control (checked with the count assertions removed). The
other entries are the accepted deviations listed in the README's differences
from Captum, and JIT trace cases that fail for Captum's own classes too.
"""

from __future__ import annotations

import pytest

COUNTS_PASSES = (
    "counts DataLoader passes / reduce calls, a FeatureAblation figure (7 perturbations + 1): "
    "ExactShapley evaluates all 2^7 = 128 coalitions (Captum's test says this count "
    "'can be diff from n_features' for other methods)"
)

TARGET_ERROR = (
    "accepted deviation: an impossible target ((9999,) * 20 for a (2,)-output model) raises "
    "ValueError naming the target and the output's shape; Captum's test expects "
    "AssertionError. No hook is left either way"
)
JIT_TRACE = (
    "fails for Captum's own ShapleyValueSampling/KernelShap too: torch.jit.trace gets the "
    "additional forward arguments (None, True) or (tensor, 5) as example inputs and refuses "
    "the None/int; Captum defines these cases only under CUDA, where every mode scripts"
)

_JIT_TRACE_CASES = [
    "basic_multi_input",
    "basic_multi_input_multi_target",
    "basic_multiple_tuple_target",
    "basic_multiple_tuple_target_with_baselines",
    "basic_multiple_tuple_target_with_perturbations_per_eval",
]

XFAIL: dict[str, str] = {
    "test_dataloader_attr.py::TestExactShapley::test_dl_attr_with_perturb_per_pass_0": (
        COUNTS_PASSES
    ),
    "test_dataloader_attr.py::TestExactShapley::test_dl_attr_with_perturb_per_pass_1": (
        COUNTS_PASSES
    ),
    "test_dataloader_attr.py::TestExactShapley::test_dl_attr_with_perturb_per_pass_2": (
        COUNTS_PASSES
    ),
    "test_dataloader_attr.py::TestExactShapley::test_dl_attr_with_reduce_and_to_metric": (
        COUNTS_PASSES
    ),
    **{
        "test_hook_removal.py::TestHookRemoval::test_hook_removal_incorrect_target_or_neuron_"
        f"basic_single_target_{cls}": TARGET_ERROR
        for cls in ("PairedKernelShap", "ShapleySampling")
    },
    **{
        f"test_jit.py::JITTest::test_jit_cpu_jit_trace_{case}_{cls}": JIT_TRACE
        for case in _JIT_TRACE_CASES
        for cls in ("PairedKernelShap", "ShapleySampling")
    },
}


def case_key(nodeid: str) -> str:
    """``tests/captum_ported/test_x.py::Class::case`` -> ``test_x.py::Class::case``."""
    return nodeid.split("captum_ported/", 1)[-1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        key = case_key(item.nodeid)
        cause = XFAIL.get(key)
        if cause is not None:
            item.add_marker(pytest.mark.xfail(reason=cause, strict=True))
