"""Coverage of ShapleySampling's 95% intervals at few orderings, against exact Shapley.

For random-weight MLPs of several families, ``d`` features, a batch of
explicands and many seeds, the fraction of (feature, explicand, seed) whose
interval covers the exact Shapley value (ExactShapley, all ``2^d``
coalitions), for ``interval="t"`` (the plain Student interval) and
``interval="moderated"`` (the default), with and without antithetic pairs,
against the number of orderings. The moderated interval was tuned on the
``tanh`` and ``relu`` families only; the other four are held out, and so is
a trained model: ``uncertainty.py``'s MLP on scikit-learn's breast-cancer
data (10 grouped features, 40 test examples), whose marginal contributions
are far more skewed than a random network's (median |skewness| 1.3).

Printed tables: coverage per family group and orderings (with the coverage
of the top quarter of features by ``|phi|``, the ones a reader looks at, and
the median half-width ratio moderated / t), coverage against ``d`` at the
fewest orderings, and the trained model's coverage (``--no-trained`` skips
it: it needs scikit-learn).

Run:  OMP_NUM_THREADS=1 python benchmarks/sampling_coverage.py [--quick] [--seeds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shapley_sampling import ShapleySampling

TUNED = ("tanh", "relu")
HELD_OUT = ("gelu", "sigmoid", "softplus_deep", "gated")
ORDERINGS = {False: (2, 4, 8, 16, 32), True: (4, 8, 16, 32)}  # 4: the fewest antithetic


class Gated(nn.Module):
    """A multiplicative (gated) unit: interactions of every order, no activation shared
    with the tuned families."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.value, self.gate, self.out = nn.Linear(d, 8), nn.Linear(d, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.value(x)) * torch.sigmoid(self.gate(x)))


def make_model(family: str, d: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if family == "gated":
        return Gated(d).double().eval()
    if family == "softplus_deep":
        layers: list[nn.Module] = [nn.Linear(d, 16), nn.Softplus()]
        layers += [nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 16), nn.Softplus()]
        return nn.Sequential(*layers, nn.Linear(16, 1)).double().eval()
    activation = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}
    act = activation[family]
    return (
        nn.Sequential(nn.Linear(d, 32), act(), nn.Linear(32, 32), act(), nn.Linear(32, 1))
        .double()
        .eval()
    )


Cells = dict[tuple[bool, int, str], tuple[float, float, float]]


def coverage(family: str, d: int, explicands: int, seeds: int) -> Cells:
    """``(antithetic, orderings, interval) -> (coverage, top-quarter coverage, mean width)``."""
    model = make_model(family, d, seed=d)
    generator = torch.Generator().manual_seed(100 + d)
    x = torch.randn(explicands, d, dtype=torch.float64, generator=generator)
    return coverage_of(model, x, None, None, seeds)


def trained_coverage(seeds: int) -> Cells:
    """The same cells on the breast-cancer MLP of ``uncertainty.py`` (float64)."""
    from uncertainty import breast_cancer_mlp, grouped_mask

    model, test, _, _, _ = breast_cancer_mlp()
    x = test[:40].double()
    return coverage_of(model.double(), x, grouped_mask(), torch.zeros(1, 30).double(), seeds, 1)


