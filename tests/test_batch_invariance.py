"""Every sampled class: an example's explanation does not depend on its batch (issue 23).

Under the same seed, an example explained alone, or inside a permuted batch,
gets exactly its row of the batch's result, as with Captum's samplers.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import captum_graphshap as cg

CASES = [
    (cg.ShapleySampling, {}),
    (cg.ShapleySampling, {"antithetic": False, "return_uncertainty": True}),
    # budget=: orderings added while their distinct prefixes fit, chosen once for the batch
    (cg.ShapleySampling, {"budget": 100}),
    (cg.ShapleySampling, {"budget": 100, "antithetic": False, "return_uncertainty": True}),
    (cg.PairedKernelShap, {"budget": 30}),  # auto's permutations
    (cg.PairedKernelShap, {"estimator": "kernel", "budget": 60}),
    (cg.PairedKernelShap, {}),
    *[(cg.PairedKernelShap, {"estimator": e}) for e in ("stratified", "cubic", "regression_mc")],
    *[
        (cg.Shear, {"n_samples": 8, "estimator": e})
        for e in ("regression", "paper", "regression_mc")
    ],
    (cg.BayesShap, {"budget": 60}),
    (cg.BayesShap, {"budget": 60, "focused": True}),
    (cg.BivariateShapley, {"estimator": "permutation", "budget": 200}),
    (cg.BivariateShapley, {"estimator": "kernel", "budget": 200}),
]


@pytest.mark.parametrize(
    ("cls", "options"),
    CASES,
    ids=[f"{c.__name__}-{'-'.join(map(str, o.values()))}" for c, o in CASES],
)
def test_an_example_gets_its_row_of_any_batch(cls, options):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(7, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    x = torch.randn(4, 7, dtype=torch.float64)

    def run(inputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = cls(net).attribute(
                inputs, target=0, generator=torch.Generator().manual_seed(3), **options
            )
        return result[0] if isinstance(result, tuple) else result

    batch = run(x)
    for i in range(4):
        torch.testing.assert_close(run(x[i : i + 1])[0], batch[i], rtol=0, atol=1e-12)
    order = [2, 0, 3, 1]
    torch.testing.assert_close(run(x[order]), batch[order], rtol=0, atol=1e-12)
