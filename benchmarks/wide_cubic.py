"""The cubic fit above 32 features: how many triples, and is the cross-validated count worth it.

Above 32 features ``PairedKernelShap``'s default (``estimator="auto"``) leaves
the Walsh-basis process for the cubic fit (``plans/regression_adjusted.py``).
Issue 31 asked for that fit at d = 49 to cost at most 10x the kernel
estimator's per example; its cross-validated triple count cost 20 fits. This
script measures, at equal evaluations, the relative L2 error against Shapley
values of:

- ``kernel`` (i.i.d. paired KernelSHAP), ``linear`` (the stratified pairs, no
  triples), ``perm`` (antithetic permutations filling the budget);
- ``cubic_cv``: the cubic fit with the count chosen by 5-fold cross-validation
  among 0, 0.5, 1 and 1.5 times :func:`triple_count` (the rule up to 32
  features);
- ``cubic_0.25``, ``cubic_0.5``, ``cubic_1.0``: that share of
  :func:`triple_count`, no cross-validation;
- ``default``: what ``PairedKernelShap()`` does now;
- with ``--shear``, ``Shear(budget=...)`` (its cubic fit on triples from
  its cross-contributions; derivatives counted in the budget) as it runs now
  (``shear``: the cross-validated count) and with the fixed share the
  default takes above 32 features (``shear_fixed``).

Models (d = 49, no download): a CNN trained in-process on scikit-learn's
digits resized to 28 x 28, explained on 7 x 7 patches of 4 x 4 pixels (ReLU and
SiLU; the predicted class's logit), a random tanh MLP and two MLPs trained on a
synthetic target with pairwise and three-way terms (GELU, ReLU). Eight
explicands per model, two plan seeds. The truth is a long antithetic
permutation run (3,000 orderings); its own noise (half the distance between
two halves of the run, relative) is printed beside each model and adds to
every error in quadrature.

Run:  python benchmarks/wide_cubic.py [--models digits_relu,mlp_gelu] [--budgets 1024,2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimators import _train, digits28

from captum_graphshap.attr.paired_kernel_shap import auto_plan
from captum_graphshap.engine.plan import Plan
from captum_graphshap.plans import regression_adjusted
from captum_graphshap.plans.paired_designs import paired_kernel_plan
from captum_graphshap.plans.permutation_fill import filled_permutation_plan
from captum_graphshap.plans.permutations import filled_orderings
from captum_graphshap.plans.regression_adjusted import (
    cubic_kernel_plan,
    triple_count,
)

CPU = torch.device("cpu")
D = 49
Game = Callable[[Tensor], Tensor]


def digits(act: type[nn.Module], seed: int) -> list[Game]:
    """``estimators.py``'s digits CNN (150 steps), on 49 patches of 4 x 4 pixels."""
    model, images, _, mask, _ = digits28(act, seed, patch=4, steps=150)
    mask = mask.flatten()
    with torch.no_grad():
        predicted = model(images[:8]).argmax(1)

    def game(n: int) -> Game:
        def value(z: Tensor) -> Tensor:
            kept = z[:, mask].view(z.shape[0], 1, 28, 28)
            return model(kept * images[n : n + 1])[:, int(predicted[n])]

        return value

    return [game(n) for n in range(8)]


def mlp(act: type[nn.Module], seed: int, train: bool) -> list[Game]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(D, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 1))
    if train:
        x = torch.randn(3000, D)
        y = (
            torch.sin(x[:, 0] * x[:, 1])
            + (x[:, 2] - 0.5) ** 2
            + x[:, 3] * x[:, 4] * x[:, 5]
            + 0.5 * x[:, 6:20].sum(1).tanh()
            + x[:, 20:30].prod(1).clamp(-1, 1)
        )[:, None]
        _train(model, x, y, nn.functional.mse_loss, 400)
    explicands = torch.randn(8, D, generator=torch.Generator().manual_seed(seed + 7))

    def game(n: int) -> Game:
        return lambda z: model(z * explicands[n])[:, 0]

    return [game(n) for n in range(8)]


MODELS: dict[str, Callable[[], list[Game]]] = {
    "digits_relu": lambda: digits(nn.ReLU, 0),
    "digits_silu": lambda: digits(nn.SiLU, 1),
    "mlp_tanh_random": lambda: mlp(nn.Tanh, 0, False),
    "mlp_gelu": lambda: mlp(nn.GELU, 1, True),
    "mlp_relu": lambda: mlp(nn.ReLU, 2, True),
}


