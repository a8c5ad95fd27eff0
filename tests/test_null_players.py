"""Features at their baseline are null players: dropped per example, exact zeros.

A feature equal to every background in every element builds the same rows in
or out of a coalition, so its Shapley value is 0. The classes that explain the
game's own Shapley values drop such features per example before planning
(``attr/dummies.py``); their values are then those of the smaller game.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from captum.attr import ShapleyValues

import captum_graphshap as cg
from captum_graphshap.attr.dummies import merged_groups, varying_features
from captum_graphshap.engine.features import format_feature_mask
from captum_graphshap.plans.local_windows import feature_windows, kept_windows

from .reference import mlp

DROPPING = [cg.ExactShapley, cg.ShapleySampling, cg.PairedKernelShap, cg.BayesShap, cg.Shear]
SAMPLED = [c for c in DROPPING if c is not cg.ExactShapley]
D = 8


def inputs_with_nulls() -> torch.Tensor:
    """Four examples, each with its own features at the zero baseline (one with none,
    one entirely at it)."""
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x[0, [1, 5]] = 0.0
    x[1, [0, 2, 3]] = 0.0
    x[3] = 0.0
    return x


def call(cls, model, x, **options):
    if cls is not cg.ExactShapley:
        options.setdefault("generator", torch.Generator().manual_seed(4))
        options.setdefault("budget", 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(model).attribute(x, target=1, **options)


def values(result) -> torch.Tensor:
    return result if isinstance(result, torch.Tensor) else result.attributions


@pytest.mark.parametrize("cls", DROPPING, ids=lambda c: c.__name__)
def test_a_feature_at_its_baseline_gets_exactly_zero(cls):
    x = inputs_with_nulls()
    phi = values(call(cls, mlp(D, 2, dtype=torch.float64), x))
    assert torch.equal(phi[x == 0], torch.zeros_like(phi[x == 0]))
    assert bool((phi[x != 0] != 0).all())
    assert torch.equal(phi[3], torch.zeros(D, dtype=phi.dtype))  # the example at its baseline


@pytest.mark.parametrize("cls", SAMPLED, ids=lambda c: c.__name__)
def test_values_are_those_of_the_game_without_the_null_players(cls):
    # the same draws over the varying features: exactly the smaller model's values
    model = mlp(D, 2, dtype=torch.float64)
    x = inputs_with_nulls()[:1]
    keep = torch.tensor([0, 2, 3, 4, 6, 7])

    def smaller(z: torch.Tensor) -> torch.Tensor:
        full = torch.zeros(z.shape[0], D, dtype=z.dtype)
        full[:, keep] = z
        return model(full)

    phi = values(call(cls, model, x))
    alone = values(call(cls, smaller, x[:, keep]))
    torch.testing.assert_close(phi[:, keep], alone, rtol=0, atol=1e-12)


def test_exact_shapley_spends_two_to_the_varying_features_and_matches_captum(monkeypatch):
    model = mlp(D, 2, dtype=torch.float64)
    x = inputs_with_nulls()
    result = cg.ExactShapley(model).attribute(x, target=1, return_evaluations=True)
    varying = (x != 0).sum(1)
    expected = torch.where(varying > 0, 2**varying, 2)  # an example at its baseline keeps one
    assert result.n_evaluations.tolist() == expected.tolist()
    # Captum's exact class enumerates the d! orderings: on five features here
    small, z = mlp(5, 2, dtype=torch.float64), x[:2, :5]
    captum = ShapleyValues(small).attribute(z, target=1)  # accumulates in float32
    ours = cg.ExactShapley(small).attribute(z, target=1)
    torch.testing.assert_close(ours, captum.double(), rtol=0, atol=1e-4)
    assert bool((ours[z == 0] == 0).all()) and bool((z == 0).any())
    monkeypatch.setattr(cg.ExactShapley, "drops_null_players", False)
    every_coalition = cg.ExactShapley(model).attribute(x, target=1, return_evaluations=True)
    assert every_coalition.n_evaluations.tolist() == [2**D] * 4
    torch.testing.assert_close(
        result.attributions, every_coalition.attributions, rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("cls", SAMPLED, ids=lambda c: c.__name__)
def test_an_example_gets_its_row_of_any_batch_whatever_the_others_null_players(cls):
    model = mlp(D, 2, dtype=torch.float64)
    x = inputs_with_nulls()
    batch = values(call(cls, model, x))
    for i in range(4):
        torch.testing.assert_close(
            values(call(cls, model, x[i : i + 1]))[0], batch[i], rtol=0, atol=1e-12
        )
    order = [2, 0, 3, 1]
    torch.testing.assert_close(values(call(cls, model, x[order])), batch[order], rtol=0, atol=1e-12)


def test_a_feature_equal_to_one_reference_only_is_not_a_null_player():
    # against two references, feature 0 equals the first and not the second
    model = mlp(D, 2, dtype=torch.float64)
    x = inputs_with_nulls()[2:3].clone()
    references = torch.zeros(2, D, dtype=torch.float64)
    references[1, 0] = 1.0
    x[0, 0] = 0.0
    phi = cg.ExactShapley(model).attribute(x, target=1, references=references)
    assert float(phi[0, 0]) != 0.0
    references[1, 0] = 0.0  # now equal to both: null
    phi = cg.ExactShapley(model).attribute(x, target=1, references=references)
    assert float(phi[0, 0]) == 0.0


def test_padding_tokens_at_the_baseline_get_zero_and_cost_nothing():
    torch.manual_seed(0)
    embedding = torch.nn.EmbeddingBag(12, 4, mode="sum", padding_idx=0)
    head = torch.nn.Linear(4, 2)

    def model(tokens: torch.Tensor) -> torch.Tensor:
        return head(torch.tanh(embedding(tokens)))

    tokens = torch.tensor([[5, 3, 9, 0, 0, 0], [7, 2, 4, 8, 11, 0]])
    result = cg.ExactShapley(model).attribute(
        tokens, baselines=0, target=0, return_evaluations=True
    )
    assert result.n_evaluations.tolist() == [2**3, 2**5]
    assert torch.equal(result.attributions[tokens == 0], torch.zeros(4))


def test_every_output_at_once_with_per_example_null_players():
    model = mlp(D, 3, dtype=torch.float64)
    x = inputs_with_nulls()
    every = cg.PairedKernelShap(model).attribute(
        x, budget=200, generator=torch.Generator().manual_seed(2)
    )
    assert every.shape == (4, 3, D)
    for target in range(3):
        one = cg.PairedKernelShap(model).attribute(
            x, target=target, budget=200, generator=torch.Generator().manual_seed(2)
        )
        torch.testing.assert_close(every[:, target], one, rtol=0, atol=1e-12)


def test_graph_methods_keep_null_players():
    # in Myerson's graph-restricted game a feature at its baseline still joins its
    # neighbours' components: its value need not be 0, so graph classes do not drop it
    model = mlp(D, 2, dtype=torch.float64)
    x = inputs_with_nulls()[1:2]
    myerson = cg.MyersonValue(model).attribute(x, target=1)
    assert float(myerson[0, 2].abs()) > 1e-6  # feature 2 is at the baseline, between 1 and 3


def test_the_local_windows_see_the_kept_patches_where_they_are():
    # a 4 x 4 grid of patches without its middle 2 x 2 block: the restricted game's mask
    # gives the dropped patches' pixels to its first feature (the rows are the same), but
    # the windows are read from the layout with those pixels out (FeatureMasks.geometry)
    rows = torch.arange(8)
    mask = ((rows[:, None] // 2) * 4 + rows[None, :] // 2).view(1, 1, 8, 8)
    features = format_feature_mask(mask, (torch.zeros(1, 1, 8, 8),))
    kept = torch.tensor([i for i in range(16) if i not in (5, 6, 9, 10)])
    restricted = features.renumbered(kept, 0)
    assert bool((restricted.masks[0][0, 0, 2:6, 2:6] == 0).all())
    assert bool((restricted.geometry[0][0, 0, 2:6, 2:6] == -1).all())
    windows = feature_windows(restricted)
    # the corner patch 0 neighbours patches 1, 2, 4 and 8 of the grid (renumbered 0, 1,
    # 2, 4, 6), not the far corner; with the middle merged into it, it reached 9 of 12
    assert windows[0] == (0, 1, 2, 4, 6)
    merged = feature_windows(dataclasses.replace(restricted, geometry=None))
    assert len(merged[0]) == 9


def test_a_refusal_says_its_d_counts_the_features_that_vary():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(1, 5)
    x[0, :2] = 0.0
    with pytest.raises(ValueError, match=r"d = 3 features.*the 3 of 5 features that vary"):
        cg.Shear(model).attribute(x, target=0, budget=20)


class NeighbourProducts(torch.nn.Module):
    """Two outputs from products of neighbouring 2 x 2 patch means on 8 x 8 images."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.nn.functional.avg_pool2d(x, 2)[:, 0]  # (N, 4, 4)
        corner = p[:, :-1, :-1]
        t = 3 * corner * p[:, 1:, :-1] * p[:, :-1, 1:] + torch.tanh(4 * p[:, 1:, 1:] * corner - 1)
        return torch.stack([t.sum((1, 2)), -t.sum((1, 2))], 1)


