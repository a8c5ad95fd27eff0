"""The ported Captum cases that fail with our classes, with the cause: one table.

``XFAIL`` maps a case (its node id below ``tests/captum_ported/``) to the cause of
its failure; every case not listed passes. Each entry becomes
``pytest.mark.xfail(reason=<cause>, strict=True)``, so a case that starts passing
fails until its entry is removed: a fix flips exactly one entry.

No listed case is a wrong value. The four cases below count DataLoader passes,
which grow with the method; their attribution values match FeatureAblation's
control (checked with the count assertions removed).
"""

from __future__ import annotations

import pytest

COUNTS_PASSES = (
    "counts DataLoader passes / reduce calls, a FeatureAblation figure (7 perturbations + 1): "
    "ExactShapley evaluates all 2^7 = 128 coalitions (Captum's test says this count "
    "'can be diff from n_features' for other methods)"
)

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
}


def case_key(nodeid: str) -> str:
    """``tests/captum_ported/test_x.py::Class::case`` -> ``test_x.py::Class::case``."""
    return nodeid.split("captum_ported/", 1)[-1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        cause = XFAIL.get(case_key(item.nodeid))
        if cause is not None:
            item.add_marker(pytest.mark.xfail(reason=cause, strict=True))
