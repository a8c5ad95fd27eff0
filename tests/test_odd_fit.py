"""The Gram-based odd fit against the fit-by-fit pseudo-inverse, and against the
batched fit before its rewrite (tests/reference_fits.py)."""

from __future__ import annotations

import pytest
import torch

import captum_graphshap.plans.odd_fit as odd_fit
from captum_graphshap.plans.odd_fit import FoldSystems, PrefixFactor, select_and_fit, walsh_tables
from captum_graphshap.plans.stratified import stratified_paired_coalitions
from captum_graphshap.plans.surrogates import OddCubicSurrogate, odd_features, select_triples

from .reference_fits import reference_fold_grams, reference_select_and_fit


def reference_fit(sampled, weights, odd, total, triples):
    """The constrained kernel-weighted least squares, one dense design and pinv."""
    design = odd_features(sampled, triples, odd.dtype)
    weighted = design * weights.to(odd.dtype)[None, :, None]
    inverse = torch.linalg.pinv(weighted.transpose(1, 2) @ design, hermitian=True)
    free = (inverse @ (weighted.transpose(1, 2) @ odd[..., None]))[..., 0]
    pull = inverse.sum(dim=2)
    gap = (free.sum(dim=1) - total) / pull.sum(dim=1)
    return free - gap[:, None] * pull


def reference_error(sampled, weights, odd, total, triples, folds):
    """Held-out weighted squared error, fold by fold on the rows themselves."""
    fold = torch.arange(sampled.shape[0]) % folds
    error = odd.new_zeros(odd.shape[0])
    for k in range(folds):
        held = fold == k
        c = reference_fit(sampled[~held], weights[~held], odd[:, ~held], total, triples)
        residual = (
            odd[:, held] - (odd_features(sampled[held], triples, odd.dtype) @ c[..., None])[..., 0]
        )
        error += (residual.square() * weights[held].to(odd.dtype)).sum(dim=1)
    return error


def game(d, batch, pairs, seed):
    generator = torch.Generator().manual_seed(seed)
    sampled, weights = stratified_paired_coalitions(d, pairs, generator, torch.device("cpu"))
    s = 2 * sampled.double() - 1
    # an odd game with linear, cubic and fifth-order terms, different per example
    w1 = torch.randn(batch, d, generator=generator, dtype=torch.float64)
    odd = s @ w1.T
    odd = odd.T + 0.3 * (s[:, 0] * s[:, 1] * s[:, 2])[None] + 0.05 * s[:, :5].prod(dim=1)[None]
    total = w1.sum(dim=1) + 0.3 + 0.05
    strength = torch.rand(batch, d, d, generator=generator, dtype=torch.float64)
    strength = strength + strength.transpose(1, 2)
    return sampled, weights, odd, total, strength


def fold_grams(sampled, weights, odd, triples, folds):
    """Per-fold ``(F, G, p, p)`` Grams, ``(F, N, p)`` targets and ``(F, N)`` norms
    (:class:`FoldSystems`, every fold's Gram materialised)."""
    systems = FoldSystems(sampled, weights, odd, triples, folds)
    grams = torch.stack([systems.fold(f) for f in range(folds)])
    return grams, systems.targets, systems.norms


@pytest.mark.parametrize(("d", "pairs"), [(8, 120), (12, 300), (16, 511)])
def test_every_count_and_fold_equals_the_dense_pseudo_inverse(d, pairs):
    sampled, weights, odd, total, strength = game(d, 3, pairs, seed=d)
    triples = select_triples(strength, 30)
    counts = [0, 10, 20, 30]
    grams, targets, _ = fold_grams(sampled, weights, odd, triples, 5)
    factor = PrefixFactor(grams.sum(0))
    for k in counts:
        mine = factor.solve(targets.sum(0), total, d + k)
        theirs = reference_fit(sampled, weights, odd, total, triples[:, :k])
        torch.testing.assert_close(mine[:, : d + k], theirs, rtol=1e-9, atol=1e-10)
        assert bool((mine[:, d + k :] == 0).all())
    errors = torch.stack(
        [reference_error(sampled, weights, odd, total, triples[:, :k], 5) for k in counts]
    )
    coefficients, chosen = select_and_fit(sampled, weights, odd, total, triples, counts, 5)
    expected = torch.tensor(counts)[errors.argmin(dim=0)]
    assert chosen.tolist() == expected.tolist()
    for row, k in enumerate(chosen.tolist()):
        theirs = reference_fit(
            sampled, weights, odd[row : row + 1], total[row : row + 1], triples[row : row + 1, :k]
        )
        torch.testing.assert_close(coefficients[row, : d + k], theirs[0], rtol=1e-9, atol=1e-10)


