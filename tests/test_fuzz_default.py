"""Fuzzing the default estimator (and others) on games of order two, whose Shapley values are known.

``f(u) = w.u + u'Au`` explained against a baseline ``b`` on features that group
elements is a game of order two over the features: with ``D`` the differences
``x - b`` grouped (``D[e, g] = x_e - b_e`` for element ``e`` of feature ``g``),
``c = D'(w + 2 A b)`` and ``Q = D'AD``, the Shapley values are
``phi_g = c_g + sum_h Q_gh``. Every plan ``PairedKernelShap()`` picks (exact
Shapley, the Walsh-basis process, antithetic permutations, the cubic fit) is
exact on such games once the values are determined, from ``2 d`` evaluations
on; so are ``estimator="cubic"`` and ``"stratified"`` (their pairs drawn again
while they leave a direction unseen, and a rank-deficient fit solved as the
constrained least squares of least norm). Hypothesis draws ``d`` up to 100
features of one to three elements, one to three examples, budgets from 4 past
that and up to 2,048, and asserts:

* from ``2 d`` evaluations on (or ``2^d``): the closed form to ``1e-7`` of the
  largest value, and no warning;
* below: a ``RuntimeWarning`` that names ``budget=`` and the fix, and
  efficiency still;
* never more model rows than ``budget`` per example;
* ``Shear``, one antithetic pair of orderings (``ShapleySampling``), its
  antithetic pairs filling a budget from ``2 d`` on, and ``ExactShapley`` give
  the closed form too;
* on MLPs (not of order two), outputs changed by rounding's size move the
  default's and ``BayesShap``'s values by as little (a choice made by rounding
  moved them by 5e-3 at the fewest pairs).

Bounded in time as ``test_fuzz.py``: derandomised on CI (the same cases every
run); ``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder locally, with fresh draws.
Fresh draws found the process imprecise near the full design (up to 1e-4 at
d = 10 with 986 of 1,024 evaluations: its covariance is singular along the
linear parities there); ``plans/walsh_kriging.py`` now krigs on their
complement, and the near-full designs are pinned below to ``1e-11``. The
cubic fit at its minimum ``2 d`` (a square system) reached 1.2e-7 relative on
fresh draws (d = 81, 162 evaluations: a design of condition ~1e4.5, squared by
the normal equations) until such designs were redrawn
(``walsh_design.MAX_DESIGN_CONDITION``); ``1e-7`` keeps a margin over the
1e-8 the bound still allows.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from captum_graphshap import PairedKernelShap

EXAMPLES = int(os.environ.get("GRAPHSHAP_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 25,
    deadline=None,
    derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)


class Quadratic(nn.Module):
    """``f(u) = w.u + u'Au`` (float64), counting the rows it is called on."""

    def __init__(self, w: torch.Tensor, a: torch.Tensor) -> None:
        super().__init__()
        self.w, self.a, self.rows = w, a, 0

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        self.rows += u.shape[0]
        return (u @ self.w + ((u @ self.a) * u).sum(-1))[:, None]