def _grid_features() -> tuple[torch.Tensor, object]:
    """A 4 x 4 grid of 2 x 2 patches on 8 x 8 images: 16 features."""
    rows = torch.arange(8)
    mask = ((rows[:, None] // 2) * 4 + rows[None, :] // 2).view(1, 1, 8, 8)
    return mask, format_feature_mask(mask, (torch.zeros(1, 1, 8, 8),))


def test_kept_windows_are_the_renumbered_masks_windows():
    _, features = _grid_features()
    g = torch.Generator().manual_seed(3)
    kept = torch.rand(40, 16, generator=g) > 0.25
    kept[0] = True
    windows = kept_windows(features, kept)
    for row, got in zip(kept, windows):
        assert got == feature_windows(features.renumbered(row.nonzero()[:, 0], 0))
    assert windows[0] is not None  # 16 features: windows; fewer than 10 kept: none
    assert all(w is None for w, row in zip(windows, kept) if int(row.sum()) < 10)


def test_sets_of_as_many_features_are_one_game():
    # eight examples, each with its own two features at the baseline (a tabular batch
    # with zeros scattered): one game, not eight, and each row as explained alone
    model = mlp(D, 2, dtype=torch.float64)
    x = torch.randn(8, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for row in range(8):
        x[row, [row, (row + 3) % D]] = 0.0
    calls = []
    original = cg.ShapleySampling.explain

    def counting(self, game, options, show_progress):
        calls.append(game.batch_size)
        return original(self, game, options, show_progress)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cg.ShapleySampling, "explain", counting)
        batch = values(call(cg.ShapleySampling, model, x))
    assert calls == [8]
    for i in (0, 5):
        torch.testing.assert_close(
            values(call(cg.ShapleySampling, model, x[i : i + 1]))[0], batch[i], rtol=0, atol=1e-12
        )
    assert torch.equal(batch[x == 0], torch.zeros_like(batch[x == 0]))


@pytest.mark.parametrize("cls", [cg.PairedKernelShap, cg.BayesShap], ids=lambda c: c.__name__)
def test_sets_whose_windows_differ_stay_apart_and_each_row_is_its_own(cls):
    # 16 patches, two blank per image: 14 kept, past the local windows' 10 features, so
    # the estimators that read the layout merge only the sets whose windows agree
    # model: products of neighbouring patches, where the windows change the values
    # (explained with one merged game of line windows, a row was off by 0.06)
    mask, _ = _grid_features()
    model = NeighbourProducts()
    x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    x = x + 0.5
    blank = [(0, 15), (15, 0), (0, 3), (5, 10), (6, 9), (5, 10)]
    for row, patches in enumerate(blank):
        for patch in patches:
            x[row][mask[0] == patch] = 0.0

    def explain(images):
        return cls(model).attribute(
            images, target=1, feature_mask=mask, budget=200,
            generator=torch.Generator().manual_seed(4),
        )  # fmt: skip

    batch = explain(x)
    for i in range(6):
        # (5e-9 apart before the merging too: the fits' rounding differs with the batch)
        torch.testing.assert_close(explain(x[i : i + 1])[0], batch[i], rtol=0, atol=1e-7)
    explainer = cls(model)
    game, _ = explainer._game(explainer._options({}), x, 0.0, 1, None, mask)
    groups, which = torch.unique(varying_features(game), dim=0, return_inverse=True)
    sizes = sorted(len(e) for e, _ in merged_groups(game, groups, which, True))
    unmerged = sorted(len(e) for e, _ in merged_groups(game, groups, which, False))
    assert unmerged == [6]  # as many features each: one game without the layout
    assert len(sizes) > 1 and sum(sizes) == 6  # the windows split them


@pytest.mark.parametrize("cls", [cg.PairedKernelShap, cg.BayesShap], ids=lambda c: c.__name__)
def test_sets_whose_windows_agree_are_one_game(cls):
    # a line of 14 features without its first or its last: 13 kept in a row either way,
    # the same windows, so one game with per-example masks; rows as explained alone
    model = mlp(14, 2, dtype=torch.float64)
    x = torch.randn(4, 14, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    x[[0, 2], 0] = 0.0
    x[[1, 3], 13] = 0.0
    explainer = cls(model)
    game, _ = explainer._game(explainer._options({}), x, 0.0, 1, None, None)
    groups, which = torch.unique(varying_features(game), dim=0, return_inverse=True)
    assert [len(e) for e, _ in merged_groups(game, groups, which, True)] == [4]
    batch = values(call(cls, model, x))
    for i in range(4):
        torch.testing.assert_close(
            values(call(cls, model, x[i : i + 1]))[0], batch[i], rtol=0, atol=1e-10
        )


def test_one_varying_feature_costs_shapley_sampling_two_evaluations():
    # the LLM fuzzer's find: with one feature every ordering is the two endpoints, so a
    # budget of 2 is enough (it was refused: 3 needed); here one feature varies
    model = torch.nn.Linear(3, 1).double()
    x = torch.randn(2, 3, dtype=torch.float64)
    x[:, 1:] = 0.0
    for options in ({}, {"return_uncertainty": True}, {"antithetic": False}):
        result = cg.ShapleySampling(model).attribute(
            x, target=0, budget=2, return_evaluations=True, **options
        )
        torch.testing.assert_close(result.attributions[:, 0], (model(x) - model.bias)[:, 0])
        assert result.n_evaluations.tolist() == [2, 2]
    with pytest.raises(ValueError, match="2 evaluations per example; raise budget to 2"):
        cg.ShapleySampling(model).attribute(x, target=0, budget=1)


@pytest.mark.parametrize("cls", [cg.PairedKernelShap, cg.BayesShap], ids=lambda c: c.__name__)
def test_per_example_masks_read_each_examples_own_windows(cls):
    # superpixel-like per-example masks: the patch grid, its ids relabelled (other
    # neighbours for each id), the grid again. Explained alone an example reads its
    # windows off its own mask; in a batch it did not (the ids' order for all), so its
    # row depended on its batch. Now the examples with the same windows share a game.
    mask, _ = _grid_features()
    relabel = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    masks = torch.cat([mask, relabel[mask], mask])
    model = NeighbourProducts()
    x = 0.5 + torch.rand(
        3, 1, 8, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )

    def explain(rows):
        return cls(model).attribute(
            x[rows], target=1, feature_mask=masks[rows], budget=200,
            generator=torch.Generator().manual_seed(4),
        )  # fmt: skip

    batch = explain(slice(None))
    for i in range(3):
        torch.testing.assert_close(explain(slice(i, i + 1))[0], batch[i], rtol=0, atol=1e-7)
    explainer = cls(model)
    game, _ = explainer._game(explainer._options({}), x, 0.0, 1, None, masks)
    groups, which = torch.unique(varying_features(game), dim=0, return_inverse=True)
    games = merged_groups(game, groups, which, True)
    assert sorted(e.tolist() for e, _ in games) == [[0, 2], [1]]
