"""Shapley estimators against SHAP, shapiq and Captum at equal model evaluations.

Six models trained in-process on scikit-learn's bundled data (no download):
the wine MLP (13 features, softplus), a Friedman MLP (16 features, 5
informative, GELU) and a digits CNN explained on 16 patches of 2x2 pixels
(SiLU), and the same three with ReLU. Each explicand is a game over its ``d``
features (``v(z) = f(b + z * (x - b))`` expanded through the feature mask,
``b`` the training mean or zeros), given to every method as the same model of
a 0/1 vector, wrapped to count the rows it evaluates; exact Shapley values
(all ``2^d`` coalitions) are the truth.

Budgets: ``4 d``, 256, 1,024 and 4,096 evaluations per explicand. Ours take
``budget=`` (derivatives counted as forward equivalents: 4 per Hessian-vector
product, 3 per gradient); the peers are given the count that meets the
budget (SHAP ``max_evals``/``nsamples``, shapiq ``budget``, Captum
``n_samples`` from its cost per sample), and the evaluations they actually
made are printed. Error: relative L1 error ``sum|phi - exact| / sum|exact|``
per explicand, mean over explicands and seeds. Wall time per explanation
includes derivatives. The ratio column divides our best error by the best
peer's (below 1: ours wins). Writes ``benchmarks/estimators.png`` (log-log).

Run: ``python benchmarks/estimators.py [--quick] [--device cpu] [--explicands 10] [--seeds 3]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from captum_graphshap import BayesShap, PairedKernelShap, ShapleySampling
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shear import Shear
from captum_graphshap.plans.cross_contributions import hessian_feature_matrix

# ------------------------------------------------------------------ models


def _train(model: nn.Module, x: Tensor, y: Tensor, loss: Callable, steps: int) -> nn.Module:
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(steps):
        optimiser.zero_grad()
        loss(model(x), y).backward()
        optimiser.step()
    return model.eval()


def wine(act: type[nn.Module]) -> tuple[nn.Module, Tensor, Tensor, Tensor, bool]:
    from sklearn.datasets import load_wine

    data = load_wine()
    x = (data.data - data.data.mean(0)) / data.data.std(0)
    x_t, y_t = torch.tensor(x, dtype=torch.float32), torch.tensor(data.target)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(13, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 3))
    _train(model, x_t, y_t, nn.functional.cross_entropy, 300)
    return model, x_t, torch.zeros(1, 13), torch.arange(13)[None], True


def friedman(act: type[nn.Module]) -> tuple[nn.Module, Tensor, Tensor, Tensor, bool]:
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=2000, n_features=16, noise=0.1, random_state=0)
    x_t = torch.tensor(x, dtype=torch.float32)
    y_t = torch.tensor(y, dtype=torch.float32)[:, None]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 1))
    _train(model, x_t, y_t, nn.functional.mse_loss, 600)
    return model, x_t, x_t.mean(0, keepdim=True), torch.arange(16)[None], False


def digits(act: type[nn.Module]) -> tuple[nn.Module, Tensor, Tensor, Tensor, bool]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x_t = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        act(),
        nn.Conv2d(8, 16, 3, padding=1),
        act(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 16, 10),
    )
    _train(model, x_t, torch.tensor(y), nn.functional.cross_entropy, 200)
    rows = torch.arange(8)
    mask = ((rows[:, None] // 2) * 4 + rows[None, :] // 2).view(1, 1, 8, 8)
    return model, x_t, torch.zeros(1, 1, 8, 8), mask, True


MODELS = {
    "wine softplus": (wine, nn.Softplus, True),
    "Friedman GELU": (friedman, nn.GELU, True),
    "digits SiLU": (digits, nn.SiLU, True),
    "wine ReLU": (wine, nn.ReLU, False),
    "Friedman ReLU": (friedman, nn.ReLU, False),
    "digits ReLU": (digits, nn.ReLU, False),
}


class FeatureGame(nn.Module):
    """``z (n, d)`` in [0, 1] -> the target output at ``b + z (x - b)``; counts rows."""

    def __init__(self, model: nn.Module, x: Tensor, base: Tensor, mask: Tensor, target: int):
        super().__init__()
        self.model, self.target = model, target
        self.x, self.base, self.mask = x, base, mask.flatten()
        self.rows = 0
        self.reported = 0

    def forward(self, z: Tensor) -> Tensor:
        if not torch.is_grad_enabled() or not z.requires_grad:
            self.rows += z.shape[0]
        weight = z[:, self.mask].view(z.shape[0], *self.x.shape[1:]).to(self.x.dtype)
        return self.model(self.base + weight * (self.x - self.base))[:, self.target]

    def numpy(self, z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            rows = torch.as_tensor(
                np.atleast_2d(np.asarray(z, dtype=np.float32)), device=self.x.device
            )
            return self(rows).double().cpu().numpy()


# ------------------------------------------------------------------ methods

Method = Callable[[FeatureGame, int, int, int], Tensor]


def ours(cls: type, **options: object) -> Method:
    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        one = torch.ones(1, d, device=game.x.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            phi, evaluations = cls(game).attribute(
                one,
                torch.zeros_like(one),
                budget=budget,
                generator=generator,
                return_evaluations=True,
                **options,
            )
            # the library's count: forward rows plus derivatives as forward equivalents
            game.reported = int(evaluations[0])
            return phi[0]

    return run


def shap_method(kind: str) -> Method:
    import shap

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        background = np.zeros((1, d))
        one = np.ones((1, d))
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "permutation":
                explainer = shap.PermutationExplainer(game.numpy, background, seed=seed)
                values = explainer(one, max_evals=budget, silent=True).values[0]
            else:
                explainer = shap.KernelExplainer(game.numpy, background)
                values = explainer.shap_values(one, nsamples=budget, l1_reg=False, silent=True)[0]
        return torch.as_tensor(np.asarray(values, dtype=np.float64))

    return run


def shapiq_method(kind: str) -> Method:
    import shapiq

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        options = {"pairing_trick": True} if kind in ("KernelSHAP", "SVARM") else {}
        approximator = getattr(shapiq, kind)(n=d, random_state=seed, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = approximator.approximate(
                budget=budget, game=lambda z: game.numpy(z.astype(np.float32))
            )
        return torch.tensor([float(result[(i,)]) for i in range(d)], dtype=torch.float64)

    return run


def captum_method(kind: str) -> Method:
    from captum.attr import KernelShap, ShapleyValueSampling

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        torch.manual_seed(seed)
        one = torch.ones(1, d, device=game.x.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "ShapleyValueSampling":  # 1 + d evaluations per permutation
                count = max(1, (budget - 1) // d)
                return (
                    ShapleyValueSampling(game)
                    .attribute(
                        one, torch.zeros_like(one), n_samples=count, perturbations_per_eval=64
                    )[0]
                    .double()
                )
            return (
                KernelShap(game)
                .attribute(
                    one, torch.zeros_like(one), n_samples=budget, perturbations_per_eval=512
                )[0]
                .double()
            )

    return run


OURS: dict[str, Method] = {
    "ours antithetic permutation": ours(ShapleySampling),
    "ours paired kernel": ours(PairedKernelShap),
    "ours stratified kernel": ours(PairedKernelShap, estimator="stratified"),
    "ours cubic (regression-adjusted)": ours(PairedKernelShap, estimator="cubic"),
    "ours regression MC (unbiased)": ours(PairedKernelShap, estimator="regression_mc"),
    "ours permutation + Taylor CV": ours(
        ShapleySampling, antithetic=False, control_variate="taylor"
    ),
    "ours antithetic + Taylor CV": ours(ShapleySampling, control_variate="taylor"),
    "ours Shear (regression, eta triples)": ours(Shear),
    "ours Shear (regression MC, eta triples)": ours(Shear, estimator="regression_mc"),
    "ours Shear (paper Eq. 14)": ours(Shear, estimator="paper"),
    "ours BayesShap": ours(BayesShap),
}
PEERS: dict[str, Method] = {
    "SHAP Permutation": shap_method("permutation"),
    "SHAP Kernel": shap_method("kernel"),
    "shapiq KernelSHAP": shapiq_method("KernelSHAP"),
    "shapiq PermutationSamplingSV": shapiq_method("PermutationSamplingSV"),
    "shapiq SVARM": shapiq_method("SVARM"),
    "shapiq StratifiedSamplingSV": shapiq_method("StratifiedSamplingSV"),
    "Captum ShapleyValueSampling": captum_method("ShapleyValueSampling"),
    "Captum KernelShap": captum_method("KernelShap"),
}


#: peers skipped beyond 1,024 evaluations (and in --quick) unless --all
SLOW = ("shapiq StratifiedSamplingSV",)

# ------------------------------------------------------------------ run


def derivative_ratio(game: FeatureGame, d: int, repeats: int = 3) -> float:
    """Time of the ``d`` Hessian-vector products over the time of ``d`` forward rows."""
    one = torch.ones(1, d, device=game.x.device)
    mask = (torch.arange(d, device=one.device)[None],)
    rows = torch.ones(d, d, device=one.device)

    def hvps() -> None:
        hessian_feature_matrix(game, (one,), (one,), mask, d)

    def forwards() -> None:
        with torch.no_grad():
            game(rows)

    def best(fn: Callable[[], None]) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(hvps) / best(forwards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the two Friedman models, 2 explicands, 1 seed, budgets 4d/256/1024",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--all", action="store_true", help="run the slow peers at every budget")
    parser.add_argument("--explicands", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--plot", default="benchmarks/estimators.png")
    parser.add_argument(
        "--replot", action="store_true", help="redraw the plot from the .json of a run"
    )
    args = parser.parse_args()
    if args.replot:
        with open(args.plot.rsplit(".", 1)[0] + ".json") as handle:
            saved = json.load(handle)
        results = {
            name: {label: {int(b): v for b, v in row.items()} for label, row in table.items()}
            for name, table in saved.items()
        }
        plot(results, args.plot)
        return
    explicands = 2 if args.quick else args.explicands
    seeds = 1 if args.quick else args.seeds
    if args.quick and args.models == ",".join(MODELS):
        args.models = "Friedman GELU,Friedman ReLU"
    device = torch.device(args.device)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    methods = {**OURS, **PEERS}
    results: dict[str, dict[str, dict[int, list[float]]]] = {}
    print(
        f"{explicands} explicands x {seeds} seeds per model; error = relative L1 error "
        "against exact Shapley (mean); evals = model rows per explanation (mean; "
        "derivatives as forward equivalents); time = ms per explanation"
    )
    for name in args.models.split(","):
        build, act, _ = MODELS[name]
        model, data, base, mask, classify = build(act)
        model, data, base, mask = (
            model.to(device),
            data.to(device),
            base.to(device),
            mask.to(device),
        )
        d = int(mask.max()) + 1
        budgets = [4 * d, 256, 1024] if args.quick else [4 * d, 256, 1024, 4096]
        games, truths = [], []
        for index in range(explicands):
            x = data[100 + 7 * index : 101 + 7 * index]
            target = int(model(x).argmax()) if classify else 0
            game = FeatureGame(model, x, base, mask, target)
            one = torch.ones(1, d, device=device)
            with torch.no_grad():
                truths.append(ExactShapley(game).attribute(one, torch.zeros_like(one))[0].double())
            games.append(game)
        ratio = derivative_ratio(games[0], d)
        print(f"\n## {name} (d = {d}); d HVPs cost {ratio:.1f}x the time of d forward rows")
        table: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for budget in budgets:
            for label, method in methods.items():
                if label in SLOW and (budget > 1024 or args.quick) and not args.all:
                    continue  # minutes per model, and never near the best
                errors, evals, times = [], [], []
                for seed in range(seeds):
                    for game, truth in zip(games, truths):
                        game.rows = game.reported = 0
                        start = time.perf_counter()
                        try:
                            phi = method(game, d, budget, seed).to(truth.device).double()
                        except ValueError:
                            break  # budget too small for this method
                        times.append(time.perf_counter() - start)
                        # ours: n_evaluations (derivatives included, checked >= the
                        # wrapper's rows); peers: the rows the wrapper counted
                        evals.append(
                            max(game.reported, game.rows) if label.startswith("ours") else game.rows
                        )
                        errors.append(float((phi - truth).abs().sum() / truth.abs().sum()))
                if errors:
                    table[label][budget] = [
                        float(np.mean(errors)),
                        float(np.mean(evals)),
                        1e3 * float(np.mean(times)),
                    ]
        results[name] = table
        report(name, table, budgets)
    plot(results, args.plot)
    with open(args.plot.rsplit(".", 1)[0] + ".json", "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"\nplot: {args.plot} (figures: the .json beside it; --replot redraws from it)")


def report(name: str, table: dict[str, dict[int, list[float]]], budgets: list[int]) -> None:
    header = "| method | " + " | ".join(f"{b} evals: error (evals, ms)" for b in budgets) + " |"
    print(header)
    print("|" + "---|" * (len(budgets) + 1))
    for label, row in table.items():
        cells = []
        for budget in budgets:
            if budget in row:
                error, evals, ms = row[budget]
                cells.append(f"{error:.2e} ({evals:.0f}, {ms:.0f})")
            else:
                cells.append("-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for budget in budgets:
        ours_best = min(
            (row[budget][0], label)
            for label, row in table.items()
            if label.startswith("ours") and budget in row
        )
        peers_best = min(
            (row[budget][0], label)
            for label, row in table.items()
            if not label.startswith("ours") and budget in row
        )
        cells.append(f"{ours_best[0] / peers_best[0]:.2f} ({ours_best[1][5:]} / {peers_best[1]})")
    print("| **best ours / best peer** | " + " | ".join(cells) + " |")


def plot(results: dict[str, dict[str, dict[int, list[float]]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    labels = list(dict.fromkeys(label for table in results.values() for label in table))
    ours = [label for label in labels if label.startswith("ours")]
    peers = [label for label in labels if not label.startswith("ours")]
    # ours: solid lines in warm/dark colours; peers: dashed, grey-blue family
    colour = {label: plt.get_cmap("tab20")(i % 20) for i, label in enumerate(ours)}
    colour.update({label: plt.get_cmap("Dark2")(i % 8) for i, label in enumerate(peers)})
    for axis, name in zip(axes.flat, names):
        for label in ours + peers:
            if label not in results[name]:
                continue
            row = results[name][label]
            budgets = sorted(row)
            mine = label.startswith("ours")
            axis.loglog(
                [row[b][1] for b in budgets],
                [row[b][0] for b in budgets],
                "-" if mine else "--",
                color=colour[label],
                marker="o" if mine else "s",
                markersize=3,
                linewidth=1.6 if mine else 1.0,
                label=label,
            )
        axis.set_title(name)
        axis.set_xlabel("model evaluations per explanation")
        axis.set_ylabel("relative L1 error")
        axis.grid(True, which="both", alpha=0.3)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    handles, names_shown = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, names_shown, loc="lower center", ncol=4, fontsize=8)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
