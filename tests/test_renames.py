"""One option vocabulary: the old spellings still work for one release, with a FutureWarning.

Each old spelling must give exactly the result of the new one (same draws),
warn once with the new name in the message, and refuse to be combined with
the new name.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import captum_graphshap as cg

D = 6
MODEL = torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
X = torch.randn(2, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

#: (class, old options, new options)
RENAMED = [
    (cg.Shear, {"estimator": "regression"}, {"estimator": "cubic"}),
    (cg.BivariateShapley, {"method": "sampling"}, {"estimator": "permutation"}),
    (cg.BivariateShapley, {"method": "kernel"}, {"estimator": "kernel"}),
    (cg.BivariateShapley, {"method": "exact"}, {"estimator": "exact"}),
    (cg.BivariateShapley, {"estimator": "sampling"}, {"estimator": "permutation"}),
    (cg.CShapley, {"method": "regression"}, {"estimator": "kernel"}),
    (cg.CShapley, {"method": "regression", "k": 3}, {"estimator": "kernel", "max_size": 3}),
    (cg.CShapley, {"estimator": "kernel", "k": 1}, {"estimator": "kernel", "max_size": 1}),
    (cg.CShapley, {"method": "exact", "k": 1}, {"estimator": "exact", "k": 1}),
    (
        cg.CShapley,
        {"k": 2, "budget": 12, "over_budget": "regression"},
        {"k": 2, "budget": 12, "over_budget": "kernel"},
    ),
    (
        cg.LShapley,
        {"k": 2, "budget": 12, "over_budget": "regression"},
        {"k": 2, "budget": 12, "over_budget": "kernel"},
    ),
]


def _run(cls, options):
    extra = (
        {"generator": torch.Generator().manual_seed(3)}
        if cls in (cg.Shear, cg.BivariateShapley)
        else {}
    )
    return cls(MODEL).attribute(X, target=0, **options, **extra)


@pytest.mark.parametrize(
    ("cls", "old", "new"), RENAMED, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_an_old_spelling_warns_and_gives_the_new_result(cls, old, new):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling is silent
        expected = _run(cls, new)
    with pytest.warns(FutureWarning) as caught:
        got = _run(cls, old)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    messages = " ".join(str(w.message) for w in caught)
    for name, value in new.items():
        if old.get(name) != value:
            assert name in messages, (name, messages)
    assert all(w.filename == __file__ for w in caught), [w.filename for w in caught]


def test_old_and_new_names_together_are_refused():
    with pytest.raises(TypeError, match=r"method= .*estimator="):
        cg.BivariateShapley(MODEL).attribute(X, target=0, method="exact", estimator="exact")


def test_max_size_is_checked():
    with pytest.raises(ValueError, match="max_size must be >= 1"):
        cg.CShapley(MODEL).attribute(X, target=0, estimator="kernel", max_size=0)
    with pytest.raises(TypeError, match="max_size must be an int"):
        cg.CShapley(MODEL).attribute(X, target=0, estimator="kernel", max_size=2.0)


def test_one_name_per_estimator_across_classes():
    from captum_graphshap.attr import bivariate_shapley, c_shapley, paired_kernel_shap, shear

    assert "regression" not in shear.SHEAR_ESTIMATORS and "cubic" in shear.SHEAR_ESTIMATORS
    assert set(shear.SHEAR_ESTIMATORS) - {"paper"} <= set(paired_kernel_shap.KERNEL_ESTIMATORS)
    assert "sampling" not in bivariate_shapley.BIVARIATE_ESTIMATORS
    assert c_shapley.C_ESTIMATORS == ("exact", "kernel")
