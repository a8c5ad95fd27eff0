"""Uncertainty measures on a trained model: coverage, widths and costs.

Prints, in one run:

1. **Coverage and mean half-width against the budget** of the 95% intervals
   of ShapleySampling (plain t, moderated t and bootstrap) and BayesShap (plain and
   focused), with ExactShapley as the truth, on an MLP trained in seconds on
   scikit-learn's breast-cancer data, its 30 columns grouped into 10
   features (the mean, standard error and worst value of each measurement).
   Budgets are model evaluations per example: BayesShap spends ``n_samples``
   plus the two endpoints, ShapleySampling ``d + 1`` per ordering (``n_samples = budget / d``
   orderings, its prefixes deduplicated).
2. **BayesShap's coverage on random MLPs** (issue 29's cells): d = 8, 10, 12,
   tanh and ReLU, 50-400 evaluations, ``--seeds`` models x 10 examples each;
   an exact interval (every coalition evaluated) covers within 1e-9.
3. **BayesShap time against n** on the 30 ungrouped columns (should be
   linear: coalitions are sampled, evaluated and folded into ``d x d``
   statistics; no n x n matrix).
4. **ShapleyResiduals time against d**: the Walsh-Hadamard maths alone on
   precomputed values (O(d^2 2^d) for the inessential games, O(d 2^d) for
   the norms) and the whole ``attribute`` on an MLP, beside the dense
   least-squares solve the transform replaces (small d only).

Run:  python benchmarks/uncertainty.py [--quick] [--examples 40] [--repeats 3] [--seeds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _timing import add_device_argument, use_device
from torch import nn

from captum_graphshap.attr.bayes_shap import BayesShap
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shapley_residuals import ShapleyResiduals
from captum_graphshap.attr.shapley_sampling import ShapleySampling
from captum_graphshap.uncertainty.residuals import inessential_games, residual_norms


def breast_cancer_mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor, float, float]:
    """An MLP on standardised breast-cancer data; test examples, accuracy, training time."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    data = load_breast_cancer()
    x_train, x_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.25, random_state=0, stratify=data.target
    )
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    train = torch.tensor((x_train - mean) / std, dtype=torch.float32)
    test = torch.tensor((x_test - mean) / std, dtype=torch.float32)
    labels = torch.tensor(y_train)
    start = time.perf_counter()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(30, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):  # full batch, about a second
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(train), labels).backward()
        optimiser.step()
    model.eval()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(test).argmax(dim=1) == torch.tensor(y_test)).float().mean().item()
    return model, test, torch.tensor(y_test), accuracy, seconds


def grouped_mask() -> torch.Tensor:
    """Columns 0-9 are means, 10-19 standard errors, 20-29 worst values of the
    same 10 measurements: one feature per measurement."""
    return (torch.arange(30) % 10)[None]


