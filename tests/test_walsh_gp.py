"""The Walsh-basis Gaussian-process estimator (``estimator="walsh_gp"``, ``"auto"``'s low budgets).

Checked against brute force: Shapley values of games of order two (exact),
of every coalition (interpolation), and the kriging formula written out
with an explicit basis of parities.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from captum_graphshap import ExactShapley, PairedKernelShap
from captum_graphshap.attr.paired_kernel_shap import auto_plan
from captum_graphshap.engine.plan import Plan
from captum_graphshap.plans import walsh_gp, walsh_kernel, walsh_kriging, walsh_local, walsh_triples
from captum_graphshap.plans.local_windows import mask_windows
from captum_graphshap.plans.stratified import size_allocation
from captum_graphshap.plans.walsh_gp import walsh_gp_plan
from captum_graphshap.plans.walsh_kernel import elementary_symmetric, leave_one_out_symmetric
from tests.reference import brute_shapley, model_game


class PairwiseGame(nn.Module):
    """``v(z) = b + w.z + z^T A z`` (order two): paired estimators are exact on it."""

    def __init__(self, d: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.randn(d, generator=g, dtype=torch.float64)
        self.a = torch.randn(d, d, generator=g, dtype=torch.float64).triu(1)
        self.rows = 0

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        self.rows += z.shape[0]
        z = z.double()
        return 0.3 + z @ self.w + ((z @ self.a) * z).sum(-1)


def mlp(d: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 1)).double().eval()


def planned_values(d: int, pairs: int, seed: int) -> tuple[Plan, torch.Tensor, torch.Tensor]:
    """A plan of ``pairs`` pairs (generator ``seed``), its rows and a small MLP's values on them."""
    model = mlp(d, 5 + seed)
    x = torch.randn(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2 + seed))
    plan = walsh_gp_plan(d, pairs, torch.Generator().manual_seed(seed), torch.device("cpu"))
    rows = plan.coalitions.dense()
    with torch.no_grad():
        values = model(rows.double() * x).reshape(1, -1)
    return plan, rows, values