@torch.no_grad()
def truth(game: Game, orderings: int = 3000, seed: int = 123) -> tuple[Tensor, float]:
    """Antithetic permutation estimate and its relative noise (two halves' gap / 2)."""
    generator = torch.Generator().manual_seed(seed)
    halves = []
    per_call = 50  # 25 orderings and their reverses
    for _ in range(2):
        total = torch.zeros(D, dtype=torch.float64)
        for _ in range(orderings // 2 // per_call):
            order = torch.stack([torch.randperm(D, generator=generator) for _ in range(25)])
            order = torch.cat([order, order.flip(1)])
            ranks = order.argsort(dim=1)
            # prefix k holds the first k features of each ordering
            z = (ranks[:, None, :] < torch.arange(D + 1)[None, :, None]).float()
            values = game(z.reshape(-1, D)).double().view(per_call, D + 1)
            total.scatter_add_(0, order.flatten(), (values[:, 1:] - values[:, :-1]).flatten())
        halves.append(total / (orderings // 2))
    mean = (halves[0] + halves[1]) / 2
    return mean, float((halves[0] - halves[1]).norm() / 2 / mean.norm())


def contenders(budget: int, seed: int) -> dict[str, tuple[Plan, bool]]:
    """Name -> (plan, whether its count is cross-validated) for ``budget`` evaluations."""

    def generator() -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    pairs = (budget - 2) // 2
    count = triple_count(D, pairs)
    plans: dict[str, tuple[Plan, bool]] = {
        "kernel": (paired_kernel_plan(D, budget - 2, generator(), CPU), False),
        "linear": (cubic_kernel_plan(D, pairs, generator(), CPU, triples=0), False),
        "cubic_cv": (cubic_kernel_plan(D, pairs, generator(), CPU, triples=count), True),
    }
    for share in (0.25, 0.5, 1.0):
        plan = cubic_kernel_plan(D, pairs, generator(), CPU, triples=int(share * count))
        plans[f"cubic_{share}"] = (plan, False)
    ranks = filled_orderings(D, budget, True, generator(), CPU, minimum=2, even=True)
    plans["perm"] = (filled_permutation_plan(ranks, budget, generator(), CPU), False)
    default, _ = auto_plan(D, budget - 2, generator(), CPU)
    if default is None:  # auto names the cubic estimator: its default plan
        default = cubic_kernel_plan(D, pairs, generator(), CPU)
    plans["default"] = (default, False)
    return plans


def estimate(plan: Plan, values: Tensor, cross_validated: bool) -> Tensor:
    """The plan's estimate; the cross-validated count above 32 features is forced on."""
    if not cross_validated:
        return plan.estimator(values)
    wide = regression_adjusted.WIDE_FEATURES
    regression_adjusted.WIDE_FEATURES = D  # the selection as it runs up to 32 features
    try:
        return plan.estimator(values)
    finally:
        regression_adjusted.WIDE_FEATURES = wide


def shear(game: Game, budget: int, seed: int, fixed: bool) -> Tensor:
    """``Shear``'s estimate of the game at ``budget`` evaluations (its defaults); with
    ``fixed``, the default's rule above 32 features for its triples instead."""
    import warnings

    import captum_graphshap as cg

    one = torch.ones(1, D)
    saved = regression_adjusted.fitted_triple_count, regression_adjusted.SELECTION_MAX_PARAMETERS
    if fixed:

        def share(d: int, pairs: int, informed: bool = False) -> int:
            count = triple_count(d, pairs, informed)
            half = pairs >= regression_adjusted.WIDE_HALF_PAIRS_PER_FEATURE * d
            return count // 2 if half else count // 4

        regression_adjusted.fitted_triple_count = share
        regression_adjusted.SELECTION_MAX_PARAMETERS = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ReLU: the gradient form's notice
            phi = cg.Shear(lambda z: game(z)[:, None]).attribute(
                one,
                torch.zeros_like(one),
                target=0,
                budget=budget,
                generator=torch.Generator().manual_seed(seed),
            )
    finally:
        regression_adjusted.fitted_triple_count, regression_adjusted.SELECTION_MAX_PARAMETERS = (
            saved
        )
    return phi[0].double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--budgets", default="1024,2048")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--shear", action="store_true", help="also Shear, as now and fixed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    budgets = [int(b) for b in args.budgets.split(",")]
    for name in args.models.split(","):
        start = time.perf_counter()
        games = MODELS[name]()
        truths = [truth(game) for game in games]
        noise = statistics.mean(n for _, n in truths)
        print(f"\n## {name}: truth noise {noise:.1e} ({time.perf_counter() - start:.0f} s)")
        for budget in budgets:
            errors: dict[str, list[float]] = {}
            for seed in range(args.seeds):
                for key, (plan, cross_validated) in contenders(budget, seed).items():
                    rows = plan.coalitions.dense().float()
                    with torch.no_grad():
                        values = torch.stack([game(rows).double() for game in games])
                    phi = estimate(plan, values, cross_validated)
                    for n, (exact, _) in enumerate(truths):
                        relative = float((phi[n] - exact).norm() / exact.norm())
                        errors.setdefault(key, []).append(relative)
                if args.shear:
                    for key, fixed in (("shear", False), ("shear_fixed", True)):
                        for game, (exact, _) in zip(games, truths):
                            phi = shear(game, budget, seed, fixed)
                            relative = float((phi - exact).norm() / exact.norm())
                            errors.setdefault(key, []).append(relative)
            cells = "  ".join(f"{k} {statistics.mean(v):.2e}" for k, v in errors.items())
            print(f"budget {budget}: {cells}", flush=True)


if __name__ == "__main__":
    main()