def order_two_shapley(
    model: Quadratic, x: torch.Tensor, baseline: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``(N, d)`` the closed form of the module's notes, one row per example."""
    d = int(mask.max()) + 1
    grouping = (mask[:, None] == torch.arange(d)).double()  # (E, d)
    linear = model.w + 2 * model.a @ baseline
    out = []
    for row in x:
        grouped = (row - baseline)[:, None] * grouping  # D: (E, d)
        out.append(grouped.T @ linear + (grouped.T @ model.a @ grouped).sum(1))
    return torch.stack(out)


def quadratic_case(
    d: int, sizes: list[int], examples: int, seed: int
) -> tuple[Quadratic, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    """A quadratic model over ``d`` features of ``sizes`` elements, interleaved:
    the model, inputs ``(examples, E)``, a baseline ``(E,)``, the mask ``(E,)`` and the
    generator that drew them (its state after the draws)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.repeat_interleave(torch.arange(d), torch.tensor(sizes))
    mask = mask[torch.randperm(len(mask), generator=g)]  # features' elements interleaved
    elements = len(mask)
    a = torch.randn(elements, elements, generator=g, dtype=torch.float64) / elements
    model = Quadratic(torch.randn(elements, generator=g, dtype=torch.float64), (a + a.T) / 2)
    x = torch.randn(examples, elements, generator=g, dtype=torch.float64)
    baseline = torch.randn(elements, generator=g, dtype=torch.float64) * 0.3
    return model, x, baseline, mask, g


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, list[int], int, int, int, str]:
    """``(d, elements per feature, examples, budget, seed, estimator)``."""
    d = draw(st.one_of(st.integers(1, 16), st.integers(17, 100)))
    sizes = draw(st.lists(st.integers(1, 3), min_size=d, max_size=d))
    examples = draw(st.integers(1, 3))
    low = st.integers(4, max(4, 2 * d - 1))
    high = st.integers(max(4, 2 * d), max(4, 2 * d, 2048))
    budget = draw(st.one_of(low, high, high))
    estimator = draw(st.sampled_from(["auto", "auto", "cubic", "stratified"]))
    return d, sizes, examples, budget, draw(st.integers(0, 2**16)), estimator


@FUZZ
@given(case=cases())
def test_the_default_is_exact_on_games_of_order_two_or_says_it_cannot_be(
    case: tuple[int, list[int], int, int, int, str],
) -> None:
    d, sizes, examples, budget, seed, estimator = case
    model, x, baseline, mask, _ = quadratic_case(d, sizes, examples, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        phi = PairedKernelShap(model).attribute(
            x,
            baselines=baseline[None],
            target=0,
            feature_mask=mask[None],
            budget=budget,
            generator=torch.Generator().manual_seed(seed),
            estimator=estimator,
        )
    spent = model.rows
    assert spent <= examples * budget, (spent, examples, budget)
    warned = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    per_feature = phi[:, torch.stack([(mask == k).nonzero()[0, 0] for k in range(d)])]
    want = order_two_shapley(model, x, baseline, mask)
    scale = float(want.abs().max())
    determined = budget >= 2 * d or d < budget.bit_length()
    if determined:
        assert not warned, [str(w.message) for w in warned]
        torch.testing.assert_close(per_feature, want, atol=1e-7 * scale, rtol=0)
    else:
        assert any(f"budget={budget}" in str(w.message) for w in warned), caught
        assert any(f"Raise budget to {2 * d}" in str(w.message) for w in warned), caught
        gap = model(x)[:, 0] - model(baseline[None])[:, 0]
        torch.testing.assert_close(per_feature.sum(1), gap, atol=1e-9 * scale, rtol=0)


@FUZZ
@given(case=cases())
def test_shear_one_antithetic_pair_and_exact_shapley_are_exact_on_games_of_order_two(
    case: tuple[int, list[int], int, int, int, str],
) -> None:
    """Shear's cross-contributions (its Hessian is the model's), one ordering and its
    reverse (each interaction split in half), antithetic pairs filling a budget of at
    least ``2 d`` (a lone ordering among them was not exact), and every coalition: the
    closed form."""
    from captum_graphshap import ExactShapley, ShapleySampling, Shear

    d, sizes, examples, budget, seed, _ = case
    model, x, baseline, mask, g = quadratic_case(d, sizes, examples, seed)
    want = order_two_shapley(model, x, baseline, mask)
    first = torch.stack([(mask == k).nonzero()[0, 0] for k in range(d)])
    pair = {"n_samples": 2, "antithetic": True, "generator": g}
    methods: list[tuple[object, dict[str, object]]] = [
        (Shear(model), {}),
        (ShapleySampling(model), pair),
    ]
    if budget >= 2 * d:  # whole antithetic pairs, the rest a paired window
        methods.append((ShapleySampling(model), {"budget": budget, "generator": g}))
    if d <= 12:
        methods.append((ExactShapley(model), {}))
    for method, options in methods:
        phi = method.attribute(  # type: ignore[attr-defined]
            x, baselines=baseline[None], target=0, feature_mask=mask[None], **options
        )
        torch.testing.assert_close(
            phi[:, first], want, atol=1e-7 * float(want.abs().max()), rtol=0, msg=str(method)
        )


@pytest.mark.parametrize(
    "d, budget", [(5, 30), (7, 114), (7, 126), (9, 460), (10, 920), (10, 992), (11, 2046)]
)
def test_the_default_is_exact_on_games_of_order_two_near_the_full_design(
    d: int, budget: int
) -> None:
    """Every pair but a few observed: the process's covariance is singular along the
    linear parities (up to 7e-5 relative error at d = 10 before it kriged on their
    complement); now rounding."""
    model, x, baseline, mask, _ = quadratic_case(d, [1, 2] * (d // 2) + [1] * (d % 2), 2, d)
    phi = PairedKernelShap(model).attribute(
        x, baselines=baseline[None], target=0, feature_mask=mask[None], budget=budget,
        generator=torch.Generator().manual_seed(budget),
    )  # fmt: skip
    want = order_two_shapley(model, x, baseline, mask)
    first = torch.stack([(mask == k).nonzero()[0, 0] for k in range(d)])
    torch.testing.assert_close(phi[:, first], want, atol=1e-11 * float(want.abs().max()), rtol=0)


@pytest.mark.parametrize("d, budget", [(12, 4), (12, 23), (40, 79)])
def test_a_budget_below_2_d_is_said_to_leave_the_values_undetermined(d: int, budget: int) -> None:
    """The warning names the budget, the pairs it leaves, and the fix; 2 d is silent."""
    model = nn.Linear(d, 1)
    x = torch.randn(1, d)
    with pytest.warns(RuntimeWarning, match=rf"budget={budget} leaves \d+ complementary"):
        PairedKernelShap(model).attribute(x, target=0, budget=budget)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        PairedKernelShap(model).attribute(x, target=0, budget=2 * d)


def test_the_kernel_estimator_warns_exactly_where_its_draws_leave_values_undetermined() -> None:
    """i.i.d. kernel draws can repeat a few sizes (d = 8, seed 3: 8-10 distinct pairs
    of rank 7). Where the design is singular a warning says so before any model call;
    where it is not, an additive game is fitted exactly."""
    d = 8
    g = torch.Generator().manual_seed(0)
    model = Quadratic(torch.randn(d, generator=g, dtype=torch.float64), torch.zeros(d, d).double())
    x = torch.randn(1, d, generator=g, dtype=torch.float64)
    want = model.w * x
    seen = set()
    for budget in (18, 20, 22, 24, 40):
        for seed in range(6):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                phi = PairedKernelShap(model).attribute(
                    x,
                    target=0,
                    budget=budget,
                    estimator="kernel",
                    generator=torch.Generator().manual_seed(seed),
                )
            warned = any("leave the values undetermined" in str(w.message) for w in caught)
            exact = torch.allclose(phi, want, rtol=0, atol=1e-9 * float(want.abs().max()))
            assert warned != exact, (budget, seed, warned)
            seen.add(warned)
    assert seen == {True, False}


class Nudged(nn.Module):
    """``model``'s outputs times ``1 + 1e-14 noise``: changes of rounding's size."""

    def __init__(self, model: nn.Module, seed: int) -> None:
        super().__init__()
        self.model, self.noise = model, torch.Generator().manual_seed(seed)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        out = self.model(u)
        noise = torch.randn(out.shape, generator=self.noise, dtype=out.dtype)
        return out * (1 + 1e-14 * noise)


@st.composite
def mlp_cases(draw: st.DrawFn) -> tuple[int, int, int, str, bool]:
    """``(d, budget, seed, activation, bayes)``: the fewest pairs' budget often."""
    d = draw(st.integers(2, 40))
    fewest = 2 * d + 2
    budget = draw(st.one_of(st.just(fewest), st.integers(fewest, max(fewest, 1024))))
    activation = draw(st.sampled_from(["tanh", "relu"]))
    return d, budget, draw(st.integers(0, 2**16)), activation, draw(st.booleans())


@FUZZ
@given(case=mlp_cases())
def test_rounding_sized_changes_of_the_values_move_the_estimate_by_as_little(
    case: tuple[int, int, int, str, bool],
) -> None:
    """Outputs changed by 1e-14 of their size move the default's (and ``BayesShap``'s)
    values by at most 1e-9 of their scale: once its prior is chosen the process is
    linear in the values, and the choice must be the data's, not rounding's. At the
    fewest pairs every prior's likelihood tied and argmax took rounding's pick: the
    estimate moved by up to 5e-3 (``walsh_gp.LIKELIHOOD_TIE``), and the CPU and GPU
    answers were 3e-3 apart."""
    from captum_graphshap import BayesShap

    d, budget, seed, activation, bayes = case
    torch.manual_seed(seed)
    act = nn.Tanh() if activation == "tanh" else nn.ReLU()
    model = nn.Sequential(nn.Linear(d, 16), act, nn.Linear(16, 1)).double().eval()
    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    method = BayesShap if bayes and d <= 32 else PairedKernelShap
    estimates = [
        method(wrapped).attribute(
            x, target=0, budget=budget, generator=torch.Generator().manual_seed(seed)
        )
        for wrapped in (model, Nudged(model, seed))
    ]
    scale = float(estimates[0].abs().max())
    assert float((estimates[1] - estimates[0]).abs().max()) <= 1e-9 * scale, method
