"""Intervals over references for L-/C-Shapley, the moderated interval of
ShapleySampling, and the quantiles behind every interval."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from captum_graphshap import ShapleySampling
from captum_graphshap.attr.c_shapley import CShapley
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.l_shapley import LShapley
from captum_graphshap.graphs import FeatureGraph, LineGraph
from captum_graphshap.plans.permutations import permutation_ranks
from captum_graphshap.uncertainty.intervals import (
    check_confidence,
    interval_over_references,
    moderated_half_width,
    moderated_variance,
    normal_quantile,
    student_t_quantile,
)

from .optional_deps import optional
from .reference import ChainSumModel, TableGame, brute_permutation_samples
from .test_bad_input import CountingModel


# ------------------------------------------------------------------ quantiles
def test_quantiles_match_tables_and_scipy():
    assert normal_quantile(0.95) == pytest.approx(1.959963984540054, abs=1e-12)
    assert student_t_quantile(0.95, 10) == pytest.approx(2.228138851986274, abs=1e-9)
    assert student_t_quantile(0.99, 1) == pytest.approx(63.65674116287399, rel=1e-9)
    stats = optional("scipy.stats")
    for dof in (1, 2, 3, 4.5, 7, 30, 200, 10_000):
        for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
            want = stats.t.ppf(0.5 + level / 2, dof)
            assert student_t_quantile(level, dof) == pytest.approx(want, rel=1e-9, abs=1e-10)


@pytest.mark.parametrize("bad", [0, 1, -0.5, 1.5, float("nan")])
def test_confidence_outside_the_open_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match="confidence must be strictly between 0 and 1"):
        check_confidence(bad)


def test_interval_over_references_is_mean_and_standard_error():
    per_reference = torch.tensor([[1.0, 2.0, 4.0, 5.0]], dtype=torch.float64)
    mean, half = interval_over_references(per_reference, 0.95)
    assert mean.item() == 3.0
    sd = (sum((v - 3.0) ** 2 for v in (1, 2, 4, 5)) / 3) ** 0.5
    assert half.item() == pytest.approx(1.959963984540054 * sd / 2)
    with pytest.raises(ValueError, match="at least 2 references"):
        interval_over_references(per_reference[:, :1], 0.95)


# ------------------------------------------------------------------ moderated interval
def test_moderated_variance_and_half_width_by_hand():
    # K = 2 samples of d = 3 features; feature 1's two samples coincide
    samples = torch.tensor([[[1.0, 2.0, 0.0], [3.0, 2.0, 1.0]]], dtype=torch.float64)
    variance = [2.0, 0.0, 0.5]  # (a - b)^2 / 2
    mean_square = [5.0, 4.0, 0.5]  # (a^2 + b^2) / 2
    ratio = 2.5 / 9.5  # sum of variances / sum of mean squares
    moderated = [(ratio * m + v) / 2 for m, v in zip(mean_square, variance)]
    assert moderated == pytest.approx([1.6578947368421053, 0.5263157894736842, 0.3157894736842105])
    torch.testing.assert_close(
        moderated_variance(samples)[0], torch.tensor(moderated, dtype=torch.float64)
    )
    t1, t2 = 12.706204736174694, 4.302652729749462  # Student's 0.975 quantiles, 1 and 2 dof
    want = [max(t1 * v**0.5, t2 * m**0.5) / 2**0.5 for v, m in zip(variance, moderated)]
    # feature 0: the plain t is wider; feature 1: only the moderated one has width
    assert t1 * 2**0.5 > t2 * moderated[0] ** 0.5 and variance[1] == 0.0 < want[1]
    torch.testing.assert_close(
        moderated_half_width(samples, 0.95)[0],
        torch.tensor(want, dtype=torch.float64),
        rtol=1e-9,
        atol=0,
    )
    # the prior is fitted per example: a second example does not change the first's
    other = torch.cat([samples, 100 * torch.randn(1, 2, 3, dtype=torch.float64)])
    torch.testing.assert_close(
        moderated_half_width(other, 0.95)[0], torch.tensor(want, dtype=torch.float64)
    )
    # all samples 0 (an exact, null game): zero width, no 0/0
    assert moderated_half_width(torch.zeros(1, 3, 4), 0.95).eq(0).all()
    with pytest.raises(ValueError, match="at least 2 independent samples"):
        moderated_half_width(samples[:, :1], 0.95)


def test_shapley_sampling_default_interval_is_the_moderated_formula():
    # every sample rebuilt by hand from the game's table, then the formula
    d, n, batch = 4, 5, 2
    table = torch.randn(2**d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    model = TableGame(table)
    x = torch.ones(batch, d, dtype=torch.float64)
    got, half = ShapleySampling(model).attribute(
        x,
        n_samples=n,
        antithetic=False,
        generator=torch.Generator().manual_seed(5),
        return_uncertainty=True,
        confidence=0.9,
    )
    ranks = permutation_ranks(batch, d, n, False, torch.Generator().manual_seed(5), x.device)
    t4, t8 = student_t_quantile(0.9, n - 1), student_t_quantile(0.9, 2 * (n - 1))
    for example in range(batch):
        samples = brute_permutation_samples(model.value, ranks[example])
        variance, mean_square = samples.var(0), samples.square().mean(0)
        moderated = (variance.sum() / mean_square.sum() * mean_square + variance) / 2
        want = torch.maximum(t4 * variance.sqrt(), t8 * moderated.sqrt()) / math.sqrt(n)
        torch.testing.assert_close(got[example], samples.mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(half[example], want, rtol=1e-12, atol=1e-12)


def deep_softplus(d: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(d, 16), nn.Softplus(), nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 3)
    ).double()


@pytest.mark.parametrize(("antithetic", "orderings"), [(True, 4), (False, 2)])
def test_moderated_interval_covers_at_the_fewest_orderings_where_plain_t_does_not(
    antithetic, orderings
):
    # the fewest orderings an interval accepts: K = 2 samples (antithetic pairs or
    # orderings); a softplus model (not a family the interval was tuned on), d = 10
    d = 10
    model = deep_softplus(d, seed=2)
    x = 2 * torch.randn(16, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    exact = ExactShapley(model).attribute(x, target=0)
    coverage = {}
    for interval in ("moderated", "t"):
        hits = []
        for seed in range(40):
            estimate, half = ShapleySampling(model).attribute(
                x,
                target=0,
                n_samples=orderings,
                antithetic=antithetic,
                generator=torch.Generator().manual_seed(seed),
                return_uncertainty=True,
                interval=interval,
            )
            hits.append(((estimate - exact).abs() <= half + 1e-12).double().mean())
        coverage[interval] = torch.stack(hits).mean().item()
    # measured: 0.958 and 0.942 (0.935-0.964 over six other models)
    assert coverage["moderated"] >= 0.93, coverage
    # the plain t interval is what issue 19 measured: 0.88-0.90 where 0.95 is asked
    assert coverage["t"] <= 0.915, coverage


# ------------------------------------------------------------------ L-/C-Shapley
METHODS = [
    (LShapley, dict(k=1)),
    (LShapley, dict(k=2, context="input")),
    (CShapley, dict(k=2)),
    (CShapley, dict(max_size=2, estimator="kernel")),
]


@pytest.mark.parametrize(("method", "options"), METHODS)
def test_interval_is_the_spread_of_single_reference_attributions(method, options):
    d = 7
    model = ChainSumModel(d, seed=1)
    x = torch.randn(3, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    references = torch.randn(6, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    explainer = method(model)
    mean, half = explainer.attribute(
        x, references=references, return_uncertainty=True, confidence=0.9, **options
    )
    # Linear estimator: the attribution of the averaged game is the mean ...
    torch.testing.assert_close(mean, explainer.attribute(x, references=references, **options))
    # ... of the attributions of each reference's own game.
    single = torch.stack(
        [explainer.attribute(x, baselines=r[None], **options) for r in references], dim=-1
    )
    torch.testing.assert_close(mean, single.mean(dim=-1))
    want = normal_quantile(0.9) * single.std(dim=-1) / 6**0.5
    torch.testing.assert_close(half, want)


def test_interval_with_one_graph_per_example():
    d = 5
    model = ChainSumModel(d, seed=2)
    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    references = torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    star = FeatureGraph.from_edges(d, [(0, j) for j in range(1, d)])
    graphs = [star, LineGraph(d)]
    mean, half = LShapley(model).attribute(
        x, references=references, graph=graphs, k=1, return_uncertainty=True
    )
    for row, graph in enumerate(graphs):
        want_mean, want_half = LShapley(model).attribute(
            x[row : row + 1], references=references, graph=graph, k=1, return_uncertainty=True
        )
        torch.testing.assert_close(mean[row], want_mean[0])
        torch.testing.assert_close(half[row], want_half[0])


def test_intervals_over_sampled_references_cover_the_population_attribution():
    # The background set is a sample of a reference distribution; the interval
    # should cover the attribution of the averaged game over the population.
    d, batch, background = 8, 10, 30
    model = ChainSumModel(d, seed=3)
    x = torch.randn(batch, d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    population = 1.0 + torch.randn(
        4000, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5)
    )
    truth = LShapley(model).attribute(x, references=population, k=1)
    hits = []
    for draw in range(12):
        rows = torch.randperm(4000, generator=torch.Generator().manual_seed(10 + draw))
        mean, half = LShapley(model).attribute(
            x, references=population[rows[:background]], k=1, return_uncertainty=True
        )
        hits.append(((mean - truth).abs() <= half).double().mean())
    coverage = torch.stack(hits).mean().item()
    assert 0.85 <= coverage <= 0.99, coverage


BAD = [
    (dict(return_uncertainty=True), ValueError, "pass references="),
    (
        dict(return_uncertainty=True, references=torch.zeros(1, 5)),
        ValueError,
        "at least 2 references, got 1",
    ),
    (
        dict(return_uncertainty=True, references=torch.zeros(3, 5), confidence=1.0),
        ValueError,
        "confidence must be strictly between 0 and 1",
    ),
    (
        dict(return_uncertainty=True, references=torch.zeros(3, 4)),
        ValueError,
        r"references has shape \(3, 4\)",
    ),
    (dict(return_uncertainty="yes", references=torch.zeros(3, 5)), TypeError, "return_uncertainty"),
]


@pytest.mark.parametrize("method", [LShapley, CShapley])
@pytest.mark.parametrize(("kwargs", "error", "fragment"), BAD)
def test_bad_interval_arguments_are_refused_before_any_model_call(method, kwargs, error, fragment):
    model = CountingModel()
    with pytest.raises(error, match=fragment):
        method(model).attribute(torch.randn(2, 5), target=0, **kwargs)
    assert model.calls == 0