def constrained_least_norm_fit(sampled, weights, odd, total, triples):
    """The constrained least squares of least norm, any rank: ``c = (total / p) 1 + N z``
    with ``N`` the null space of ``1'`` (an SVD) and ``z`` the least-norm ``lstsq`` fit
    of the weighted design (gelsd), not of the Gram."""
    design = odd_features(sampled, triples, odd.dtype)  # (N, P, p)
    p = design.shape[-1]
    null = torch.linalg.svd(torch.ones(1, p, dtype=odd.dtype)).Vh[1:].T  # (p, p - 1)
    start = (total / p)[:, None, None] * torch.ones(p, 1, dtype=odd.dtype)
    root = weights.to(odd.dtype).sqrt()[None, :, None]
    rhs = root * (odd[..., None] - design @ start)
    z = torch.linalg.lstsq(root * design @ null, rhs, driver="gelsd", rcond=1e-10).solution
    return (start + null @ z)[..., 0]


def test_a_rank_deficient_fit_is_the_constrained_fit_of_least_norm():
    """Fewer pairs than parameters: the constrained least squares of least norm, finite."""
    sampled, weights, odd, total, strength = game(10, 2, 12, seed=3)
    triples = select_triples(strength, 20)
    grams, targets, _ = fold_grams(sampled, weights, odd, triples, 1)
    mine = PrefixFactor(grams[0]).solve(targets[0], total, 30)
    theirs = constrained_least_norm_fit(sampled, weights, odd, total, triples)
    assert bool(torch.isfinite(mine).all())
    torch.testing.assert_close(mine, theirs, rtol=1e-7, atol=1e-8)


