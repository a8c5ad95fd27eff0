"""Features at their baseline, dropped or kept: the error of the sampled classes against exact.

A feature equal to every background (a blank patch under a zero baseline, a
padding token, a one-hot column at zero) is a null player: its Shapley value
is 0 and no coalition's value depends on it. Since the change this script
measures, ``ExactShapley``, ``ShapleySampling``, ``PairedKernelShap``,
``BayesShap`` and ``Shear`` drop such features per example before planning
(``attr/dummies.py``); the budget then goes to the features that vary.

Side by side in one run, with the same generator seeds, each class with the
drop and with it turned off (its ``drops_null_players`` class attribute):

* random tanh MLPs with 16 features, ``--null`` of them at a zero baseline in
  each example (a different set per example), 12 models;
* scikit-learn's 8 x 8 digits under a trained CNN (``estimators.digits``), 16
  patches of 2 x 2 pixels, a zero baseline: the blank patches are the null
  players the data has (printed per digit).

Prints the relative error ``||phi - phi_exact|| / ||phi_exact||`` (mean over
examples) and the ratio with / without. ``--timing``: the cost of the groups
instead (examples with different sets are explained in games, the sets with as
many features, and the same local windows where the class reads them, in one): 200
examples of a cheap ReLU MLP with 12 features, none or 30% of the entries at
the zero baseline, each class with the drop on and off in 3 rotating rounds
(``_timing.rotating_rounds``; medians, and the median ratio).

    python benchmarks/null_players.py [--null 6] [--models 12] [--digits 20] [--timing]
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from functools import partial
from unittest.mock import patch

import torch
from _timing import median_ratio, rotating_rounds
from estimators import digits
from torch import nn

from captum_graphshap import ExactShapley, PairedKernelShap, ShapleySampling
from captum_graphshap.engine.features import format_feature_mask
from captum_graphshap.plans.local_windows import kept_windows

CLASSES = (PairedKernelShap, ShapleySampling)
BUDGETS = (48, 64, 128, 256)
CPU = torch.device("cpu")


def errors(model, x, baseline, mask, target, exact, cls, budget, seed, drop) -> list[float]:
    """Each example's relative error of ``cls`` at ``budget`` with the drop on or off."""
    with patch.object(cls, "drops_null_players", drop), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        phi = cls(model).attribute(
            x,
            baselines=baseline,
            target=target,
            feature_mask=mask,
            budget=budget,
            generator=torch.Generator().manual_seed(seed),
        )
    flat, reference = phi.flatten(1).double(), exact.flatten(1).double()
    return ((flat - reference).norm(dim=1) / reference.norm(dim=1)).tolist()


def mlp_cases(models: int, null: int) -> list[tuple]:
    """(model, x, baseline, mask, target) per random MLP, ``null`` of 16 features zero."""
    out = []
    for seed in range(models):
        torch.manual_seed(seed)
        model = nn.Sequential(
            nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1)
        ).double()
        x = 2 * torch.randn(4, 16, dtype=torch.float64)
        for row in x:
            row[torch.randperm(16)[:null]] = 0.0
        out.append((model, x, torch.zeros(1, 16, dtype=torch.float64), None, 0))
    return out


def digit_cases(count: int) -> list[tuple]:
    model, images, baseline, mask, _ = digits(nn.ReLU, 0)
    model.eval()
    picked = images[-count:]
    with torch.no_grad():
        target = model(picked).argmax(1)
    blank = (picked.view(count, 4, 2, 4, 2).abs().sum((2, 4)) == 0).flatten(1).sum(1)
    print("digits: blank patches per image (of 16):", blank.tolist())
    return [(model, picked, baseline, mask, target)]


def report(name: str, cases: list[tuple]) -> None:
    exact = []
    for model, x, baseline, mask, target in cases:
        with torch.no_grad():
            exact.append(ExactShapley(model).attribute(x, baseline, target, feature_mask=mask))
    print(f"\n{name}: relative error, the drop off -> on (ratio)")
    for cls in CLASSES:
        for budget in BUDGETS:
            pairs = [
                pair
                for seed, (case, reference) in enumerate(zip(cases, exact))
                for pair in zip(
                    *(
                        errors(*case[:4], case[4], reference, cls, budget, seed, drop)
                        for drop in (False, True)
                    )
                )
            ]
            off = statistics.mean(p[0] for p in pairs)
            on = statistics.mean(p[1] for p in pairs)
            ratio = statistics.geometric_mean([p[1] / p[0] for p in pairs])
            print(f"  {cls.__name__:16s} budget {budget:4d}: {off:.4f} -> {on:.4f} ({ratio:.2f}x)")


def attribute_with(cls: type, drop: bool, model: nn.Module, x: torch.Tensor, options: dict) -> None:
    """One call of ``cls`` with the drop on or off (seeded where it draws)."""
    extra = dict(options)
    if cls is not ExactShapley:
        extra["generator"] = torch.Generator().manual_seed(0)
    with patch.object(cls, "drops_null_players", drop):
        cls(model).attribute(x, target=0, **extra)


def timing() -> None:
    """Wall time of 200 examples with the drop on and off (a cheap model: the groups'
    fixed cost shows)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 1))
    calls = [
        (PairedKernelShap, {"budget": 64}),
        (PairedKernelShap, {"budget": 256}),
        (ShapleySampling, {"budget": 64}),
        (ExactShapley, {}),
    ]
    for share in (0.0, 0.3):
        x = torch.randn(200, 12)
        x[torch.rand(200, 12) < share] = 0.0
        sets = torch.unique(x != 0, dim=0)
        groups = len(sets)
        # games: the sets with as many features merge, where the windows agree too for
        # the classes that read the layout (attr/dummies.py, merged_groups)
        counts = sets.sum(1).tolist()
        windows = kept_windows(format_feature_mask(None, (x,)), sets)
        games = {True: len(set(zip(counts, windows))), False: len(set(counts))}
        for cls, options in calls:
            contenders = {
                name: partial(attribute_with, cls, drop, model, x, options)
                for name, drop in (("off", False), ("on", True))
            }
            times = rotating_rounds(contenders, 3, CPU)
            off, on = statistics.median(times["off"]), statistics.median(times["on"])
            print(
                f"{share:.0%} at the baseline ({groups} sets, "
                f"{games[cls.reads_feature_layout]} games) {cls.__name__} {options}: "
                f"off {off:.3f} s, on {on:.3f} s ({median_ratio(times, 'on', 'off'):.2f}x)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--null", type=int, default=6, help="features at the baseline, of 16")
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--digits", type=int, default=20)
    parser.add_argument("--timing", action="store_true", help="the groups' cost instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.timing:
        timing()
        return
    mlps = mlp_cases(args.models, args.null)
    report(f"tanh MLPs, {args.null} of 16 features at a zero baseline", mlps)
    report("digits CNN, 16 patches, zero baseline", digit_cases(args.digits))


if __name__ == "__main__":
    main()