def brute(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Exact Shapley values of ``x`` (one row) against a zero baseline, every coalition."""
    d = x.shape[1]
    v = model_game(model, x[0], torch.zeros_like(x[0]), torch.arange(d))
    return torch.tensor(brute_shapley(v, d), dtype=torch.float64)


# (8, 100): 49 pairs, enough for the interaction-weighted relevance
@pytest.mark.parametrize("d, budget", [(6, 20), (9, 30), (12, 60), (8, 100)])
def test_exact_on_games_of_order_two(d: int, budget: int) -> None:
    game = PairwiseGame(d, seed=d)
    one = torch.ones(1, d, dtype=torch.float64)
    phi = PairedKernelShap(game).attribute(
        one,
        torch.zeros_like(one),
        budget=budget,
        estimator="walsh_gp",
        generator=torch.Generator().manual_seed(0),
    )
    exact = brute(game, one)
    torch.testing.assert_close(phi[0], exact, rtol=0, atol=1e-8)


@pytest.mark.parametrize("d", [40, 64, 96])
def test_the_default_is_exact_on_wide_games_of_order_two_from_8_d_evaluations(d: int) -> None:
    """From 33 to 96 features ``"auto"`` fits the process from ``8 d + 2`` evaluations,
    exact on a game of order two: ``phi_i = w_i + sum_j (a_ij + a_ji) / 2`` (each
    product ``z_i z_j`` split evenly between its two players)."""
    game = PairwiseGame(d, seed=d)
    one = torch.ones(1, d, dtype=torch.float64)
    phi = PairedKernelShap(game).attribute(
        one, torch.zeros_like(one), budget=8 * d + 2, generator=torch.Generator().manual_seed(0)
    )
    exact = game.w + (game.a.sum(1) + game.a.sum(0)) / 2
    torch.testing.assert_close(phi[0], exact, rtol=0, atol=1e-8)


def test_interpolates_when_every_pair_is_observed() -> None:
    """With all 2^(d-1) - 1 pairs (and the full set) the odd part is known: exact Shapley."""
    d = 6
    model = mlp(d, 3)
    x = torch.randn(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    plan = walsh_gp_plan(d, 2 ** (d - 1) - 1, torch.Generator().manual_seed(0), torch.device("cpu"))
    rows = plan.coalitions.dense()
    with torch.no_grad():
        values = model(rows.double() * x).reshape(1, -1)
    torch.testing.assert_close(plan.estimator(values)[0], brute(model, x), rtol=0, atol=1e-6)


def test_leave_one_out_symmetric_polynomials() -> None:
    w = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    got = leave_one_out_symmetric(w, elementary_symmetric(w, 4))
    for i in range(6):
        others = torch.cat([w[:, :i], w[:, i + 1 :]], dim=1)
        torch.testing.assert_close(got[:, i], elementary_symmetric(others, 4), atol=1e-12, rtol=0)


def test_elementary_symmetric_polynomials() -> None:
    w = torch.randn(3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = elementary_symmetric(w, 4)
    for k in range(5):
        want = torch.tensor(
            [
                sum(
                    (
                        math.prod(float(row[j]) for j in subset)
                        for subset in itertools.combinations(range(7), k)
                    ),
                    0.0,
                )
                for row in w
            ]
        )
        torch.testing.assert_close(got[:, k], want.to(torch.float64))


def test_matches_kriging_written_with_explicit_parities(monkeypatch: pytest.MonkeyPatch) -> None:
    """The closed-form covariances equal the explicit basis of odd parities of order >= 3."""
    monkeypatch.setattr(walsh_gp, "ORDER_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_gp, "RELEVANCE_POWERS", (1.0,))
    d, pairs = 7, 20
    plan, rows, values = planned_values(d, pairs, seed=0)
    got = plan.estimator(values)[0]

    sampled = rows[2 : 2 + pairs]
    inside, outside = values[0, 2 : 2 + pairs], values[0, 2 + pairs :]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    odd = torch.cat([(inside - outside) / 2, ((values[0, 1] - values[0, 0]) / 2)[None]])
    # the relevance comes from the paired linear fit: read it off the estimator's call
    captured = {}
    original = walsh_gp.posterior_parts

    def spy(
        signs_: torch.Tensor,
        odd_: torch.Tensor,
        scale_: torch.Tensor,
        variance: bool = False,
        *,
        triples: torch.Tensor | None = None,
        predict: torch.Tensor | None = None,
        windows: walsh_local.Windows | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        assert triples is None  # 20 pairs < 6 d: no triple weights
        captured["scale"] = scale_[0]
        return original(
            signs_, odd_, scale_, variance, triples=triples, predict=predict, windows=windows
        )

    monkeypatch.setattr(walsh_gp, "posterior_parts", spy)
    plan.estimator(values)
    relevance = captured["scale"] + walsh_gp.RELEVANCE_FLOOR
    relevance = relevance / relevance.mean()

    parities = [t for k in range(3, d + 1, 2) for t in itertools.combinations(range(d), k)]
    parities = [t for t in parities if len(t) <= walsh_gp.MAX_ORDER]
    prior = torch.tensor(
        [0.1 ** ((len(t) - 3) // 2) * float(relevance[list(t)].prod()) for t in parities],
        dtype=torch.float64,
    )
    _, want, _, _ = explicit_kriging(signs, odd, parities, prior)
    want = want + ((values[0, 1] - values[0, 0]) - want.sum()) / d
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-9)


def paired_signs(d: int, count: int, seed: int) -> torch.Tensor:
    """``(count + 1, d)`` +-1 rows: one coalition of each of ``count`` complementary pairs
    (feature ``d - 1`` out), as the design draws them, and the full coalition."""
    codes = torch.randperm(2 ** (d - 1) - 1, generator=torch.Generator().manual_seed(seed))
    member = ((codes[:count] + 1)[:, None] >> torch.arange(d)) & 1
    return torch.cat([member, torch.ones(1, d, dtype=torch.long)]).double() * 2 - 1


def explicit_kriging(
    signs: torch.Tensor, odd: torch.Tensor, parities: list[tuple[int, ...]], prior: torch.Tensor
) -> tuple[float, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Universal kriging written with the explicit basis of ``parities`` and their prior
    variances: the restricted likelihood, the Shapley values' posterior mean, their
    variances over the scale, and the restricted scale estimate."""
    d = signs.shape[1]
    basis = torch.stack([signs[:, list(t)].prod(1) for t in parities], 1)
    members = torch.tensor(
        [[2.0 / len(t) if i in t else 0.0 for t in parities] for i in range(d)], dtype=torch.float64
    )
    kernel = basis @ torch.diag(prior) @ basis.T
    kernel = kernel + walsh_kriging.JITTER * kernel.diagonal().mean() * torch.eye(len(basis))
    inverse = torch.linalg.inv(kernel)
    normal = signs.T @ inverse @ signs
    beta = torch.linalg.solve(normal, signs.T @ inverse @ odd)
    residual = odd - signs @ beta
    quadratic = residual @ inverse @ residual
    rows = len(basis)
    likelihood = (
        -0.5 * (rows - d) * torch.log(quadratic)
        - 0.5 * torch.linalg.slogdet(kernel)[1]
        - 0.5 * torch.linalg.slogdet(normal)[1]
    )
    cross = members @ torch.diag(prior) @ basis.T  # Cov(phi_i, u) for order >= 3
    mean = 2 * beta + cross @ inverse @ residual
    lift = 2 * torch.eye(d, dtype=torch.float64) - signs.T @ inverse @ cross.T
    variance = (
        (members**2 @ prior)
        - (cross @ inverse @ cross.T).diagonal()
        + (lift * torch.linalg.solve(normal, lift)).sum(0)
    )
    return float(likelihood), mean, variance, quadratic / (rows - d)


def test_reweighted_triples_are_kriging_with_those_parities_variances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With triple weights, the prior of highest restricted likelihood among the plain
    and the reweighted one is chosen, and its mean and variance equal the kriging
    written with an explicit basis of parities whose order-three variances are
    ``r_i r_j r_k m_T``."""
    monkeypatch.setattr(walsh_gp, "ORDER_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_gp, "RELEVANCE_POWERS", (1.0,))
    d = 7  # 57 parities of order three and up: the covariance of 31 rows has full rank
    signs = paired_signs(d, 30, seed=0)
    # an odd part with one strong triple, (0, 1, 2), and a weak one
    odd = 0.5 * signs[:, 0] - 0.3 * signs[:, 1] + 2.0 * signs[:, :3].prod(1)
    odd = (odd + 0.1 * signs[:, 3:].prod(1))[None]
    scale = torch.ones(1, d, dtype=torch.float64)
    triples = walsh_kernel.triple_parities(d, torch.device("cpu"))
    weights = torch.full((1, len(triples)), 0.2, dtype=torch.float64)
    weights[0, 0] = 5.0  # (0, 1, 2) comes first
    mean, spread, _ = walsh_gp.posterior_parts(signs, odd, scale, True, triples=weights)
    assert spread is not None

    parities = [t for k in (1, 3, 5, 7) for t in itertools.combinations(range(d), k)]
    orders = torch.tensor([len(t) for t in parities])
    fits = []
    for weighted in (False, True):
        # equal scales: every relevance is 1 once normalised, so r_T = 1
        prior = torch.tensor(
            [0.0 if len(t) == 1 else 0.1 ** ((len(t) - 3) // 2) for t in parities],
            dtype=torch.float64,
        )
        if weighted:
            prior[orders == 3] *= weights[0]
        likelihood, want_mean, variance, scale = explicit_kriging(signs, odd[0], parities, prior)
        fits.append((likelihood, want_mean, scale * variance))
    assert fits[1][0] > fits[0][0] + 1  # the reweighted prior explains the strong triple
    torch.testing.assert_close(mean[0], fits[1][1], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(spread[0], fits[1][2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("d", [5, 10, 13])
def test_local_sets_are_the_odd_subsets_of_the_centred_windows(d: int) -> None:
    """Every subset of order three or five within some window of ``LOCAL_WIDTH``
    consecutive ids centred on a feature (cut at the ends), counted once per such
    window; ``local_parities`` is the product of its members' signs."""
    windows = walsh_local.line_windows(d)
    members, multiplicity, order = walsh_local.local_sets(windows, torch.device("cpu"))
    got = {
        tuple(int(j) for j in row.nonzero()[:, 0]): float(m)
        for row, m in zip(members, multiplicity)
    }
    half = walsh_local.LOCAL_WIDTH // 2
    windows = [set(range(max(0, c - half), min(d, c + half + 1))) for c in range(d)]
    want = {}
    for size in (3, 5):
        for subset in itertools.combinations(range(d), size):
            count = sum(set(subset) <= window for window in windows)
            if count:
                want[subset] = float(count)
    assert got == want
    assert order.tolist() == [float(len(t)) for t in got]
    signs = torch.randint(0, 2, (30, d), generator=torch.Generator().manual_seed(d)) * 2 - 1.0
    parities = walsh_local.local_parities(signs.double(), members)
    brute_parities = torch.stack([signs[:, list(t)].prod(1) for t in got], 1).double()
    torch.testing.assert_close(parities, brute_parities, rtol=0, atol=0)


#: a 2 x 5 raster's windows (3 x 3 blocks, cut at the edges), from its feature mask
RASTER_WINDOWS = mask_windows([torch.arange(10).view(1, 2, 5)], 10)


@pytest.mark.parametrize(
    ("windows", "triples"),
    [
        (walsh_local.line_windows(10), ((2, 3, 4), (4, 5, 6))),
        (RASTER_WINDOWS, ((2, 7, 8), (1, 2, 6))),  # (2, 7, 8): no 5 consecutive ids hold it
    ],
    ids=["ids' order", "2 x 5 raster"],
)
def test_local_parities_are_kriging_with_those_parities_variances(
    monkeypatch: pytest.MonkeyPatch,
    windows: walsh_local.Windows,
    triples: tuple[tuple[int, ...], tuple[int, ...]],
) -> None:
    """The grid's local shape adds ``lambda sigma_|T| m_T`` (equal relevances) to the
    variance of each local parity of the windows; chosen by the restricted likelihood
    where the odd part is local, its mean and variance are kriging with that explicit
    basis."""
    monkeypatch.setattr(walsh_gp, "ORDER_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_gp, "RELEVANCE_POWERS", (1.0,))
    monkeypatch.setattr(walsh_gp, "LOCAL_WEIGHTS", (50.0,))
    monkeypatch.setattr(walsh_gp, "LOCAL_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_local, "LOCAL_WEIGHTS", (50.0,))
    d = 10  # 492 parities of order three to seven: the covariance of 41 rows has full rank
    signs = paired_signs(d, 40, seed=1)
    # an odd part of two triples of neighbouring features, and a linear part
    first, second = (signs[:, list(t)].prod(1) for t in triples)
    odd = (0.5 * signs[:, 0] + 1.5 * first - 1.0 * second)[None]
    scale = torch.ones(1, d, dtype=torch.float64)
    mean, spread, _ = walsh_gp.posterior_parts(signs, odd, scale, True, windows=windows)
    assert spread is not None

    local, multiplicity, _ = walsh_local.local_sets(windows, torch.device("cpu"))
    count = {
        tuple(int(j) for j in row.nonzero()[:, 0]): float(m) for row, m in zip(local, multiplicity)
    }
    parities = [t for k in (3, 5, 7) for t in itertools.combinations(range(d), k)]
    fits = []
    for weight in (0.0, 50.0):
        prior = torch.tensor(
            [0.1 ** ((len(t) - 3) // 2) * (1 + weight * count.get(t, 0.0)) for t in parities],
            dtype=torch.float64,
        )
        likelihood, want_mean, variance, _ = explicit_kriging(signs, odd[0], parities, prior)
        fits.append((likelihood, want_mean, variance))
    assert fits[1][0] > fits[0][0] + 1  # the local prior explains the neighbours' triples
    torch.testing.assert_close(mean[0], fits[1][1], rtol=1e-9, atol=1e-12)
    # the variances up to the scale (restricted or leave-one-out, tested elsewhere)
    ratio = spread[0] / fits[1][2]
    torch.testing.assert_close(ratio, ratio.mean().expand(d), rtol=1e-8, atol=0)


def test_local_parities_take_a_1d_convolutions_neighbourhoods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A random 1-d ReLU CNN with max-pooling (the zoo's ``cnn1d``) on a signal of 16
    segments of 4 samples: its interactions are between neighbouring segments, and at
    256 evaluations the default with local parities is several times closer to the
    exact values than the same process without them (0.0018 against 0.0129 here;
    0.11-0.15x on three random models, and about 0.01x at 1,024 evaluations)."""
    d = 16
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Unflatten(1, (1, 4 * d)), nn.Conv1d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(),
        nn.Linear(16 * d, 1),
    ).eval()  # fmt: skip
    x = torch.randn(1, 4 * d)
    mask = torch.arange(4 * d)[None] // 4
    exact = ExactShapley(model).attribute(x, baselines=0.0, target=0, feature_mask=mask).double()

    def mean_error() -> float:
        errors = []
        for seed in range(3):
            phi = PairedKernelShap(model).attribute(
                x, baselines=0.0, target=0, feature_mask=mask, budget=256,
                generator=torch.Generator().manual_seed(seed),
            )  # fmt: skip
            errors.append(float((phi.double() - exact).abs().sum() / exact.abs().sum()))
        return sum(errors) / len(errors)

    with_local = mean_error()
    monkeypatch.setattr(walsh_gp, "local_enabled", lambda windows: False)
    without = mean_error()
    assert with_local < 0.3 * without, (with_local, without)


@pytest.mark.parametrize("d", [3, 6, 9, 12])
def test_triple_table_gives_the_triples_covariance_of_every_pair_of_rows(d: int) -> None:
    """Read through the agreement patterns, the table of the triples'
    masses equals ``sum_T m_T chi_T(a) chi_T(b)`` written out, for every pair of rows
    (both halves of the pattern code, an odd ``d`` included)."""
    g = torch.Generator().manual_seed(d)
    triples = walsh_kernel.triple_parities(d, torch.device("cpu"))
    mass = torch.rand(2, 3, len(triples), generator=g, dtype=torch.float64)  # (E, W, T)
    signs = (torch.rand(37, d, generator=g) < 0.5).double() * 2 - 1
    parities = signs[:, triples].prod(dim=-1)  # (rows, T)
    want = torch.einsum("at,ewt,bt->ewab", parities, mass, parities)
    table = walsh_triples.triple_table(mass, d)
    got = walsh_kernel.read_patterns(table[:, :, None], signs, signs)[:, :, 0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_triples_are_reweighted_on_wide_games_only_from_enough_pairs() -> None:
    """Up to 16 features at any number of pairs; from 17 to 24 features only from 16
    pairs per feature; never above 24 features or below three."""
    ones = {d: torch.ones(1, d, d, dtype=torch.float64) for d in (2, 3, 16, 20, 24, 25)}
    assert walsh_triples.triple_weights(ones[2], 1000) is None
    assert walsh_triples.triple_weights(ones[3], 18) is not None
    assert walsh_triples.triple_weights(ones[16], 96) is not None
    assert walsh_triples.triple_weights(ones[16], 511) is not None
    assert walsh_triples.triple_weights(ones[20], 319) is None
    weights = walsh_triples.triple_weights(ones[20], 320)
    assert weights is not None and weights.shape == (1, math.comb(20, 3))
    torch.testing.assert_close(weights, torch.ones_like(weights))  # equal strengths: equal
    assert walsh_triples.triple_weights(ones[24], 16 * 24) is not None
    assert walsh_triples.triple_weights(ones[25], 10_000) is None


def test_the_default_reweights_triples_beyond_the_selection_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 1,024 evaluations and 12 features (512 rows, twice
    :data:`~captum_graphshap.plans.walsh_gp.SELECTION_ROWS`) the process gets the
    triples' weights, and its estimate is that of the grid chosen on the selection rows
    with the reweighted shapes among them."""
    seen = []
    original = walsh_gp.posterior_parts

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs.get("triples"))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(walsh_gp, "posterior_parts", spy)
    model = mlp(12, seed=4)
    x = torch.randn(1, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    phi = PairedKernelShap(model).attribute(
        x, torch.zeros_like(x), target=0, budget=1024, generator=torch.Generator().manual_seed(0)
    )
    assert len(seen) == 1 and seen[0] is not None and seen[0].shape == (1, math.comb(12, 3))
    truth = brute(model, x)
    torch.testing.assert_close(phi.sum(), truth.sum(), rtol=1e-6, atol=1e-6)
    assert float((phi - truth).abs().sum() / truth.abs().sum()) < 0.05


def test_posterior_variance_is_gaussian_conditioning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variances equal conditioning the joint Gaussian of (phi, u), written with parities.

    The linear parities' flat prior is approximated by a variance of ``1e6``
    (universal kriging is its limit) and ``s^2`` is the larger of the restricted
    estimate ``(u - X beta)' K^-1 (u - X beta) / (rows - d)`` and the
    leave-one-out one ``mean_i (P u)_i^2 / P_ii``.
    """
    monkeypatch.setattr(walsh_gp, "ORDER_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_gp, "RELEVANCE_POWERS", (2.0,))
    d, pairs = 6, 14
    plan, rows, values = planned_values(d, pairs, seed=1)
    sampled = rows[2 : 2 + pairs]
    weights = walsh_gp.walsh_gp_design(
        d, pairs, torch.Generator().manual_seed(1), torch.device("cpu")
    ).weights  # the plan's own draw: the same generator seed
    posterior = walsh_gp.walsh_gp_posterior(sampled, weights, values)
    assert posterior.dof == pairs + 1 - d

    inside, outside = values[0, 2 : 2 + pairs], values[0, 2 + pairs :]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    odd = torch.cat([(inside - outside) / 2, ((values[0, 1] - values[0, 0]) / 2)[None]])
    linear = walsh_gp.kernel_shapley(
        torch.cat([sampled, ~sampled]),
        torch.cat([inside, outside])[None],
        values[:, 0],
        values[:, 1],
        torch.cat([weights, weights]),
    )
    scale = walsh_gp._relevance_scale(sampled, weights, linear, inside[None], outside[None])[0][0]
    relevance = (scale + walsh_gp.RELEVANCE_FLOOR) ** 2
    relevance = relevance / relevance.mean()
    parities = [t for k in (1, 3, 5) for t in itertools.combinations(range(d), k)]
    basis = torch.stack([signs[:, list(t)].prod(1) for t in parities], 1)
    prior = torch.tensor(
        [1e6 if len(t) == 1 else 0.1 ** ((len(t) - 3) // 2) * float(relevance[list(t)].prod())
         for t in parities],
        dtype=torch.float64,
    )  # fmt: skip
    higher = prior < 1e6
    kernel = basis[:, higher] @ torch.diag(prior[higher]) @ basis[:, higher].T
    jitter = walsh_kriging.JITTER * kernel.diagonal().mean()
    observed = basis @ torch.diag(prior) @ basis.T + jitter * torch.eye(len(basis))
    members = torch.tensor(
        [[2.0 / len(t) if i in t else 0.0 for t in parities] for i in range(d)], dtype=torch.float64
    )
    prior_phi = members @ torch.diag(prior) @ members.T
    cross = members @ torch.diag(prior) @ basis.T
    conditioned = prior_phi - cross @ torch.linalg.solve(observed, cross.T)
    # s^2 from the kriging residual (the flat prior's limit of the same fit)
    inverse = torch.linalg.inv(kernel + jitter * torch.eye(len(basis)))
    beta = torch.linalg.solve(signs.T @ inverse @ signs, signs.T @ inverse @ odd)
    residual = odd - signs @ beta
    restricted = residual @ inverse @ residual / (len(basis) - d)
    # or the leave-one-out residuals' scale, where larger
    projector = inverse - inverse @ signs @ torch.linalg.solve(
        signs.T @ inverse @ signs, signs.T @ inverse
    )
    leave_one_out = ((projector @ odd).square() / projector.diagonal()).mean()
    want = torch.maximum(restricted, leave_one_out) * conditioned.diagonal()
    torch.testing.assert_close(posterior.variance[0], want, rtol=1e-4, atol=1e-12)
    # and the mean is the estimator's
    torch.testing.assert_close(posterior.mean, plan.estimator(values), rtol=0, atol=0)


@pytest.mark.parametrize("chunked", [False, True], ids=["one-chunk", "chunks"])
@pytest.mark.parametrize("d", [1, 2, 3, 6, 9])
def test_pattern_table_covariances_equal_the_power_sum_build(
    d: int, chunked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gather from the ``2^d`` agreement patterns equals the build from power sums
    (Newton's identities), in one block of rows or in blocks of 7 (the last one
    shorter), both triangles."""
    if chunked:
        top = min(walsh_gp.MAX_ORDER, d)
        monkeypatch.setattr(
            walsh_kernel, "BUILD_CHUNK_ELEMENTS", 7 * (top + 1) * 3 * 2 * (2 ** max(0, d - 1) + 3)
        )
    g = torch.Generator().manual_seed(d)
    rows = 2 ** max(0, d - 1) + 3
    signs = (torch.rand(rows, d, generator=g) < 0.5).double() * 2 - 1
    relevance = torch.rand(3, 2, d, generator=g, dtype=torch.float64) * 3  # (E, W, d)
    top = min(walsh_gp.MAX_ORDER, d)
    grid = torch.rand(3, 2, top + 1, generator=g, dtype=torch.float64)  # (E, G, top + 1)
    table = walsh_kernel.pattern_covariances(signs, relevance, grid, top)
    built = walsh_kernel.built_covariances(signs, relevance, grid, top)
    torch.testing.assert_close(table, built, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(table, table.mT)  # symmetric
    # and one entry from its definition, sum_k sigma_k e_k(r_j x_j x'_j)
    agree = signs[rows - 1] * signs[0]
    want = (grid[1, 0] * elementary_symmetric(relevance[1, 1] * agree, top)).sum()
    torch.testing.assert_close(table[1, 1, 0, rows - 1, 0], want)


def _single_prior_means(
    monkeypatch: pytest.MonkeyPatch, plan_values: torch.Tensor, plan: Plan
) -> dict[tuple[float, float], torch.Tensor]:
    """The estimate under each prior of the grid alone, fitted on every row."""
    means = {}
    for power in walsh_gp.RELEVANCE_POWERS:
        for decay in walsh_gp.ORDER_DECAYS:
            with monkeypatch.context() as patch:
                patch.setattr(walsh_gp, "RELEVANCE_POWERS", (power,))
                patch.setattr(walsh_gp, "ORDER_DECAYS", (decay,))
                means[power, decay] = plan.estimator(plan_values)
    return means


def _subset_likelihoods(
    d: int, pairs: int, seed: int, rows: torch.Tensor, values: torch.Tensor, subset: list[int]
) -> dict[tuple[float, float], float]:
    """Each prior of the grid alone: its restricted likelihood on the observed rows
    ``subset`` (the full coalition is row ``pairs``) of :func:`planned_values`."""
    sampled = rows[2 : 2 + pairs]
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    odd = torch.cat([(inside - outside) / 2, ((values[:, 1] - values[:, 0]) / 2)[:, None]], 1)
    weights = walsh_gp.walsh_gp_design(
        d, pairs, torch.Generator().manual_seed(seed), torch.device("cpu")
    ).weights
    linear = walsh_gp.kernel_shapley(
        torch.cat([sampled, ~sampled]), torch.cat([inside, outside], 1), values[:, 0],
        values[:, 1], torch.cat([weights, weights]),
    )  # fmt: skip
    scale, _ = walsh_gp._relevance_scale(sampled, weights, linear, inside, outside)
    likelihood = {}
    for power in walsh_gp.RELEVANCE_POWERS:
        for decay in walsh_gp.ORDER_DECAYS:
            relevance = (scale + walsh_gp.RELEVANCE_FLOOR) ** power
            relevance = (relevance / relevance.mean())[:, None]
            grid = walsh_kernel.order_variances(d, decay)[None, None]
            none = torch.zeros(1, 1, dtype=torch.bool)
            priors = walsh_gp._Priors(
                relevance, grid, relevance.new_zeros(1, 0), none, relevance.new_zeros(1, 1)
            )
            fit = walsh_gp._best_prior(signs[subset], odd[:, subset], priors, min(7, d), None)
            likelihood[power, decay] = float(fit.likelihood[0])
    return likelihood


def _spaced(rows: list[int], count: int) -> list[int]:
    """``count`` of ``rows``: evenly spaced over all but the last, and the last."""
    spaced = torch.linspace(0, len(rows) - 2, count - 1).round().long().tolist()
    return [rows[i] for i in [*spaced, len(rows) - 1]]


def test_prior_chosen_on_evenly_spaced_rows_then_fitted_on_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above SELECTION_ROWS rows, the estimate is one single prior's fit on every row:
    the prior of highest restricted likelihood on the evenly spaced subset."""
    d, pairs = 7, 40
    plan, rows, values = planned_values(d, pairs, seed=3)
    whole = _single_prior_means(monkeypatch, values, plan)
    monkeypatch.setattr(walsh_gp, "SELECTION_ROWS", 12)
    got = plan.estimator(values)
    matches = [prior for prior, mean in whole.items() if torch.allclose(got, mean, rtol=1e-10)]
    assert len(matches) == 1, (got, whole)
    subset = [*torch.linspace(0, pairs - 1, 11).round().long().tolist(), pairs]
    assert len(set(subset)) == 12 and subset == _spaced(list(range(pairs + 1)), 12)
    likelihood = _subset_likelihoods(d, pairs, 3, rows, values, subset)
    assert matches[0] == max(likelihood, key=likelihood.__getitem__), likelihood


def test_prior_failing_on_every_row_falls_back_to_the_whole_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d, pairs = 7, 40
    plan, _, values = planned_values(d, pairs, seed=4)
    values = torch.cat([values, values * 0.5 + 0.1])
    want = plan.estimator(values)  # 41 rows: below SELECTION_ROWS, the whole grid
    monkeypatch.setattr(walsh_gp, "SELECTION_ROWS", 12)
    original = walsh_gp._factored_covariances

    def failing_on_every_row(
        signs: torch.Tensor, priors: walsh_gp._Priors, top: int, windows: object
    ) -> walsh_kriging.Factored:
        factored = original(signs, priors, top, windows)
        if len(signs) == pairs + 1 and priors.relevance.shape[:2] == (2, 1):  # the chosen
            info = factored.info.clone()
            info[0] = 1  # the first example's chosen prior is not positive definite there
            factored = factored._replace(info=info)
        return factored

    monkeypatch.setattr(walsh_gp, "_factored_covariances", failing_on_every_row)
    got = plan.estimator(values)
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert torch.isfinite(got).all()


def test_tied_likelihoods_go_to_the_grids_first_prior_not_to_rounding() -> None:
    """At the fewest pairs (d pairs: one residual direction) every prior of the grid has
    the same restricted likelihood. The estimate must not depend on which one rounding
    favours: when argmax broke the tie, values 1e-15 apart moved it by up to 5e-3 of
    its scale (and CPU and GPU were 3e-3 apart)."""
    for seed in range(3):
        plan, _, values = planned_values(12, 12, seed=seed)
        want = plan.estimator(values)
        noise = torch.Generator().manual_seed(seed)
        for _ in range(8):
            jitter = 1e-15 * torch.randn(values.shape, generator=noise, dtype=values.dtype)
            got = plan.estimator(values * (1 + jitter))
            assert float((got - want).abs().max()) <= 1e-11 * float(want.abs().max())


def test_work_memory_is_the_devices_limit_or_a_quarter_of_what_cuda_has_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The posterior's chunks (and the covariance build's blocks) take the CPU's limit
    on the CPU, the accelerator's elsewhere, and on CUDA no more than a quarter of
    the free memory and the allocator's cached, unused blocks: a model filling most
    of a GPU leaves smaller chunks, not an out-of-memory error."""
    limits = {"cpu": 1000, "accelerator": 10**9}
    assert walsh_kernel.work_floats(torch.device("cpu"), limits) == 1000
    assert walsh_kernel.work_floats(torch.device("meta"), limits) == 10**9
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (8 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 2**30)
    cuda = torch.device("cuda")
    assert walsh_kernel.work_floats(cuda, limits) == (10 * 2**30) // 32  # 10 GiB left
    assert walsh_kernel.work_floats(cuda, {"cpu": 1, "accelerator": 5}) == 5
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (0, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 2**30)
    assert walsh_kernel.work_floats(cuda, limits) == 1  # nothing left: one example a chunk


def test_efficient_finite_and_each_example_its_own() -> None:
    d = 10
    model = mlp(d, 7)
    x = torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    explainer = PairedKernelShap(model)
    batch = explainer.attribute(
        x, target=0, budget=80, estimator="walsh_gp", generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        total = (model(x) - model(torch.zeros_like(x)))[:, 0]
    torch.testing.assert_close(batch.sum(1), total, rtol=0, atol=1e-8)
    alone = explainer.attribute(
        x[2:3],
        target=0,
        budget=80,
        estimator="walsh_gp",
        generator=torch.Generator().manual_seed(0),
    )
    torch.testing.assert_close(alone[0], batch[2], rtol=0, atol=1e-10)


def test_more_accurate_than_permutations_at_low_budget() -> None:
    """At 5 d evaluations on small ReLU MLPs it beats antithetic permutations (mean error)."""
    from captum_graphshap import ShapleySampling

    d, errors = 8, {"walsh_gp": 0.0, "permutation": 0.0}
    for seed in range(4):
        model = mlp(d, 10 + seed)
        x = torch.randn(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        exact = brute(model, x)
        g = torch.Generator().manual_seed(seed)
        gp = PairedKernelShap(model).attribute(x, target=0, budget=5 * d, generator=g)
        g = torch.Generator().manual_seed(seed)
        perm = ShapleySampling(model).attribute(x, target=0, budget=5 * d, generator=g)
        errors["walsh_gp"] += float((gp[0] - exact).abs().sum())
        errors["permutation"] += float((perm[0] - exact).abs().sum())
    assert errors["walsh_gp"] < errors["permutation"], errors


def test_auto_picks_walsh_gp_from_the_fewest_pairs_on() -> None:
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    assert auto_plan(16, 62, g, cpu)[1] == "walsh_gp"  # 4 d
    # up to AUTO_WALSH_GP_FEATURES features at every budget below 2^d
    pairs = walsh_gp.AUTO_WALSH_GP_MAX_PAIRS
    assert auto_plan(16, 2 * pairs, g, cpu)[1] == "walsh_gp"
    assert auto_plan(16, 8 * pairs, g, cpu)[1] == "walsh_gp"
    # above, up to AUTO_ADJUSTED_MAX_PAIRS pairs
    assert walsh_gp.AUTO_WALSH_GP_FEATURES < 24 <= walsh_gp.MAX_FEATURES
    assert auto_plan(24, 24 * 20, g, cpu)[1] == "walsh_gp"
    assert walsh_gp.auto_fit_pairs(24) == walsh_gp.auto_fit_pairs(16) == pairs
    most = walsh_gp.AUTO_ADJUSTED_MAX_PAIRS
    assert auto_plan(24, 2 * most, g, cpu)[1] == "walsh_gp"
    assert auto_plan(24, 2 * most + 2, g, cpu)[1] == "cubic"
    assert auto_plan(16, 20, g, cpu)[1] != "walsh_gp"  # fewer pairs than features
    # from 33 to 96 features from 4 d pairs (8 d + 2 evaluations) on, up to the same cap
    assert walsh_gp.MAX_FEATURES == 32 and walsh_gp.WIDE_MAX_FEATURES == 96
    assert auto_plan(64, 8 * 64 - 2, g, cpu)[1] == "permutation"  # 4 d - 1 pairs
    assert auto_plan(64, 8 * 64, g, cpu)[1] == "walsh_gp"
    assert auto_plan(40, 8 * 40, g, cpu)[1] == "walsh_gp"
    assert auto_plan(40, 1024, g, cpu)[1] == "walsh_gp"
    assert auto_plan(40, 2 * most, g, cpu)[1] == "walsh_gp"
    assert auto_plan(40, 2 * most + 2, g, cpu)[1] == "cubic"
    assert auto_plan(96, 8 * 96, g, cpu)[1] == "walsh_gp"
    assert auto_plan(96, 8 * 96 - 2, g, cpu)[1] == "permutation"
    assert auto_plan(97, 1024, g, cpu)[1] == "permutation"  # beyond WIDE_MAX_FEATURES
    assert auto_plan(97, 2048, g, cpu)[1] == "permutation"  # below 32 d beyond 96
    assert auto_plan(97, 32 * 97, g, cpu)[1] == "cubic"
    # BayesShap's posterior keeps the process up to MAX_FEATURES only
    assert not walsh_gp.auto_walsh_gp(40, 1000)
    assert walsh_gp.auto_walsh_gp(40, 1000, wide=True)


def test_auto_samples_permutations_up_to_12_d_from_48_features_on() -> None:
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    # from 33 to 47 features permutations up to the process, from 8 d + 2 evaluations
    assert auto_plan(40, 6 * 40, g, cpu)[1] == "permutation"
    assert auto_plan(40, 8 * 40 - 2, g, cpu)[1] == "permutation"
    assert auto_plan(40, 8 * 40, g, cpu)[1] == "walsh_gp"
    assert auto_plan(33, 8 * 33 - 2, g, cpu)[1] == "permutation"
    assert auto_plan(47, 8 * 47, g, cpu)[1] == "walsh_gp"
    # beyond 96 at 32 d: a ViT over 196 patches at 2,048 evaluations samples orderings,
    # and so does one over its 147 tokens off the baseline (the cubic fit: 3.5x the error)
    assert auto_plan(196, 2046, g, cpu)[1] == "permutation"
    assert auto_plan(147, 2046, g, cpu)[1] == "permutation"
    assert auto_plan(128, 32 * 128 - 4, g, cpu)[1] == "permutation"
    assert auto_plan(128, 32 * 128, g, cpu)[1] == "cubic"
    # up to 96 features the process takes over from 8 d evaluations instead
    assert auto_plan(49, 8 * 49 - 4, g, cpu)[1] == "permutation"
    assert auto_plan(49, 8 * 49, g, cpu)[1] == "walsh_gp"


def test_designs_beyond_the_fitted_pairs_extend_the_smaller_design() -> None:
    """Beyond the pairs it factorises, auto's design is the smaller budget's design of
    the same generator, extended size by size to a design of the larger budget."""
    cpu = torch.device("cpu")
    small = walsh_gp.walsh_gp_design(16, 512, torch.Generator().manual_seed(0), cpu, fit_pairs=512)
    assert small.fitted is None
    design = walsh_gp.walsh_gp_design(
        16, 1500, torch.Generator().manual_seed(0), cpu, fit_pairs=512
    )
    assert design.fitted is not None and torch.equal(design.fitted, torch.arange(512))
    assert torch.equal(design.sampled[:512], small.sampled)
    assert len(torch.unique(design.sampled, dim=0)) == len(design.sampled) == 1500
    sizes = design.sampled.sum(1)
    for size, count, mass in size_allocation(16, 1500):
        assert int((sizes == size).sum()) == count
        if count:
            torch.testing.assert_close(
                design.weights[sizes == size],
                torch.full((count,), mass / count, dtype=torch.float64),
            )


def test_the_process_interpolates_its_observations() -> None:
    """The odd part predicted at the observed coalitions is the observed one, by the
    pattern table (d <= 2 log2 rows) and feature by feature alike."""
    d, pairs = 10, 40
    _plan, rows, values = planned_values(d, pairs, seed=3)
    sampled = rows[2 : 2 + pairs]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    odd = torch.cat([(inside - outside) / 2, ((values[:, 1] - values[:, 0]) / 2)[:, None]], 1)
    scale = torch.rand(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    windows = walsh_local.line_windows(d)  # the local parities too
    mean, _, predicted = walsh_gp.posterior_parts(
        signs, odd, scale + 0.5, predict=signs, windows=windows
    )
    assert predicted is not None
    torch.testing.assert_close(predicted, odd, rtol=1e-6, atol=1e-8)
    alone = walsh_gp.posterior_parts(signs, odd, scale + 0.5, windows=windows)[0]
    torch.testing.assert_close(mean, alone)
    relevance = scale + 0.5
    variances = walsh_kernel.order_variances(d, 0.1)[None]
    top = variances.shape[1] - 1
    table = walsh_kernel.cross_covariances(signs[:7], signs, relevance, variances, top)
    square = walsh_kernel.pattern_covariances(signs, relevance[:, None], variances[:, None], top)
    torch.testing.assert_close(table, square[:, 0, 0, :7])
    # the feature-by-feature branch (taken where 2^d outnumbers the rows squared)
    built = walsh_kernel.cross_covariances(signs[:2], signs[:3], relevance, variances, top)
    torch.testing.assert_close(built, square[:, 0, 0, :2, :3])


def test_the_adjusted_process_is_exact_on_games_of_order_two() -> None:
    """Fitted on part of the pairs, the process is exact on a game of order two, so
    the residual game is zero and the adjustment keeps the exact values."""
    d = 9
    game = PairwiseGame(d, seed=4)
    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    cpu = torch.device("cpu")
    design = walsh_gp.walsh_gp_design(d, 120, torch.Generator().manual_seed(2), cpu, fit_pairs=30)
    assert design.fitted is not None
    rows = design.plan().coalitions.dense()
    values = torch.stack([game(torch.where(rows, xi, torch.zeros(()))) for xi in x])
    phi = design.mean(values)
    want = ExactShapley(game).attribute(x, torch.zeros_like(x))
    torch.testing.assert_close(phi, want, rtol=1e-6, atol=1e-8)


def test_too_few_pairs_is_refused_before_any_call() -> None:
    game = PairwiseGame(8, seed=0)
    one = torch.ones(1, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="budget"):
        PairedKernelShap(game).attribute(
            one, torch.zeros_like(one), budget=12, estimator="walsh_gp"
        )
    with pytest.raises(ValueError, match="n_samples"):
        PairedKernelShap(game).attribute(
            one, torch.zeros_like(one), n_samples=10, estimator="walsh_gp"
        )
    assert game.rows == 0
    with pytest.raises(ValueError, match=r"2,051 x 2,051 .* lower n_samples"):
        PairedKernelShap(PairwiseGame(16, seed=0)).attribute(
            torch.ones(1, 16, dtype=torch.float64),
            torch.zeros(1, 16, dtype=torch.float64),
            n_samples=4100,  # 2,050 pairs
            estimator="walsh_gp",
        )
    wide = PairwiseGame(1024, seed=0)
    with pytest.raises(ValueError, match=r"d x pairs\^2 = .* lower budget"):
        PairedKernelShap(wide).attribute(
            torch.ones(1, 1024), torch.zeros(1, 1024), budget=4096, estimator="walsh_gp"
        )
    assert wide.rows == 0


def test_the_leave_one_out_scale_refits_without_each_row() -> None:
    """``mean_i (P u)_i^2 / P_ii`` is the mean of ``e_i^2 P_ii`` with ``e_i`` the residual
    of row ``i`` predicted by universal kriging on the other rows, refitted explicitly."""
    d, pairs = 7, 24
    _, rows, values = planned_values(d, pairs, seed=2)
    sampled = rows[2 : 2 + pairs]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    odd = torch.cat([(inside - outside) / 2, ((values[:, 1] - values[:, 0]) / 2)[:, None]], 1)
    scale = torch.rand(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    windows = walsh_local.line_windows(d)
    priors = walsh_gp._candidate_priors(scale + 0.5, None, walsh_local.local_enabled(windows))
    best = walsh_gp._best_prior(signs, odd, priors, min(walsh_gp.MAX_ORDER, d), windows)
    # K + jitter from the factor of K' = P K P + level Q Q' + jitter (P = I - Q Q')
    projection = walsh_kriging.linear_projection(signs)
    q = projection.basis
    projected = best.factor[0] @ best.factor[0].T
    jitter = (q.T @ projected @ q)[0, 0] * walsh_kriging.JITTER / (1 + walsh_kriging.JITTER)
    complement = torch.eye(len(q), dtype=torch.float64) - q @ q.T
    cross = best.cross[0]  # K Q
    covariance = (
        complement @ projected @ complement
        + q @ cross.T
        + cross @ q.T
        - q @ (q.T @ cross) @ q.T
        + jitter * q @ q.T
    )
    u = odd[0]
    residuals, precisions = [], []
    for i in range(len(u)):
        keep = torch.arange(len(u)) != i
        k_inv = torch.linalg.inv(covariance[keep][:, keep])
        x = signs[keep]
        beta = torch.linalg.solve(x.T @ k_inv @ x, x.T @ k_inv @ u[keep])
        predicted = signs[i] @ beta + covariance[i, keep] @ k_inv @ (u[keep] - x @ beta)
        residuals.append(u[i] - predicted)
    k_inv = torch.linalg.inv(covariance)
    projector = k_inv - k_inv @ signs @ torch.linalg.inv(signs.T @ k_inv @ signs) @ signs.T @ k_inv
    precisions = projector.diagonal()
    want = (torch.stack(residuals).square() * precisions).mean()
    got = walsh_kriging.leave_one_out_scale(projection, best.factor, best.inverse_residual)[0]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_the_held_out_comparison_prefers_the_surrogate_that_predicts_unseen_pairs() -> None:
    """The cubic surrogate fitted on the fitted pairs is compared with a rival's
    predictions on the others: a rival that predicts them exactly wins, one that
    predicts nothing loses."""
    from captum_graphshap.plans.regression_adjusted import cubic_predicts_better

    d, pairs = 9, 200
    cpu = torch.device("cpu")
    design = walsh_gp.walsh_gp_design(d, pairs, torch.Generator().manual_seed(0), cpu, fit_pairs=80)
    assert design.fitted is not None
    rows = design.plan().coalitions.dense().double()
    game = PairwiseGame(d, seed=1)
    x = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    values = torch.stack([game(rows * xi) for xi in x])
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    others = torch.ones(pairs, dtype=torch.bool)
    others[design.fitted] = False
    truth = ((inside - outside) / 2)[:, others]
    assert not cubic_predicts_better(
        design.sampled, design.weights, values, design.fitted, truth
    ).any()
    blank = torch.zeros_like(truth)
    assert cubic_predicts_better(design.sampled, design.weights, values, design.fitted, blank).all()


def test_the_pseudo_inverse_takes_the_cholesky_route_only_where_it_certifies_it() -> None:
    """Full-rank normals: the Cholesky inverse and log-determinant equal the eigen route's;
    a singular one (a direction no pair separates) goes to the eigen route and gets its
    minimum-norm pseudo-inverse; a batch mixing both gets each its own."""
    from captum_graphshap.plans.walsh_kernel import _eigen_pseudo_inverse, pseudo_inverse

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(3, 6, 9, generator=generator, dtype=torch.float64)
    full = a @ a.mT
    b = torch.randn(6, 4, generator=generator, dtype=torch.float64)
    singular = (b @ b.T)[None]  # rank 4 of 6
    normal = torch.cat([full, singular])
    inverse, log_det = pseudo_inverse(normal)
    expected, expected_log_det = _eigen_pseudo_inverse(normal)
    torch.testing.assert_close(inverse, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(log_det, expected_log_det, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(inverse[3], torch.linalg.pinv(singular[0], hermitian=True))
    torch.testing.assert_close(
        inverse[:3] @ full, torch.eye(6, dtype=torch.float64).expand(3, 6, 6)
    )


@pytest.mark.parametrize("d", [1, 2, 3, 4, 6, 7, 9, 20, 40])
def test_odd_order_sums_equal_the_sums_feature_by_feature(d: int) -> None:
    """The process's priors (no variance at even orders) take the closed form through
    ``sinh`` of the odd power sums: equal to ``sum_k sigma_k e_k`` built feature by
    feature, for unequal relevances, both decays, every order kept up to seven, and
    the same as Newton's identities (a grid with an even order takes those)."""
    g = torch.Generator().manual_seed(d)
    rows_a = (torch.rand(5, d, generator=g) < 0.5).double() * 2 - 1
    rows_b = (torch.rand(6, d, generator=g) < 0.5).double() * 2 - 1
    relevance = torch.rand(2, 3, d, generator=g, dtype=torch.float64) ** 3 + 0.05
    relevance[:, 1, 0] = 4.0  # one dominant feature
    relevance = relevance / relevance.mean(dim=-1, keepdim=True)  # as the priors' are
    top = min(walsh_gp.MAX_ORDER, d)
    grid = torch.stack([walsh_kernel.order_variances(d, 0.01), walsh_kernel.order_variances(d, 1)])
    grid[1, 1 : top + 1 : 2] += 0.3  # order one too
    grid = grid.expand(2, -1, -1).clone()  # (E, G, top + 1)
    got = walsh_kernel.odd_order_sums(rows_a, rows_b, relevance, grid, top)
    agree = rows_a[:, None, :] * rows_b[None, :, :]  # (A, B, d)
    want, level = torch.zeros_like(got), torch.zeros(2, 3, 2, 1, 1, dtype=torch.float64)
    for e in range(2):
        for w in range(3):
            by_order = elementary_symmetric(relevance[e, w] * agree, top)  # (A, B, top + 1)
            want[e, w] = torch.einsum("gk,abk->gab", grid[e], by_order)
            # the all-agreeing value: the covariances' scale (the jitter is relative to it)
            level[e, w, :, 0, 0] = grid[e] @ elementary_symmetric(relevance[e, w], top)
    level = level.clamp_min(float(level.max()))  # no order three (d < 3): the largest
    newton = torch.einsum(
        "egk,kewab->ewgab", grid, walsh_kernel.agreement_sums(rows_a, rows_b, relevance, top)
    )
    # rounding: within 3e-11 of the scale (a flat decay over orders 3, 5 and 7 is the
    # worst; measured 1.2-2x Newton's identities' on 20 draws)
    assert float(((got - want).abs() / level).max()) < 3e-11
    assert float(((newton - want).abs() / level).max()) < 3e-11
    with_even = grid.clone()
    with_even[..., 0] = 1.0  # an even order: Newton's identities
    torch.testing.assert_close(
        walsh_kernel.weighted_agreement_sums(rows_a, rows_b, relevance, with_even, top),
        torch.einsum(
            "egk,kewab->ewgab",
            with_even,
            walsh_kernel.agreement_sums(rows_a, rows_b, relevance, top),
        ),
    )


@pytest.mark.parametrize("d", [1, 3, 7, 16, 33])
def test_signed_elementary_symmetric_equals_the_build_feature_by_feature(d: int) -> None:
    """``e_k(r_j x_j)`` of every row from power sums equals the sums built feature by
    feature, to rounding of the all-agreeing value."""
    g = torch.Generator().manual_seed(d)
    signs = (torch.rand(9, d, generator=g) < 0.5).double() * 2 - 1
    relevance = torch.rand(2, d, generator=g, dtype=torch.float64) ** 2 + 0.05
    relevance = relevance / relevance.mean(dim=-1, keepdim=True)
    top = min(walsh_gp.MAX_ORDER, d) - 1
    got = walsh_kernel.signed_elementary_symmetric(signs, relevance, top)
    want = elementary_symmetric(relevance[:, None, :] * signs, top)
    level = elementary_symmetric(relevance, top)[:, None, :]  # (E, 1, top + 1)
    assert got.shape == want.shape == (2, 9, top + 1)
    assert float(((got - want).abs() / level).max()) < 1e-12


def test_posterior_variance_near_the_full_design_is_conditioning_without_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """29 of the 31 pairs of d = 6: the posterior variances and scale equal conditioning
    written in the coefficients (``c_T = sqrt(sigma_T) z_T``, ``z ~ N(0, I)`` given the
    observations, the linear parities flat): each ``Var(phi_i | u)`` the squared norm of
    ``phi_i``'s loading on the null space of the observed map, no subtraction. Kriging
    through ``K^-1`` with the jitter lost these to cancellation (the restricted form came
    out negative; intervals at rounding level)."""
    monkeypatch.setattr(walsh_gp, "ORDER_DECAYS", (0.1,))
    monkeypatch.setattr(walsh_gp, "RELEVANCE_POWERS", (2.0,))
    # the jitter (1e-10 of the mean diagonal) is 1e-3 of the smallest eigenvalues here
    monkeypatch.setattr(walsh_kriging, "JITTER", 1e-14)
    d, pairs = 6, 29
    _, rows, values = planned_values(d, pairs, seed=1)
    sampled = rows[2 : 2 + pairs]
    weights = walsh_gp.walsh_gp_design(
        d, pairs, torch.Generator().manual_seed(1), torch.device("cpu")
    ).weights
    posterior = walsh_gp.walsh_gp_posterior(sampled, weights, values)
    inside, outside = values[0, 2 : 2 + pairs], values[0, 2 + pairs :]
    signs = torch.cat([sampled, torch.ones(1, d, dtype=torch.bool)]).double() * 2 - 1
    odd = torch.cat([(inside - outside) / 2, ((values[0, 1] - values[0, 0]) / 2)[None]])
    linear = walsh_gp.kernel_shapley(
        torch.cat([sampled, ~sampled]), torch.cat([inside, outside])[None], values[:, 0],
        values[:, 1], torch.cat([weights, weights]),
    )  # fmt: skip
    scale = walsh_gp._relevance_scale(sampled, weights, linear, inside[None], outside[None])[0][0]
    relevance = (scale + walsh_gp.RELEVANCE_FLOOR) ** 2
    relevance = relevance / relevance.mean()
    parities = [t for k in (3, 5) for t in itertools.combinations(range(d), k)]
    basis = torch.stack([signs[:, list(t)].prod(1) for t in parities], 1)
    root = torch.tensor(
        [(0.1 ** ((len(t) - 3) // 2) * float(relevance[list(t)].prod())) ** 0.5 for t in parities],
        dtype=torch.float64,
    )
    members = torch.tensor(
        [[2.0 / len(t) if i in t else 0.0 for t in parities] for i in range(d)], dtype=torch.float64
    )
    complement = torch.linalg.svd(signs, full_matrices=True)[0][:, d:]  # Q2
    observed = complement.T @ basis * root  # e_2 = B z
    # phi_i - 2 beta_i's estimate, as a function of z: the parities' share less what the
    # least-squares fit of the linear parities takes from them
    loading = (members - 2 * torch.linalg.pinv(signs) @ basis) * root  # (d, n)
    _, singular, right = torch.linalg.svd(observed, full_matrices=True)
    null = right[int((singular > 1e-10 * singular[0]).sum()) :].T
    conditioned = (loading @ null).square().sum(1)
    gram = observed @ observed.T  # Q2' K Q2
    target = complement.T @ odd
    restricted = target @ torch.linalg.solve(gram, target) / (len(odd) - d)
    projector = complement @ torch.linalg.solve(gram, complement.T)
    leave_one_out = ((projector @ odd).square() / projector.diagonal()).mean()
    want = torch.maximum(restricted, leave_one_out) * conditioned
    assert float(restricted) > 0
    torch.testing.assert_close(posterior.variance[0], want, rtol=1e-4, atol=0)


def test_cholesky_in_place_is_the_factor_in_the_matrices_own_memory() -> None:
    """The factor of each symmetric matrix, upper triangle zero, written over it; a matrix
    that is not positive definite is reported in ``info``."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 2, 9, 9, dtype=torch.float64, generator=g)
    matrices = a @ a.mT + torch.eye(9, dtype=torch.float64)
    matrices[1, 0] = -torch.eye(9, dtype=torch.float64)  # not positive definite
    want, want_info = torch.linalg.cholesky_ex(matrices)
    pointer = matrices.data_ptr()
    factor, info = walsh_kriging.cholesky_in_place(matrices)
    assert factor.data_ptr() == pointer
    assert info.tolist() == want_info.tolist() and int(info[1, 0]) > 0
    ok = want_info == 0
    torch.testing.assert_close(factor[ok], want[ok], rtol=0, atol=1e-13)
    assert bool((factor[ok].triu(1) == 0).all())