def coverage_of(
    model: nn.Module,
    x: torch.Tensor,
    mask: torch.Tensor | None,
    baseline: torch.Tensor | None,
    seeds: int,
    target: int = 0,
) -> Cells:
    exact = ExactShapley(model).attribute(x, baseline, target=target, feature_mask=mask)
    if mask is not None:  # one column per feature: the first of each group
        columns = [int((mask[0] == f).nonzero()[0]) for f in range(int(mask.max()) + 1)]
        exact = exact[:, columns]
    d = exact.shape[1]
    top = exact.abs().argsort(dim=1, descending=True).argsort(dim=1) < max(1, d // 4)
    out = {}
    for antithetic, counts in ORDERINGS.items():
        for orderings in counts:
            for interval in ("t", "moderated"):
                hits, top_hits, widths = [], [], []
                for seed in range(seeds):
                    mean, half = ShapleySampling(model).attribute(
                        x,
                        baseline,
                        target=target,
                        feature_mask=mask,
                        n_samples=orderings,
                        antithetic=antithetic,
                        generator=torch.Generator().manual_seed(seed),
                        return_uncertainty=True,
                        interval=interval,
                    )
                    if mask is not None:
                        mean, half = mean[:, columns], half[:, columns]
                    # a tolerance for float rounding: an exact estimate has width 0
                    hit = (mean - exact).abs() <= half + 1e-12
                    hits.append(hit.double().mean().item())
                    top_hits.append(hit[top].double().mean().item())
                    widths.append(half.mean().item())
                out[(antithetic, orderings, interval)] = (
                    statistics.mean(hits),
                    statistics.mean(top_hits),
                    statistics.mean(widths),
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and sizes")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--explicands", type=int, default=8)
    parser.add_argument("--dims", default=None, help="comma-separated d (default 5,6,8,10,12)")
    parser.add_argument("--no-trained", action="store_true", help="skip the trained model")
    args = parser.parse_args()
    seeds = args.seeds or (6 if args.quick else 16)
    dims = [int(v) for v in (args.dims or ("6,10" if args.quick else "5,6,8,10,12")).split(",")]
    torch.set_num_threads(1)
    start = time.perf_counter()
    results = {
        (family, d): coverage(family, d, args.explicands, seeds)
        for family in TUNED + HELD_OUT
        for d in dims
    }
    print(
        f"{args.explicands} explicands x {seeds} seeds x d in {dims}, 95% intervals, "
        f"{time.perf_counter() - start:.0f} s\n"
    )
    big = [d for d in dims if d >= 8] or dims
    for label, families in (("tuned on", TUNED), ("held out", HELD_OUT)):
        print(f"## Coverage, families {label}: {', '.join(families)}; d in {big}\n")
        print(
            "| antithetic | orderings | samples K | t | moderated | t, top quarter "
            "| moderated, top quarter | width moderated / t |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for antithetic, counts in ORDERINGS.items():
            for orderings in counts:
                cells = [results[(f, d)] for f in families for d in big]
                row = [
                    statistics.mean(c[(antithetic, orderings, name)][part] for c in cells)
                    for name, part in (("t", 0), ("moderated", 0), ("t", 1), ("moderated", 1))
                ]
                ratio = statistics.median(
                    c[(antithetic, orderings, "moderated")][2] / c[(antithetic, orderings, "t")][2]
                    for c in cells
                    if c[(antithetic, orderings, "t")][2] > 0
                )
                samples = orderings // 2 if antithetic else orderings
                print(
                    f"| {antithetic} | {orderings} | {samples} | "
                    + " | ".join(f"{v:.3f}" for v in row)
                    + f" | {ratio:.2f} |"
                )
        print()
    print("## Coverage against d (all families), t -> moderated\n")
    print("| antithetic | orderings | " + " | ".join(f"d = {d}" for d in dims) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in dims) + " |")
    for antithetic, counts in ORDERINGS.items():
        for orderings in counts:
            line = f"| {antithetic} | {orderings} |"
            for d in dims:
                pair = [
                    statistics.mean(
                        results[(f, d)][(antithetic, orderings, name)][0] for f in TUNED + HELD_OUT
                    )
                    for name in ("t", "moderated")
                ]
                line += f" {pair[0]:.3f} → {pair[1]:.3f} |"
            print(line)
    if args.no_trained:
        return
    start = time.perf_counter()
    trained = trained_coverage(seeds)
    print(
        f"\n## Trained MLP, breast cancer, 10 grouped features, 40 examples, {seeds} seeds "
        f"({time.perf_counter() - start:.0f} s)\n"
    )
    print("| antithetic | orderings | t | moderated | t, top quarter | moderated, top quarter |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for antithetic, counts in ORDERINGS.items():
        for orderings in counts:
            row = [
                trained[(antithetic, orderings, name)][part]
                for name, part in (("t", 0), ("moderated", 0), ("t", 1), ("moderated", 1))
            ]
            print(f"| {antithetic} | {orderings} | " + " | ".join(f"{v:.3f}" for v in row) + " |")


if __name__ == "__main__":
    main()