def coverage_table(
    model: nn.Module, x: torch.Tensor, budgets: list[int], repeats: int
) -> list[tuple[str, int, float, float, float]]:
    mask = grouped_mask()
    d = 10
    baseline = torch.zeros(1, 30)  # the training mean, after standardising
    exact = ExactShapley(model).attribute(x, baselines=baseline, target=1, feature_mask=mask)
    exact = exact[:, :d].double()  # elements 0..9 carry the 10 features' values
    scale = exact.abs().mean().item()
    rows = []

    def sampling(budget: int, **options: object) -> Callable:
        """ShapleySampling with antithetic orderings (an even count, at least 4) in ``budget``."""
        orderings = max(4, budget // d - (budget // d) % 2)
        return lambda g: ShapleySampling(model).attribute(
            x, baseline, 1, None, mask, orderings, generator=g, return_uncertainty=True, **options
        )

    def bayes(budget: int, **options: object) -> Callable:
        """BayesShap with ``budget - 2`` sampled coalitions (the endpoints besides)."""
        return lambda g: BayesShap(model).attribute(
            x, baseline, 1, None, mask, budget - 2, generator=g, return_uncertainty=True, **options
        )

    for budget in budgets:
        contenders = {
            # antithetic pairs (the default) and the plain t interval over the pairs
            "ShapleySampling t": sampling(budget, interval="t"),
            # the default interval: the moderated t (benchmarks/sampling_coverage.py)
            "ShapleySampling moderated": sampling(budget),
            "ShapleySampling bootstrap": sampling(budget, interval="bootstrap"),
            # n_samples coalitions besides the two endpoints; the default
            # estimator="auto": the Walsh-basis Gaussian process up to 512 pairs
            "BayesShap": bayes(budget),
            # the paper's Bayesian linear regression (the default before)
            "BayesShap kernel": bayes(budget, estimator="kernel"),
            "BayesShap focused": bayes(budget, focused=True),
        }
        for name, run in contenders.items():
            hits, widths, errors = [], [], []
            for seed in range(repeats):
                mean, half = run(torch.Generator().manual_seed(seed))
                mean, half = mean[:, :d].double(), half[:, :d].double()
                # float32 rounding: an exact estimate (every coalition, width 0) still
                # differs from ExactShapley's by ~1e-7
                covered = (mean - exact).abs() <= half + 1e-6 * scale
                hits.append(covered.double().mean().item())
                widths.append(half.mean().item() / scale)
                errors.append((mean - exact).abs().mean().item() / scale)
            rows.append(
                (
                    name,
                    budget,
                    statistics.mean(hits),
                    statistics.mean(widths),
                    statistics.mean(errors),
                )
            )
    return rows


def bayes_mlp_coverage(seeds: int) -> list[tuple[str, int, int, float, float]]:
    """``(activation, d, budget, coverage, mean half-width)`` of BayesShap's 95% intervals
    on random 2 x 32 MLPs (float64), ``seeds`` models of 10 examples per cell."""
    rows = []
    for activation in (nn.Tanh, nn.ReLU):
        for d in (8, 10, 12):
            for budget in (50, 100, 200, 400):
                covered, widths = [], []
                for seed in range(seeds):
                    torch.manual_seed(seed)
                    model = nn.Sequential(
                        nn.Linear(d, 32), activation(), nn.Linear(32, 32), activation(),
                        nn.Linear(32, 1),
                    ).double().eval()  # fmt: skip
                    g = torch.Generator().manual_seed(1000 + seed)
                    x = torch.randn(10, d, dtype=torch.float64, generator=g)
                    exact = ExactShapley(model).attribute(x, target=0)
                    mean, half = BayesShap(model).attribute(
                        x,
                        target=0,
                        budget=budget,
                        generator=torch.Generator().manual_seed(seed),
                        return_uncertainty=True,
                    )
                    covered.append(float(((mean - exact).abs() <= half + 1e-9).double().mean()))
                    widths.append(float(half.mean()))
                rows.append(
                    (
                        activation.__name__,
                        d,
                        budget,
                        statistics.mean(covered),
                        statistics.mean(widths),
                    )
                )
    return rows


def bayes_time_table(model: nn.Module, x: torch.Tensor, sizes: list[int], repeats: int):
    """On the 30 ungrouped columns: with 10 features the 1,022 distinct
    coalitions would be deduplicated and the time would stop growing. The
    linear regression (``estimator="kernel"``): the Gaussian process of the
    default grows as the pairs cubed, by design, up to 512 pairs."""
    mask = None
    explainer = BayesShap(model)
    explainer.attribute(x, 0.0, 1, None, mask, 64, estimator="kernel")  # warm-up
    rows = []
    for n in sizes:
        times = []
        for seed in range(repeats):
            generator = torch.Generator().manual_seed(seed)
            start = time.perf_counter()
            explainer.attribute(x, 0.0, 1, None, mask, n, generator=generator, estimator="kernel")
            times.append(time.perf_counter() - start)
        rows.append((n, statistics.median(times)))
    return rows


def residual_time_table(dims: list[int], repeats: int, dense_up_to: int):
    rows = []
    for d in dims:
        torch.manual_seed(d)
        model = nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 1)).eval()
        x = torch.randn(1, d)
        values = torch.randn(1, 2**d, dtype=torch.float64)
        norms_t, games_t, full_t = [], [], []
        for _ in range(repeats):
            start = time.perf_counter()
            residual_norms(values)
            norms_t.append(time.perf_counter() - start)
            if d <= 16:
                start = time.perf_counter()
                inessential_games(values)
                games_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            ShapleyResiduals(model).attribute(x)
            full_t.append(time.perf_counter() - start)
        dense = dense_time(values, d) if d <= dense_up_to else None
        rows.append(
            (
                d,
                statistics.median(norms_t),
                statistics.median(games_t) if games_t else None,
                statistics.median(full_t),
                dense,
            )
        )
    return rows


