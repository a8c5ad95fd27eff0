"""Shapley estimators against SHAP, shapiq and Captum at equal evaluations and equal wall time.

By default four models the estimators' defaults were not tuned on (issue 20),
trained in-process on scikit-learn's bundled data (no download): a Friedman
MLP (16 features, 5 informative) with ReLU and with SiLU, the wine MLP (13
features, ReLU) and a CNN on digits upsampled to 28x28, explained on 16
patches of 7x7 pixels. ``--models`` also runs the earlier benchmark's six
(wine softplus, Friedman GELU, digits SiLU on 2x2 patches, and their ReLU
twins). Peers: SHAP's permutation and kernel explainers, shapiq 1.4's
kADDSHAP (order 2), KernelSHAP, UnbiasedKernelSHAP (each with the pairing
trick), SVARM, permutation, stratified and Owen sampling (SPEX with
``--spex``, under a time limit), and Captum's two samplers. The row
"default" is ``PairedKernelShap()`` with no option: what a user gets.

Each explicand is a game over its ``d`` features (``v(z) = f(b + z * (x - b))``
expanded through the feature mask, ``b`` the training mean or zeros), given to
every method as the same model of a 0/1 vector, wrapped to count the rows it
evaluates; exact Shapley values (all ``2^d`` coalitions) are the truth.

Budgets: ``4 d``, 256, 1,024 and 4,096 evaluations per explicand. Ours take
``budget=`` (derivatives counted as forward equivalents: 4 per Hessian-vector
product, 3 per gradient); the peers are given the count that meets the
budget (SHAP ``max_evals``/``nsamples``, shapiq ``budget``, Captum
``n_samples`` from its cost per sample), and the evaluations they actually
made are printed. Error: relative L1 error ``sum|phi - exact| / sum|exact|``
per explicand, mean over explicands and seeds. Wall time per explanation
includes derivatives. The ratio column divides our best error by the best
peer's (below 1: ours wins). The equal-time table gives the best error each
side reached within a wall time per explanation (model calls included; the
model's own cost per row is printed per model). "budget spent" is the rows the
model saw over ``min(budget, 2^d)``. Writes ``benchmarks/estimators.png``
(error against evaluations) and ``estimators_time.png`` (error against wall
time), log-log, and the figures in ``estimators.json``.

Run: ``python benchmarks/estimators.py [--quick] [--device cpu] [--explicands 10] [--seeds 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator

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


def digits28(act: type[nn.Module]) -> tuple[nn.Module, Tensor, Tensor, Tensor, bool]:
    """Digits upsampled to 28x28 (bilinear), a small CNN, explained on 16 patches of 7x7."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    small = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    x_t = nn.functional.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2),
        act(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        act(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    )
    _train(model, x_t, torch.tensor(y), nn.functional.cross_entropy, 150)
    rows = torch.arange(28)
    mask = ((rows[:, None] // 7) * 4 + rows[None, :] // 7).view(1, 1, 28, 28)
    return model, x_t, torch.zeros(1, 1, 28, 28), mask, True


#: the models of issue 20's comparison, none of which the estimators' defaults were
#: tuned on (the six below are the earlier benchmark's: --models selects them)
HELD_OUT = ("Friedman ReLU", "Friedman SiLU", "wine ReLU", "digits28 CNN")

MODELS = {
    "Friedman SiLU": (friedman, nn.SiLU, False),
    "digits28 CNN": (digits28, nn.ReLU, True),
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


#: shapiq approximators run with the pairing trick (its strongest setting)
PAIRED = ("KernelSHAP", "SVARM", "kADDSHAP", "UnbiasedKernelSHAP")


def shapiq_method(kind: str) -> Method:
    import shapiq

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        options: dict[str, object] = {"pairing_trick": True} if kind in PAIRED else {}
        if kind == "kADDSHAP":
            options["max_order"] = 2  # its order-two surrogate; singletons are the SV
        if kind in ("SPEX", "ProxySPEX"):
            options.update(index="SV", max_order=1)
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


#: the class a user gets with no option: what the "default" rows report
DEFAULT = "ours PairedKernelShap() default"
OURS: dict[str, Method] = {
    DEFAULT: ours(PairedKernelShap),
    "ours antithetic permutation": ours(ShapleySampling),
    "ours paired kernel": ours(PairedKernelShap, estimator="kernel"),
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
    "shapiq kADDSHAP": shapiq_method("kADDSHAP"),
    "shapiq KernelSHAP": shapiq_method("KernelSHAP"),
    "shapiq UnbiasedKernelSHAP": shapiq_method("UnbiasedKernelSHAP"),
    "shapiq OwenSamplingSV": shapiq_method("OwenSamplingSV"),
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


def forward_cost(game: FeatureGame, d: int, rows: int = 256, repeats: int = 5) -> float:
    """Seconds per row of the bare model on ``rows`` coalitions (the best of ``repeats``)."""
    z = (torch.rand(rows, d, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    z = z.to(game.x.device)
    best = math.inf
    with torch.no_grad():
        game(z)
        for _ in range(repeats):
            start = time.perf_counter()
            game(z)
            best = min(best, time.perf_counter() - start)
    game.rows = 0
    return best / rows


@contextlib.contextmanager
def time_limit(seconds: int | None) -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread after ``seconds`` (None: no limit)."""
    if seconds is None:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


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
    parser.add_argument("--models", default=",".join(HELD_OUT))
    parser.add_argument(
        "--spex",
        action="store_true",
        help="also run shapiq's SPEX (its run time varies wildly: 60 s per model and budget)",
    )
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
        plot_wall_time(results, args.plot.rsplit(".", 1)[0] + "_time.png")
        return
    explicands = 2 if args.quick else args.explicands
    seeds = 1 if args.quick else args.seeds
    if args.quick and args.models == ",".join(HELD_OUT):
        args.models = "Friedman SiLU,Friedman ReLU"
    device = torch.device(args.device)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    methods = {**OURS, **PEERS}
    if args.spex:
        methods["shapiq SPEX"] = shapiq_method("SPEX")
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
        per_row = forward_cost(games[0], d)
        print(
            f"\n## {name} (d = {d}); the model costs {1e6 * per_row:.2f} us per row in batches "
            f"of 256 (1,024 rows: {1024 * per_row * 1e3:.1f} ms); d HVPs cost {ratio:.1f}x the "
            "time of d forward rows"
        )
        table: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for method in methods.values():  # one-time costs (imports, JIT) left untimed
            with contextlib.suppress(ValueError, TimeoutError), time_limit(60):
                method(games[0], d, budgets[1], 0)
        for budget in budgets:
            for label, method in methods.items():
                if label in SLOW and (budget > 1024 or args.quick) and not args.all:
                    continue  # minutes per model, and never near the best
                errors, evals, times, spent = [], [], [], []
                for seed in range(seeds):
                    for game, truth in zip(games, truths):
                        game.rows = game.reported = 0
                        start = time.perf_counter()
                        try:
                            with time_limit(60 if "SPEX" in label else None):
                                phi = method(game, d, budget, seed).to(truth.device).double()
                        except (ValueError, TimeoutError):
                            break  # budget too small for this method, or SPEX ran over
                        times.append(time.perf_counter() - start)
                        spent.append(game.rows / min(budget, 2**d))
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
                        float(np.min(spent)),
                    ]
        results[name] = table
        report(name, table, budgets)
        report_wall_time(table)
    plot(results, args.plot)
    plot_wall_time(results, args.plot.rsplit(".", 1)[0] + "_time.png")
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
                error, evals, ms = row[budget][:3]
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
    if DEFAULT in table:
        cells = []
        for budget in budgets:
            peers_best = min(
                (row[budget][0], label)
                for label, row in table.items()
                if not label.startswith("ours") and budget in row
            )
            if budget in table[DEFAULT]:
                cells.append(f"{table[DEFAULT][budget][0] / peers_best[0]:.2f}")
            else:
                cells.append("-")
        print("| **default ours / best peer** | " + " | ".join(cells) + " |")
    # budget spent: distinct rows the model saw over min(budget, 2^d), worst explicand
    spent = [
        f"{label[5:]} {min(row[b][3] for b in row if len(row[b]) > 3):.2f}"
        for label, row in table.items()
        if label.startswith("ours") and any(len(v) > 3 for v in row.values())
    ]
    print("budget spent (rows seen / min(budget, 2^d), worst case): " + "; ".join(spent))


#: wall-time thresholds (ms per explanation) of the equal-time comparison
WALL_TIMES = (5, 10, 20, 50, 100, 200, 500, 1000)


def best_within(table: dict[str, dict[int, list[float]]], labels: list[str], ms: float) -> float:
    """The lowest mean error any of ``labels`` reached within ``ms`` per explanation."""
    errors = [cell[0] for label in labels for cell in table[label].values() if cell[2] <= ms]
    return min(errors) if errors else math.inf


def report_wall_time(table: dict[str, dict[int, list[float]]]) -> None:
    """Error at equal wall time: the best error each side reached within a time per explanation."""
    ours = [label for label in table if label.startswith("ours")]
    peers = [label for label in table if not label.startswith("ours")]
    default = [DEFAULT] if DEFAULT in table else []
    print("| within ms per explanation | " + " | ".join(str(t) for t in WALL_TIMES) + " |")
    print("|" + "---|" * (len(WALL_TIMES) + 1))
    for name, labels in (("default ours", default), ("best ours", ours), ("best peer", peers)):
        cells = [f"{best_within(table, labels, t):.2e}" for t in WALL_TIMES]
        print(f"| {name} | " + " | ".join(cells).replace("inf", "-") + " |")
    ratios = []
    for t in WALL_TIMES:
        mine, theirs = best_within(table, default, t), best_within(table, peers, t)
        ratios.append(f"{mine / theirs:.2f}" if math.isfinite(mine * theirs) else "-")
    print("| **default / best peer** | " + " | ".join(ratios) + " |")


def colours(ours: list[str], peers: list[str]) -> dict[str, object]:
    """One colour per method: ours from tab20 (solid lines), peers from tab20b (dashed)."""
    import matplotlib.pyplot as plt

    table = {label: plt.get_cmap("tab20")(i % 20) for i, label in enumerate(ours)}
    table.update({label: plt.get_cmap("tab20b")((3 * i) % 20) for i, label in enumerate(peers)})
    return table


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
    colour = colours(ours, peers)
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
    figure.tight_layout()
    figure.legend(handles, names_shown, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    figure.savefig(path, dpi=110, bbox_inches="tight")


def plot_wall_time(results: dict[str, dict[str, dict[int, list[float]]]], path: str) -> None:
    """Error against wall time per explanation, one panel per model (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    columns = min(2, len(names))
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    labels = list(dict.fromkeys(label for table in results.values() for label in table))
    colour = colours(
        [label for label in labels if label.startswith("ours")],
        [label for label in labels if not label.startswith("ours")],
    )
    for axis, name in zip(axes.flat, names):
        for label in labels:
            if label not in results[name]:
                continue
            row = results[name][label]
            budgets = sorted(row)
            mine = label.startswith("ours")
            axis.loglog(
                [row[b][2] for b in budgets],
                [row[b][0] for b in budgets],
                "-" if mine else "--",
                color=colour[label],
                marker="o" if mine else "s",
                markersize=3,
                linewidth=2.4 if label == DEFAULT else 1.4 if mine else 1.0,
                label=label,
            )
        axis.set_title(name)
        axis.set_xlabel("wall time per explanation (ms, model calls included)")
        axis.set_ylabel("relative L1 error")
        axis.grid(True, which="both", alpha=0.3)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    handles, shown = axes.flat[0].get_legend_handles_labels()
    figure.tight_layout()
    figure.legend(handles, shown, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    figure.savefig(path, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
