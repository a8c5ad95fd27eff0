"""Dummy features: ids a feature mask leaves unused, and features at their baseline,
are explained as exact zeros.

An id that occurs nowhere in an example is a dummy feature: its attribution is
0 and it changes nothing else. Estimators that are not exact for dummies
(regressions, residual norms, the bivariate matrix) would give it noise or let
it change the others, so such ids are dropped before planning and the
outcome is widened back afterwards, zeros in their place.

A feature whose every element equals every background (a pixel patch on a
black background, a padding token, a one-hot column at zero) is a null
player: no coalition's value depends on it, so its Shapley value is 0. Classes
that explain Shapley values of the game itself (not of a graph- or
hierarchy-restricted one) drop such features per example too, as SHAP's
``KernelExplainer`` does: the estimators then spend the budget on the features
that vary (with 6 of 16 features at the baseline the default's error fell to
0.31-0.61x, benchmarks/null_players.py), and the null players get exact zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..engine.output_modes import MultipleOutputs
from ..plans.local_windows import kept_windows
from ..plans.walsh_local import LOCAL_MIN_FEATURES
from .result import Outcome

#: extras indexed by feature along their second axis, besides ``Outcome.per_feature``
FEATURE_EXTRAS = ("shapley",)


def explain_present_features(
    game: CoalitionGame,
    explain: Callable[[CoalitionGame], Outcome],
    exact_for_dummies: bool,
    *,
    null_players: bool = False,
    restart: Callable[[], None] | None = None,
    reads_layout: bool = False,
) -> Outcome:
    """Explain each group of examples over the feature ids its masks use.

    Examples whose masks use different ids (per-image superpixels) are
    explained in groups, one game per distinct set of ids, unless the
    estimator is ``exact_for_dummies``. Ids unused by every example are
    dropped for every class: no evaluation is spent on them. With
    ``null_players``, so are each example's features at their baseline
    (:func:`varying_features`; an example at its baseline keeps one). Each
    group after the first calls ``restart`` first (the random draws start
    where the call's did, so an example's values do not depend on its batch).
    Under shared masks the groups with as many features (and, where the
    estimator ``reads_layout``, the same local windows) are one game with
    per-example masks (:func:`merged_groups`); under per-example masks (superpixels)
    the estimators that read the layout explain together only the examples whose
    own layouts give the same windows.
    """
    if null_players:
        used = game.features.present()
        present = _keep_one(used & varying_features(game), used)
    elif game.features.numbers_every_id():
        return explain(game)
    else:
        present = game.features.present()
    groups, which = torch.unique(present, dim=0, return_inverse=True)
    # per-example masks: the examples' own windows (from LOCAL_MIN_FEATURES features)
    by_layout = reads_layout and game.features.per_example
    by_layout = by_layout and game.num_features >= LOCAL_MIN_FEATURES
    if groups.shape[0] == 1 and bool(groups.all()) and not by_layout:
        return explain(game)
    if groups.shape[0] > 1 and exact_for_dummies and not null_players:
        return explain(game)
    parts: list[tuple[Tensor | None, Tensor, Outcome]] = []
    rest = 0 if null_players else -1
    # the games with the most features first: a budget too small for a game refuses it
    # there, before any model call, not after the smaller games ran (values unchanged:
    # each game's draws start where the call's did)
    games = sorted(merged_groups(game, groups, which, reads_layout), key=_kept_count, reverse=True)
    for position, (examples, ids) in enumerate(games):
        if position and restart is not None:
            restart()
        sub = game.restricted(examples, ids, rest, shared_geometry=reads_layout)
        rows = slice(None) if examples is None else examples
        try:
            outcome = explain(sub)
        except MultipleOutputs:
            # the probe's rows were counted in this game: the restart replays them
            game.evaluations[rows] += sub.evaluations
            raise
        except ValueError as error:
            dropped = sub.num_features < game.num_features
            if null_players and dropped and error.args and isinstance(error.args[0], str):
                # its d is the group's: say why it is not the mask's
                error.args = (
                    f"{error.args[0]} (d counts the {sub.num_features} of "
                    f"{game.num_features} features that vary from the baseline in "
                    "these examples: features at their baseline are left out)",
                    *error.args[1:],
                )
            raise
        game.evaluations[rows] += sub.evaluations
        if ids.dim() == 2:  # each example's kept ids, (n, k)
            ids = ids.nonzero()[:, 1].view(ids.shape[0], -1)
        parts.append((examples, ids, outcome))
    return merge_outcomes(parts, game.batch_size, game.num_features)


def _kept_count(group: tuple[Tensor | None, Tensor]) -> int:
    """The features a game of :func:`merged_groups` keeps."""
    ids = group[1]
    return int(ids.shape[0]) if ids.dim() == 1 else int(ids[0].sum())


def merged_groups(
    game: CoalitionGame, groups: Tensor, which: Tensor, reads_layout: bool
) -> list[tuple[Tensor | None, Tensor]]:
    """The games to explain, as ``(examples, ids)``: one per distinct set of ids
    (``groups`` ``(G, d)`` bool, ``which`` each example's), ``ids`` its ``(k,)`` ids.

    Under shared masks the sets with as many ids are one game instead, ``ids`` then
    the examples' ``(n, d)`` rows: each group's draws start where the call's did, so
    the estimators would draw the same for each, and one game pays the planning
    and the model calls once (a tabular batch with zeros scattered has nearly one
    set per example). Where the estimator ``reads_layout`` (the local windows of
    ``plans/local_windows.py``), only sets whose windows agree are merged.
    """

    def alone(group: int) -> tuple[Tensor | None, Tensor]:
        examples = None if len(groups) == 1 else (which == group).nonzero()[:, 0]
        return examples, groups[group].nonzero()[:, 0]

    if game.features.per_example and reads_layout:
        return [
            part
            for group in range(len(groups))
            for part in _same_windows(game, groups, which, group)
        ]
    if len(groups) == 1 or game.features.per_example:
        return [alone(group) for group in range(len(groups))]
    counts = groups.sum(dim=1).tolist()
    windows = kept_windows(game.features, groups) if reads_layout else [None] * len(groups)
    games: dict[tuple[Any, ...], list[int]] = {}
    for group, key in enumerate(zip(counts, windows)):
        games.setdefault(key, []).append(group)
    out = []
    for members in games.values():
        if len(members) == 1:
            out.append(alone(members[0]))
            continue
        chosen = torch.zeros(len(groups), dtype=torch.bool, device=groups.device)
        chosen[members] = True
        examples = chosen[which].nonzero()[:, 0]
        out.append((examples, groups[which[examples]]))
    return out


def _same_windows(
    game: CoalitionGame, groups: Tensor, which: Tensor, group: int
) -> list[tuple[Tensor | None, Tensor]]:
    """The examples of one set of ids under per-example masks, split by the windows of
    each one's own layout: explained alone, an example reads its windows off its
    mask, so a game of several must share them (each gets the first one's layout)."""
    examples = (which == group).nonzero()[:, 0]
    ids, kept = groups[group].nonzero()[:, 0], groups[group][None]
    games: dict[Any, list[int]] = {}
    for example in examples.tolist():
        alone = game.features.select(torch.tensor([example], device=examples.device))
        games.setdefault(kept_windows(alone, kept)[0], []).append(example)
    rows = [torch.tensor(members, device=examples.device) for members in games.values()]
    return [(members, ids) for members in rows]


def varying_features(game: CoalitionGame) -> Tensor:
    """``(N, d)`` bool: the features with an element that differs from a background.

    A feature equal to every background in every element builds the same rows
    whether it is in a coalition or not: a null player of that example's game.
    """
    batch = game.batch_size
    counts = torch.zeros(batch, game.num_features, dtype=torch.long, device=game.device)
    # one reference at a time (no (B, N, ...) temporary), stopping once every feature
    # varies: with a background set that is after the first in practice
    for reference in range(game.num_references):
        for inputs, backgrounds, mask in zip(game.inputs, game.backgrounds, game.features.masks):
            differs = inputs != backgrounds[reference]
            ids = mask.expand(inputs.shape).reshape(batch, -1)
            counts.scatter_add_(1, ids, differs.reshape(batch, -1).long())
        if reference + 1 < game.num_references and bool((counts > 0).all()):
            break
    return counts > 0


def _keep_one(present: Tensor, used: Tensor) -> Tensor:
    """``present`` with each empty row's first ``used`` id kept: a game needs a feature
    (it gets ``f(x) - f(baseline) = 0``)."""
    empty = ~present.any(dim=1)
    if not bool(empty.any()):
        return present
    first = used.expand_as(present).long().argmax(dim=1)
    present = present.clone()
    present[empty, first[empty]] = True
    return present


def merge_outcomes(
    parts: list[tuple[Tensor | None, Tensor, Outcome]], batch: int, d: int
) -> Outcome:
    """Outcomes over renumbered features (and groups of examples) back to ``d`` features."""
    first = parts[0][2]
    matrix_axes = 1 if first.packed else 2
    if len(parts) == 1:
        _, ids, outcome = parts[0]
        extras = {
            name: _widen_extra(name, value, outcome, ids, d)
            for name, value in outcome.extras.items()
        }
        attributions = _widen(outcome.attributions, ids, d, matrix_axes)
        return Outcome(attributions, extras, outcome.per_feature, outcome.packed)
    merged: Tensor | None = None
    merged_extras: dict[str, Any] = {}
    for examples, ids, outcome in parts:
        part = _widen(outcome.attributions, ids, d, matrix_axes)
        if merged is None:
            merged = part.new_zeros((batch, *part.shape[1:]))
        merged[examples] = part
        for name, value in outcome.extras.items():
            if not isinstance(value, Tensor):
                # e.g. a report: one per group of examples, with the examples' indices
                merged_extras.setdefault(name, []).append((examples, value))
                continue
            wide = _widen_extra(name, value, outcome, ids, d)
            if name not in merged_extras:
                merged_extras[name] = wide.new_zeros((batch, *wide.shape[1:]))
            merged_extras[name][examples] = wide
    assert merged is not None
    return Outcome(merged, merged_extras, first.per_feature, first.packed)


def _widen(values: Tensor, ids: Tensor, d: int, axes: int) -> Tensor:
    """Values over features ``ids`` (axis 1, and 2 for a matrix) to all ``d``, zeros
    elsewhere; ``ids`` ``(k,)``, or ``(n, k)`` each example's."""
    shape = list(values.shape)
    for axis in range(1, 1 + axes):
        shape[axis] = d
    out = values.new_zeros(shape)
    if ids.dim() == 2:  # (n, k): each example's own ids
        rows = torch.arange(ids.shape[0], device=ids.device)[:, None]
        if axes == 1:
            out[rows, ids] = values
        else:
            out[rows[:, :, None], ids[:, :, None], ids[:, None, :]] = values
    elif axes == 1:
        out[:, ids] = values
    else:
        out[:, ids[:, None], ids[None, :]] = values
    return out


def _widen_extra(name: str, value: Any, outcome: Outcome, ids: Tensor, d: int) -> Any:
    if name in outcome.per_feature or name in FEATURE_EXTRAS:
        return _widen(value, ids, d, 1)
    if isinstance(value, Tensor) and value.dim() > 1:
        raise ValueError(
            f"{name} cannot be returned when feature_mask leaves ids unused; renumber the "
            "mask's ids 0, 1, 2, ... without gaps."
        )
    return value
