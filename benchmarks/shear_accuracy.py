"""SHEAR against the strongest samplers at equal budgets (the paper's Fig. 2 and 4, small).

Data and model: scikit-learn's wine data (13 standardised features, 3
classes), a softplus MLP 13-64-64-3 trained for a few seconds. Explained:
the logit of the predicted class of held-out wines, baseline = the training
mean (0 after standardising). Ground truth: exact Shapley values over the
2^13 coalitions (``ExactShapley``).

Budgets: ``N`` in {8, 16, 32, 64} evaluations per feature, i.e. ``N * 13``
model evaluations per explanation for every method:

* SHEAR (``Shear``, antithetic, Hessian cross-contributions);
* our permutation sampling and antithetic permutation sampling
  (``ShapleySampling``, ``N * 13 // 14`` orderings);
* our paired KernelSHAP (``PairedKernelShap``);
* Captum ``ShapleyValueSampling`` (``N * 13 // 14`` orderings) and
  ``KernelShap`` (``N * 13`` samples);
* SHAP ``PermutationExplainer`` (antithetic, ``max_evals = N * 13``) and
  ``KernelExplainer`` (paired, ``nsamples = N * 13``, ``l1_reg=False``: its
  default feature selection zeroes features at these budgets).

Printed: absolute error (AE, sum over features of |estimate - exact|,
mean over wines) and weighted ranking accuracy (ACC), averaged over seeds;
explanations per second (SHEAR's with the time of eta counted, and eta's
share shown apart); the ratio SHEAR AE / antithetic permutation AE at
N = 16 (the paper reports about 0.43). A last table shows SHEAR on a ReLU
MLP, whose Hessian is zero: cooperators from the gradient fallback against
random cooperators and against the arbitrary lowest-index choice a zero
Hessian gives. A plot goes to ``--plot``.

Run:  python benchmarks/shear_accuracy.py [--wines 40] [--seeds 3] [--quick] [--markdown]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from _table import add_markdown_argument, markdown_table
from _timing import add_device_argument, use_device
from torch import Tensor, nn

from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shear import Shear
from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.metrics.accuracy import absolute_error, ranking_accuracy
from captum_graphshap.plans.cross_contributions import select_cooperators
from captum_graphshap.plans.shear import shear_coalitions, shear_estimates

BUDGETS = (8, 16, 32, 64)

Explainer = Callable[[Tensor, Tensor, int, int], Tensor]


def train_wine_mlp(activation: type[nn.Module], seed: int = 0) -> tuple[nn.Module, Tensor]:
    """A wine classifier trained for a few seconds; returns it and the held-out wines."""
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    data = load_wine()
    x_train, x_test, y_train, _ = train_test_split(
        data.data, data.target, test_size=0.4, random_state=seed, stratify=data.target
    )
    mean, std = x_train.mean(0), x_train.std(0)
    x_train = torch.tensor((x_train - mean) / std, dtype=torch.float32)
    x_test = torch.tensor((x_test - mean) / std, dtype=torch.float32)
    labels = torch.tensor(y_train)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(13, 64), activation(), nn.Linear(64, 64), activation(), nn.Linear(64, 3)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(300):
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(x_train), labels).backward()
        optimiser.step()
    return model.eval(), x_test


def ours(method: str) -> Explainer:
    def explain(model: nn.Module, x: Tensor, target: Tensor, n: int, seed: int) -> Tensor:
        generator = torch.Generator().manual_seed(seed)
        budget = n * x.shape[1]
        orderings = budget // (x.shape[1] + 1)
        if method == "SHEAR":
            return Shear(model).attribute(x, target=target, n_samples=n, generator=generator)
        if method == "permutation":
            return ShapleySampling(model).attribute(
                x, target=target, n_samples=orderings, antithetic=False, generator=generator
            )
        if method == "antithetic permutation":
            return ShapleySampling(model).attribute(
                x,
                target=target,
                n_samples=orderings - orderings % 2,
                antithetic=True,
                generator=generator,
            )
        return PairedKernelShap(model).attribute(
            x, target=target, n_samples=budget - 2, generator=generator
        )

    return explain


def captum_method(method: str) -> Explainer:
    from captum.attr import KernelShap, ShapleyValueSampling

    def explain(model: nn.Module, x: Tensor, target: Tensor, n: int, seed: int) -> Tensor:
        torch.manual_seed(seed)
        budget = n * x.shape[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if method == "ShapleyValueSampling":
                return ShapleyValueSampling(model).attribute(
                    x,
                    target=target,
                    n_samples=budget // (x.shape[1] + 1),
                    perturbations_per_eval=64,
                )
            rows = [
                KernelShap(model).attribute(
                    x[i : i + 1],
                    target=int(target[i]),
                    n_samples=budget,
                    perturbations_per_eval=budget,
                )
                for i in range(x.shape[0])
            ]
        return torch.cat(rows)

    return explain


def shap_method(method: str) -> Explainer:
    import shap

    def explain(model: nn.Module, x: Tensor, target: Tensor, n: int, seed: int) -> Tensor:
        budget = n * x.shape[1]

        def predict(rows: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model(torch.as_tensor(rows, dtype=torch.float32)).cpu().numpy()

        background = np.zeros((1, x.shape[1]), dtype=np.float32)
        x, target = x.cpu(), target.cpu()  # SHAP works on host arrays
        picks = np.arange(x.shape[0]), target.numpy()
        if method == "PermutationExplainer":
            masker = shap.maskers.Independent(background)
            explainer = shap.PermutationExplainer(predict, masker, seed=seed)
            values = explainer(x.numpy(), max_evals=budget, silent=True).values  # (N, d, 3)
            return torch.tensor(values[picks[0], :, picks[1]])
        np.random.seed(seed)
        explainer = shap.KernelExplainer(predict, background)
        # l1_reg=False: the default feature selection zeroes features at small budgets
        values = explainer.shap_values(x.numpy(), nsamples=budget, l1_reg=False, silent=True)
        return torch.tensor(np.asarray(values)[picks[0], :, picks[1]])

    return explain


def evaluate(
    name: str,
    explain: Explainer,
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    exact: Tensor,
    budgets: tuple[int, ...],
    seeds: int,
) -> dict[int, tuple[float, float, float]]:
    """AE, ACC (means over seeds) and explanations per second, per budget."""
    explain(model, x[:2], target[:2], budgets[0], 0)  # warm-up: first calls build caches
    results = {}
    for n in budgets:
        errors, accuracies, seconds = [], [], []
        for seed in range(seeds):
            start = time.perf_counter()
            estimate = explain(model, x, target, n, seed).to(torch.float64)
            seconds.append(time.perf_counter() - start)
            errors.append(absolute_error(estimate, exact).mean().item())
            accuracies.append(ranking_accuracy(estimate, exact).mean().item())
        results[n] = (
            statistics.mean(errors),
            statistics.mean(accuracies),
            x.shape[0] / statistics.median(seconds),
        )
        print(
            f"  {name:32s} N={n:3d}  AE {results[n][0]:.4f}  ACC {results[n][1]:.3f}  "
            f"{results[n][2]:9.1f} expl/s",
            flush=True,
        )
    return results


def eta_share(model: nn.Module, x: Tensor, target: Tensor, repeats: int = 5) -> tuple[float, float]:
    """Seconds of eta alone and of a whole SHEAR call at N = 16, medians."""
    shear = Shear(model)
    eta_times, total_times = [], []
    for seed in range(repeats):
        start = time.perf_counter()
        shear.cross_contributions(x, target=target)
        eta_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        shear.attribute(
            x, target=target, n_samples=16, generator=torch.Generator().manual_seed(seed)
        )
        total_times.append(time.perf_counter() - start)
    return statistics.median(eta_times), statistics.median(total_times)


def relu_cooperators(wines: int, seeds: int) -> None:
    """SHEAR on a ReLU MLP: which cooperators does a zero Hessian leave us?"""
    model, x = train_wine_mlp(nn.ReLU)
    x = x[:wines].double()
    model = model.double()
    with torch.no_grad():
        target = model(x).argmax(1)
    exact = ExactShapley(model).attribute(x, target=target)
    d = x.shape[1]
    print("\nReLU MLP (its Hessian is zero): SHEAR's AE by choice of cooperators")
    game, _ = prepare_game(model, x, target=target)
    for n in (8, 16, 32):
        m = int(math.log2(n)) - 1
        rows = {"gradient fallback (auto)": [], "lowest index (zero Hessian)": [], "random": []}
        for seed in range(seeds):
            generator = torch.Generator().manual_seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for label, kind in (
                    ("gradient fallback (auto)", "auto"),
                    ("lowest index (zero Hessian)", "hessian"),
                ):
                    estimate = Shear(model).attribute(
                        x,
                        target=target,
                        n_samples=n,
                        cross_contribution=kind,
                        generator=torch.Generator().manual_seed(seed),
                    )
                    rows[label].append(absolute_error(estimate, exact).mean().item())
            scores = torch.rand(x.shape[0], d, d, generator=generator, dtype=torch.float64)
            plan = shear_coalitions(select_cooperators(scores, m), True, generator)
            example = torch.arange(x.shape[0]).repeat_interleave(plan[0].numel() // d)
            values = game.evaluate_rows(example, plan.reshape(-1, d)).view(*plan.shape[:-1])
            rows["random"].append(absolute_error(shear_estimates(values), exact).mean().item())
        summary = "  ".join(f"{k} {statistics.mean(v):.4f}" for k, v in rows.items())
        print(f"  N={n:3d}  {summary}")


def plot(results: dict[str, dict[int, tuple[float, float, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, per_budget in results.items():
        budgets = sorted(per_budget)
        ae = [per_budget[n][0] for n in budgets]
        acc = [per_budget[n][1] for n in budgets]
        speed = [per_budget[n][2] for n in budgets]
        style = "o-" if name.startswith("ours") else "s--"
        axes[0].plot(budgets, ae, style, label=name)
        axes[1].plot(budgets, acc, style, label=name)
        axes[2].plot(speed, ae, style, label=name)
    axes[0].set(xscale="log", yscale="log", xlabel="evaluations per feature N", ylabel="AE")
    axes[1].set(xscale="log", xlabel="evaluations per feature N", ylabel="ranking ACC")
    axes[2].set(xscale="log", yscale="log", xlabel="explanations per second", ylabel="AE")
    for axis in axes:
        axis.set_xticks([], minor=True)
        axis.grid(alpha=0.3)
    axes[0].set_xticks(list(BUDGETS), [str(n) for n in BUDGETS])
    axes[1].set_xticks(list(BUDGETS), [str(n) for n in BUDGETS])
    axes[2].legend(fontsize=7)
    figure.suptitle("Wine, softplus MLP: accuracy against budget and throughput")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"\nplot saved to {path}")


def print_tables(
    results: dict[str, dict[int, tuple[float, float, float]]],
    budgets: tuple[int, ...],
    markdown: bool,
) -> None:
    """The AE, ranking ACC and explanations/s tables, as text or as markdown."""
    titles = (
        "AE (sum over features of |estimate - exact|, mean over wines)",
        "ranking ACC",
        "explanations per second (SHEAR includes eta)",
    )
    formats = ("{:.3f}", "{:.3f}", "{:,.0f}") if markdown else ("{:9.4f}", "{:9.3f}", "{:9.1f}")
    for column, (title, form) in enumerate(zip(titles, formats)):
        print(f"\n{title}")
        if markdown:
            header = [title.split(" (")[0], *(f"N={n}" for n in budgets)]
            rows = [
                [name, *(form.format(per_budget[n][column]) for n in budgets)]
                for name, per_budget in results.items()
            ]
            print(markdown_table(header, rows, [False] + [True] * len(budgets)))
            continue
        if column == 0:
            print("  " + " ".join(f"{'N=' + str(n):>9s}" for n in budgets) + "  method")
        for name, per_budget in results.items():
            print(
                "  " + " ".join(form.format(per_budget[n][column]) for n in budgets) + f"  {name}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wines", type=int, default=40, help="held-out wines explained")
    parser.add_argument("--seeds", type=int, default=3, help="repetitions averaged")
    parser.add_argument("--plot", default="shear_accuracy.png")
    parser.add_argument("--quick", action="store_true", help="N in {8, 16}, 10 wines, 1 seed")
    add_device_argument(parser)
    add_markdown_argument(parser)
    args = parser.parse_args()
    use_device(args.device)
    budgets = (8, 16) if args.quick else BUDGETS
    wines, seeds = (10, 1) if args.quick else (args.wines, args.seeds)
    torch.set_num_threads(min(2, torch.get_num_threads()))

    model, x = train_wine_mlp(nn.Softplus)
    x = x[:wines]
    with torch.no_grad():
        target = model(x).argmax(1)
    exact = ExactShapley(model).attribute(x, target=target).to(torch.float64)
    print(f"wine, softplus MLP 13-64-64-3, {wines} wines, {seeds} seed(s), exact Shapley as truth")
    shap_method("PermutationExplainer")(model, x[:2], target[:2], 8, 0)  # warm-up (numba)

    contenders: dict[str, Explainer] = {
        "ours SHEAR": ours("SHEAR"),
        "ours permutation": ours("permutation"),
        "ours antithetic permutation": ours("antithetic permutation"),
        "ours paired KernelSHAP": ours("kernel"),
        "Captum ShapleyValueSampling": captum_method("ShapleyValueSampling"),
        "Captum KernelShap": captum_method("KernelShap"),
        "SHAP PermutationExplainer": shap_method("PermutationExplainer"),
        "SHAP KernelExplainer": shap_method("KernelExplainer"),
    }
    results = {
        name: evaluate(name, explain, model, x, target, exact, budgets, seeds)
        for name, explain in contenders.items()
    }

    print_tables(results, budgets, args.markdown)

    eta_seconds, total_seconds = eta_share(model, x, target)
    print(
        f"\nSHEAR at N=16: eta {eta_seconds * 1e3:.1f} ms of {total_seconds * 1e3:.1f} ms "
        f"({100 * eta_seconds / total_seconds:.0f}%); without eta "
        f"{wines / (total_seconds - eta_seconds):.1f} expl/s, with it "
        f"{wines / total_seconds:.1f} expl/s"
    )
    shear_ae = results["ours SHEAR"][16][0]
    for reference in ("ours antithetic permutation", "SHAP PermutationExplainer"):
        print(
            f"AE ratio at N=16: SHEAR / {reference} = "
            f"{shear_ae / results[reference][16][0]:.2f} (paper: about 0.43)"
        )
    relu_cooperators(wines, seeds)
    plot(results, args.plot)


if __name__ == "__main__":
    main()