def test_a_rank_deficient_gram_whose_null_direction_the_constraint_pins_is_fitted_exactly():
    """d = 8 and 8 stratified pairs: the Gram has rank 7, the constraint pins the rest.
    An additive game is then fitted exactly (the pseudo-inverse's solution projected on
    the constraint had 0.29 relative error)."""
    d = 8
    sampled, weights = stratified_paired_coalitions(
        d, 8, torch.Generator().manual_seed(3), torch.device("cpu")
    )
    s = 2 * sampled.double() - 1
    assert torch.linalg.matrix_rank(s) == d - 1  # singular Gram
    assert torch.linalg.matrix_rank(torch.cat([s, torch.ones(1, d, dtype=s.dtype)])) == d
    linear = torch.randn(2, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    odd, total = linear @ s.T, linear.sum(1)
    no_triples = torch.zeros(2, 0, 3, dtype=torch.long)
    grams, targets, _ = fold_grams(sampled, weights, odd, no_triples, 1)
    mine = PrefixFactor(grams[0]).solve(targets[0], total, d)
    torch.testing.assert_close(mine, linear, rtol=1e-10, atol=1e-12)


def test_streamed_grams_equal_one_dense_gram(monkeypatch):
    """Chunks of a few pairs give the Gram of the whole design."""
    monkeypatch.setattr(odd_fit, "WALSH_MAX_FEATURES", 0)  # the streamed Grams
    sampled, weights, odd, _, strength = game(9, 2, 100, seed=5)
    triples = select_triples(strength, 12)
    whole = fold_grams(sampled, weights, odd, triples, 3)
    monkeypatch.setattr(odd_fit, "CHUNK_ELEMENTS", 7 * 2 * 21)  # 7 pairs a chunk
    chunked = fold_grams(sampled, weights, odd, triples, 3)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ------------------------------------------------ the batched fit against the one it replaced


def reference_wrapper(sampled, weights, odd, total, triples, counts, folds, *shared):
    """The pre-rewrite select_and_fit (tests/reference_fits.py); it takes nothing shared
    (Walsh tables, every column's targets) from the caller."""
    return reference_select_and_fit(sampled, weights, odd, total, triples, counts, folds)


def brute_walsh(sampled, weights, folds):
    """``F_f(M) = sum_{r in f} w_r (-1)^{|M & z_r|}`` entry by entry."""
    d = sampled.shape[1]
    masks = ((torch.arange(2**d)[:, None] >> torch.arange(d)) & 1).bool()  # (2^d, d)
    signs = 1 - 2 * ((masks[:, None, :] & sampled[None]).sum(dim=2) % 2)  # (2^d, P)
    fold = torch.arange(sampled.shape[0]) % folds
    return torch.stack(
        [
            (signs[:, fold == f].double() * weights[fold == f].double()).sum(dim=1)
            for f in range(folds)
        ]
    )


def test_walsh_tables_are_the_weighted_parity_sums():
    sampled, weights, *_ = game(7, 1, 40, seed=11)
    torch.testing.assert_close(
        walsh_tables(sampled, weights, 3, torch.float64),
        brute_walsh(sampled, weights, 3),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize("walsh", [True, False])
@pytest.mark.parametrize(
    ("d", "batch", "pairs", "counts"),
    [
        (6, 4, 40, [0, 4, 9]),
        (9, 1, 150, [0, 12, 25]),
        (12, 5, 300, [0, 20, 40, 60]),
        (16, 3, 511, [0, 81, 162, 243]),
        (10, 3, 14, [0, 5, 10]),  # fewer pairs than parameters: pinv on some splits
    ],
)
def test_batched_fit_equals_the_fit_it_replaced(monkeypatch, d, batch, pairs, counts, walsh):
    """Every count and fold, Walsh-table or streamed Grams: the same choice and coefficients."""
    if not walsh:
        monkeypatch.setattr(odd_fit, "WALSH_MAX_FEATURES", 0)
    sampled, weights, odd, total, strength = game(d, batch, pairs, seed=d + pairs)
    triples = select_triples(strength, max(counts))
    counts = [k for k in counts if k <= triples.shape[1]]
    mine, chosen = select_and_fit(sampled, weights, odd, total, triples, counts, 5)
    theirs, expected = reference_select_and_fit(sampled, weights, odd, total, triples, counts, 5)
    assert chosen.tolist() == expected.tolist()
    scale = theirs.abs().max()
    torch.testing.assert_close(mine / scale, theirs / scale, rtol=0, atol=1e-10)


@pytest.mark.parametrize("walsh", [True, False])
def test_one_gram_serves_the_batch_without_triples(monkeypatch, walsh):
    """No triples: a (1, p, p) Gram and factor, and every example's linear fit as before."""
    if not walsh:
        monkeypatch.setattr(odd_fit, "WALSH_MAX_FEATURES", 0)
    sampled, weights, odd, total, _ = game(11, 6, 200, seed=4)
    none = torch.zeros(6, 0, 3, dtype=torch.long)
    grams, targets, norms = fold_grams(sampled, weights, odd, none, 3)
    assert grams.shape == (3, 1, 11, 11)
    theirs = reference_fold_grams(sampled, weights, odd, none, 3)
    torch.testing.assert_close(grams.expand_as(theirs[0]), theirs[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(targets, theirs[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(norms, theirs[2], rtol=1e-12, atol=1e-12)
    mine, _ = select_and_fit(sampled, weights, odd, total, none, [0], 5)
    torch.testing.assert_close(mine, reference_fit(sampled, weights, odd, total, none))


@pytest.mark.parametrize(
    ("estimator", "d", "pairs", "batch"),
    [
        ("cubic", 8, 100, 3),
        ("cubic", 16, 511, 10),  # Walsh Grams, shared targets, triple counts selected
        ("cubic", 16, 40, 3),  # too few pairs for triples: one Gram for the batch
        ("regression_mc", 8, 60, 3),  # Walsh tables and every column's targets shared
        ("regression_mc", 16, 511, 10),
        ("regression_mc", 16, 200, 2),  # streamed Grams
    ],
)
def test_cubic_and_regression_mc_estimates_equal_those_before_the_rewrite(
    monkeypatch, estimator, d, pairs, batch
):
    """The estimators end to end on a random ReLU game, with the old fit patched in."""
    import captum_graphshap.plans.regression_adjusted as adjusted
    from captum_graphshap.plans.regression_adjusted import cubic_kernel_plan
    from captum_graphshap.plans.regression_mc import regression_mc_plan

    make = cubic_kernel_plan if estimator == "cubic" else regression_mc_plan
    generator = torch.Generator().manual_seed(d + pairs)
    layer = torch.randn(batch, d, 24, generator=generator, dtype=torch.float64)
    head = torch.randn(batch, 24, generator=generator, dtype=torch.float64)
    plan = make(d, pairs, torch.Generator().manual_seed(1), torch.device("cpu"))
    rows = plan.coalitions.dense().double()
    values = (torch.relu(rows[None] @ layer) @ head[..., None])[..., 0]  # (N, M)
    mine = plan.estimator(values)
    monkeypatch.setattr(adjusted, "select_and_fit", reference_wrapper)
    theirs = plan.estimator(values)
    torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)


def test_odd_features_and_surrogate_values_are_the_parity_products():
    generator = torch.Generator().manual_seed(3)
    coalitions = torch.rand(30, 7, generator=generator) < 0.5
    s = 2 * coalitions.double() - 1
    triples = torch.stack([torch.randperm(7, generator=generator)[:3] for _ in range(10)]).view(
        2, 5, 3
    )
    design = odd_features(coalitions, triples, torch.float64)
    for n in range(2):
        for j in range(5):
            i, k, m = triples[n, j].tolist()
            torch.testing.assert_close(design[n, :, 7 + j], s[:, i] * s[:, k] * s[:, m])
        torch.testing.assert_close(design[n, :, :7], s)
        torch.testing.assert_close(odd_features(coalitions, triples[n], torch.float64), design[n])
    linear = torch.randn(2, 7, generator=generator, dtype=torch.float64)
    cubic = torch.randn(2, 5, generator=generator, dtype=torch.float64)
    values = OddCubicSurrogate(linear, cubic, triples).values(coalitions)
    expected = (design @ torch.cat([linear, cubic], dim=1)[..., None])[..., 0]
    torch.testing.assert_close(values, expected)


def test_even_pairwise_is_the_weighted_minimum_norm_fit():
    """Against the dense weighted pseudo-inverse solution, in both regimes (P >< parameters)."""
    from captum_graphshap.plans.regression_adjusted import even_pairwise

    for pairs in (80, 20):
        sampled, weights, odd, _, _ = game(8, 3, pairs, seed=pairs)
        s = 2 * sampled.double() - 1
        upper = torch.triu_indices(8, 8, 1)
        design = torch.cat(
            [torch.ones(s.shape[0], 1, dtype=torch.float64), s[:, upper[0]] * s[:, upper[1]]], 1
        )
        root = weights.double().sqrt()[:, None]
        solution = torch.linalg.pinv(design * root) @ (odd.T * root)  # (q, N)
        mine = even_pairwise(sampled, weights, odd)
        torch.testing.assert_close(
            mine[:, upper[0], upper[1]], solution[1:].T, rtol=1e-8, atol=1e-10
        )
        torch.testing.assert_close(mine, mine.transpose(1, 2))


@pytest.mark.parametrize(
    ("shared", "deduplicated"),
    [(False, True), (True, True), (True, False)],
    ids=["own-triples", "shared-triples", "shared-not-deduplicated"],
)
def test_blocked_normal_equations_equal_the_streamed_fold_system(shared, deduplicated, monkeypatch):
    """Above the Walsh tables' features the one-count fit builds its Grams blockwise
    (the linear block once for the batch, the triples' rows once per distinct
    triple): the same Grams and targets as the design's. Examples with their
    own triples take the per-example products; examples sharing theirs the one
    ``(U, U)`` product; off the CPU, triples are not deduplicated (every
    example's are its own rows), as the third case does here."""
    from captum_graphshap.plans import odd_fit
    from captum_graphshap.plans.odd_fit import blocked_normal_equations

    if not deduplicated:

        def every_triple_its_own(triples):
            batch, k = triples.shape[:2]
            return triples.reshape(-1, 3), torch.arange(batch * k).view(batch, k)

        monkeypatch.setattr(odd_fit, "distinct_triples", every_triple_its_own)
    sampled, weights, odd, total, strength = game(24, 5, 300, seed=8)
    if shared:  # every example ranks by the first one's scores, shuffled
        order = torch.randperm(30, generator=torch.Generator().manual_seed(0))
        triples = select_triples(strength[:1], 30)[:, order].expand(5, -1, -1)
    else:
        triples = select_triples(strength, 30)
    grams, targets = blocked_normal_equations(sampled, weights, odd, triples)
    system = FoldSystems(sampled, weights, odd, triples, 1)
    torch.testing.assert_close(grams, system.whole_gram(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(targets, system.targets[0], rtol=1e-12, atol=1e-12)
    mine, _ = select_and_fit(sampled, weights, odd, total, triples, [30], 1)
    torch.testing.assert_close(mine, reference_fit(sampled, weights, odd, total, triples))


def test_distinct_triples_index_back_to_every_examples_triples():
    from captum_graphshap.plans.odd_fit import distinct_triples

    _, _, _, _, strength = game(20, 6, 100, seed=3)
    triples = select_triples(strength, 25)
    triples[3] = triples[0]  # two examples with the same triples
    distinct, where = distinct_triples(triples)
    assert torch.equal(distinct[where], triples)
    assert distinct.shape[0] == torch.unique(triples.reshape(-1, 3), dim=0).shape[0]
    none, where = distinct_triples(triples[:, :0])
    assert none.shape == (0, 3) and where.shape == (6, 0)


def test_the_pairwise_solver_a_plan_keeps_is_the_minimum_norm_fit():
    from captum_graphshap.plans.regression_adjusted import PairwiseSolver, even_pairwise

    sampled, weights, odd, _, _ = game(40, 3, 200, seed=9)  # 200 pairs, 781 parameters
    s = 2 * sampled.double() - 1
    upper = torch.triu_indices(40, 40, 1)
    design = torch.cat(
        [torch.ones(s.shape[0], 1, dtype=torch.float64), s[:, upper[0]] * s[:, upper[1]]], 1
    )
    root = weights.double().sqrt()[:, None]
    solution = torch.linalg.pinv(design * root) @ (odd.T * root)
    exact = PairwiseSolver.of(sampled, weights, torch.float64)
    assert exact.cholesky and exact.parities.shape == (40 * 39 // 2, 200)
    mine = even_pairwise(sampled, weights, odd, exact)
    torch.testing.assert_close(mine[:, upper[0], upper[1]], solution[1:].T, rtol=1e-8, atol=1e-10)
    # a plan's, in float32 (it only ranks triples)
    ranking = even_pairwise(sampled, weights, odd, PairwiseSolver.of(sampled, weights))
    torch.testing.assert_close(ranking, mine, rtol=1e-3, atol=1e-5)
    # repeated pairs make the kernel singular: the pseudo-inverse takes over
    doubled = torch.cat([sampled, sampled[:5]])
    twice = torch.cat([weights, weights[:5]])
    singular = PairwiseSolver.of(doubled, twice, torch.float64)
    assert not singular.cholesky
    values = torch.cat([odd, odd[:, :5]], dim=1)
    design = torch.cat([design, design[:5]])
    root = twice.double().sqrt()[:, None]
    solution = torch.linalg.pinv(design * root) @ (values.T * root)
    got = even_pairwise(doubled, twice, values, singular)
    torch.testing.assert_close(got[:, upper[0], upper[1]], solution[1:].T, rtol=1e-6, atol=1e-8)


def test_a_triple_the_pairs_cannot_tell_from_a_feature_takes_nothing_of_a_linear_game():
    """Pairs on which ``x0 x1 x2 = x3`` leave a triple's column equal to a feature's: the
    fit is rank-deficient. A game whose odd part is linear must still be fitted by the
    linear parities alone (the plain least norm split ``beta_3`` between the two; SHEAR's
    fit of a quadratic model was off by 0.019 on such a draw)."""
    d = 5
    codes = torch.arange(1, 2 ** (d - 1))  # every pair once (feature d - 1 out), but the empty
    member = ((codes[:, None] >> torch.arange(d)) & 1).bool()
    signs = member.double() * 2 - 1
    sampled = member[signs[:, 0] * signs[:, 1] * signs[:, 2] == signs[:, 3]]
    weights = torch.ones(len(sampled), dtype=torch.float64)
    beta = torch.tensor([[0.5, -1.0, 2.0, 1.5, -0.25], [1.0, 0.3, -0.7, -2.0, 0.9]])
    odd = beta.double() @ (sampled.double() * 2 - 1).T  # (2, P): a linear odd part
    total = beta.double().sum(1)
    triples = torch.tensor([[[0, 1, 2]], [[0, 1, 2]]])
    x = sampled.double() * 2 - 1
    design = torch.cat([x, (x[:, 0] * x[:, 1] * x[:, 2])[:, None]], 1)
    assert int(torch.linalg.matrix_rank(design)) == d  # d + 1 columns: deficient
    coefficients, chosen = select_and_fit(sampled, weights, odd, total, triples, [1], 1)
    assert chosen.tolist() == [1, 1]
    torch.testing.assert_close(coefficients[:, :d], beta.double(), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        coefficients[:, d:], torch.zeros(2, 1, dtype=torch.float64), rtol=0, atol=1e-12
    )
