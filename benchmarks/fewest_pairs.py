"""The defaults at their fewest pairs: silent blow-ups, efficiency and magnitude.

Runs ``PairedKernelShap()`` and ``BayesShap()`` (default options) at budgets
``2 d + 2``, ``2 d + 3`` and ``2 d + 4`` on tanh MLPs ``Linear(d, 16)-Tanh-Linear(16, 1)``
(issue 29's reproduction is d = 12, seed 10), d = 8, 12, 16, 20, 24, 12
seeds each, 8 examples per run, and counts the runs where an attribution is
non-finite, exceeds 100 x the spread ``max |f(x) - f(b)|`` bound, breaks
efficiency by more than 1e-6 relative, or where the call raised (the library's
guard turns a blow-up into an error). Prints one row per d and the totals;
also the largest ``max |phi| / max |f(x) - f(b)|`` seen.

    python benchmarks/fewest_pairs.py [--seeds 12]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from captum_graphshap import BayesShap, PairedKernelShap


def run(d: int, seed: int, budget: int, bayes: bool) -> tuple[bool, float]:
    """``(sound, largest ratio)`` of one call."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(8, d)
    generator = torch.Generator().manual_seed(seed)
    explainer = BayesShap(model) if bayes else PairedKernelShap(model)
    try:
        phi = explainer.attribute(x, target=0, budget=budget, generator=generator)
    except RuntimeError:
        return False, float("inf")
    with torch.no_grad():
        gap = (model(x) - model(torch.zeros_like(x)))[:, 0]
    scale = float(gap.abs().max())
    ratio = float(phi.abs().max()) / max(scale, 1e-12)
    finite = bool(torch.isfinite(phi).all())
    efficient = bool(((phi.sum(1) - gap).abs() <= 1e-4 * max(scale, 1e-6)).all())  # float32
    return finite and efficient and ratio <= 100, ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| d | class | runs | unsound | largest max-phi / max-gap |")
    print("| ---: | --- | ---: | ---: | ---: |")
    total = bad = 0
    for d in (8, 12, 16, 20, 24):
        for bayes in (False, True):
            unsound, largest, runs = 0, 0.0, 0
            for seed in range(args.seeds):
                for budget in (2 * d + 2, 2 * d + 3, 2 * d + 4):
                    sound, ratio = run(d, seed, budget, bayes)
                    runs += 1
                    unsound += not sound
                    largest = max(largest, ratio)
            total, bad = total + runs, bad + unsound
            name = "BayesShap" if bayes else "PairedKernelShap"
            print(f"| {d} | {name} | {runs} | {unsound} | {largest:.3g} |")
    print(f"\n{bad} unsound of {total} runs")


if __name__ == "__main__":
    main()