def dense_time(values: torch.Tensor, d: int) -> float:
    """One feature's inessential game by a dense least-squares solve (the baseline)."""
    edges = [(s, s | (1 << j)) for j in range(d) for s in range(2**d) if not s >> j & 1]
    incidence = torch.zeros(len(edges), 2**d, dtype=torch.float64)
    rows = torch.arange(len(edges))
    incidence[rows, torch.tensor([u for _, u in edges])] = 1.0
    incidence[rows, torch.tensor([lo for lo, _ in edges])] = -1.0
    partial = torch.zeros(len(edges), 1, dtype=torch.float64)
    start = time.perf_counter()
    torch.linalg.lstsq(incidence[:, 1:], partial)
    return (time.perf_counter() - start) * d  # every feature


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few examples, budgets and sizes")
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=None, help="models per coverage cell")
    add_device_argument(parser)
    args = parser.parse_args()
    use_device(args.device)
    examples = args.examples or (10 if args.quick else 40)
    repeats = args.repeats or (1 if args.quick else 3)
    budgets = [100, 400] if args.quick else [50, 100, 200, 400, 800, 1600]
    sizes = [100, 400, 1600] if args.quick else [100, 200, 400, 800, 1600, 3200, 6400]
    dims = [8, 12, 16] if args.quick else [8, 10, 12, 14, 16, 18, 20]
    torch.set_num_threads(max(1, torch.get_num_threads()))

    model, test, _, accuracy, seconds = breast_cancer_mlp()
    print(
        f"MLP on breast cancer: test accuracy {accuracy:.3f}, trained in "
        f"{seconds:.1f} s; explaining {examples} test examples, "
        f"10 grouped features, target = logit of 'benign', {repeats} seed(s)\n"
    )
    x = test[:examples]

    print("## Coverage of exact Shapley by 95% intervals (widths and errors / mean |phi|)\n")
    print("| method | evaluations per example | coverage | mean half-width | mean abs error |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, budget, coverage, width, error in coverage_table(model, x, budgets, repeats):
        print(f"| {name} | {budget} | {coverage:.3f} | {width:.3f} | {error:.3f} |")

    seeds = args.seeds or (5 if args.quick else 20)
    print(f"\n## BayesShap's coverage on random MLPs ({seeds} models x 10 examples a cell)\n")
    print("| activation | d | evaluations | coverage | mean half-width |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for activation, d, budget, coverage, width in bayes_mlp_coverage(seeds):
        print(f"| {activation} | {d} | {budget} | {coverage:.3f} | {width:.4f} |")

    print(f"\n## BayesShap time against n ({examples} examples, 30 ungrouped features)\n")
    print("| n_samples | time s | µs per coalition and example | marginal µs per coalition |")
    print("| ---: | ---: | ---: | ---: |")
    table = bayes_time_table(model, x, sizes, max(3, repeats))
    previous: tuple[int, float] | None = None
    for n, seconds in table:
        per = seconds / (n * examples) * 1e6
        marginal = "—"
        if previous is not None:
            slope = (seconds - previous[1]) / ((n - previous[0]) * examples) * 1e6
            marginal = f"{slope:.2f}"
        previous = (n, seconds)
        print(f"| {n} | {seconds:.3f} | {per:.2f} | {marginal} |")

    print("\n## ShapleyResiduals time against d (one example)\n")
    print(
        "| d | norms (maths) s | inessential games (maths) s | attribute on an MLP s "
        "| dense lstsq, all features s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for d, norms, games, full, dense in residual_time_table(
        dims, max(3, repeats), 10 if args.quick else 11
    ):
        games_text = f"{games:.4f}" if games is not None else "—"
        dense_text = f"{dense:.3f}" if dense is not None else "—"
        print(f"| {d} | {norms:.4f} | {games_text} | {full:.3f} | {dense_text} |")


if __name__ == "__main__":
    main()
