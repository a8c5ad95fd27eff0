"""The Gram-based odd fit against the fit-by-fit pseudo-inverse it replaces."""

from __future__ import annotations

import pytest
import torch

from captum_graphshap.plans.odd_fit import PrefixFactor, fold_grams, select_and_fit
from captum_graphshap.plans.sampling import stratified_paired_coalitions
from captum_graphshap.plans.surrogates import odd_features, select_triples


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


def test_a_rank_deficient_fit_falls_back_to_the_minimum_norm_solution():
    """Fewer pairs than parameters: the pseudo-inverse's solution, finite."""
    sampled, weights, odd, total, strength = game(10, 2, 12, seed=3)
    triples = select_triples(strength, 20)
    grams, targets, _ = fold_grams(sampled, weights, odd, triples, 1)
    mine = PrefixFactor(grams[0]).solve(targets[0], total, 30)
    theirs = reference_fit(sampled, weights, odd, total, triples)
    assert bool(torch.isfinite(mine).all())
    torch.testing.assert_close(mine, theirs, rtol=1e-7, atol=1e-8)


def test_streamed_grams_equal_one_dense_gram(monkeypatch):
    """Chunks of a few pairs give the Gram of the whole design."""
    import captum_graphshap.plans.odd_fit as odd_fit

    sampled, weights, odd, _, strength = game(9, 2, 100, seed=5)
    triples = select_triples(strength, 12)
    whole = fold_grams(sampled, weights, odd, triples, 3)
    monkeypatch.setattr(odd_fit, "CHUNK_ELEMENTS", 7 * 2 * 21)  # 7 pairs a chunk
    chunked = fold_grams(sampled, weights, odd, triples, 3)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
