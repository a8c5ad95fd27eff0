"""Shapley estimators against shapiq, SHAP and Captum at equal evaluations and equal wall time.

Models (trained in-process on scikit-learn's bundled data, seeded, no
download), by default four the estimators were not tuned on (training seed 1,
other data draws and explicands than the legacy set): a Friedman MLP (16
features, 5 informative) with ReLU and with SiLU, a wine MLP (13 features,
ReLU), a CNN on the digits resized to 28 x 28, explained on 16 patches of
7 x 7 pixels, and two families no estimator was tuned on: a LayerNorm GELU
MLP over 20 Friedman features and a 2-layer transformer over 14 token ids (a
synthetic sentiment-like task; a token's absence is the pad id). ``--legacy``
adds the six models the estimators were tuned on (wine softplus, Friedman
GELU, digits 8 x 8 SiLU, and their ReLU versions).
Each explicand is a game over its ``d`` features (``v(z) = f(b + z * (x - b))``
expanded through the feature mask, ``b`` the training mean or zeros), given to
every method as the same model of a 0/1 vector, wrapped to count the rows it
evaluates; exact Shapley values (``ExactShapley``, all ``2^d`` coalitions) are
the truth.

Budgets: ``4 d``, 256, 1,024 and 4,096 evaluations per explicand. Ours take
``budget=`` (derivatives counted as forward equivalents: 4 per Hessian-vector
product, 3 per gradient); the peers are given the count that meets the budget
(SHAP ``max_evals``/``nsamples``, shapiq ``budget``, Captum ``n_samples`` from
its cost per sample). Errors per explicand against exact: relative L1
``sum|phi - exact| / sum|exact|`` (the headline, as in earlier runs) and the
mean squared error ``mean (phi - exact)^2``; both are averaged over explicands
and seeds. Wall time per explanation (one explicand) includes the model's
calls; the model's bare forward time per row is printed and drawn in each
panel's title. "Spent" is the rows our classes actually evaluated over the
budget (the wrapper counts them; Shear's derivatives are not rows).

Peers: shapiq 1.4 ``kADDSHAP`` (order 2, paired and not), ``KernelSHAP`` (paired),
``UnbiasedKernelSHAP`` (paired), ``SVARM`` (paired), ``StratifiedSamplingSV``,
``OwenSamplingSV``, ``PermutationSamplingSV``; SHAP's ``PermutationExplainer``
and ``KernelExplainer``; Captum's ``ShapleyValueSampling`` and ``KernelShap``;
with ``--spex``, shapiq's ``SPEX`` and ``ProxySPEX`` (dropped for the rest of a
model once one call takes more than ``--spex-limit`` seconds, or when
``lightgbm`` is missing). Ours: ``PairedKernelShap()`` with no option (the
library's default, whatever it is), ``estimator="cubic"``,
``estimator="regression_mc"``, antithetic ``ShapleySampling``, ``Shear`` and
``BayesShap``.

Output: the tables (markdown, ready to paste), ``benchmarks/estimators.json``
and ``benchmarks/estimators.png`` (per model, error against evaluations on top
and against wall time below, log-log); ``--replot`` redraws the plot and
reprints the summary from the json.

Run: ``python benchmarks/estimators.py [--quick] [--threads 1] [--explicands 10] [--seeds 2]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

# ------------------------------------------------------------------ models

Built = tuple[nn.Module, Tensor, Tensor, Tensor, bool]


def _train(
    model: nn.Module, x: Tensor, y: Tensor, loss: Callable, steps: int, batch: int | None = None
) -> nn.Module:
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        rows = (
            slice(None) if batch is None else torch.randint(len(x), (batch,), generator=generator)
        )
        optimiser.zero_grad()
        loss(model(x[rows]), y[rows]).backward()
        optimiser.step()
    return model.eval()


def wine(act: type[nn.Module], seed: int) -> Built:
    from sklearn.datasets import load_wine

    data = load_wine()
    x = (data.data - data.data.mean(0)) / data.data.std(0)
    x_t, y_t = torch.tensor(x, dtype=torch.float32), torch.tensor(data.target)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(13, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 3))
    _train(model, x_t, y_t, nn.functional.cross_entropy, 300)
    return model, x_t, torch.zeros(1, 13), torch.arange(13)[None], True


def friedman(act: type[nn.Module], seed: int) -> Built:
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=2000, n_features=16, noise=0.1, random_state=seed)
    x_t = torch.tensor(x, dtype=torch.float32)
    y_t = torch.tensor(y, dtype=torch.float32)[:, None]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 1))
    _train(model, x_t, y_t, nn.functional.mse_loss, 600)
    return model, x_t, x_t.mean(0, keepdim=True), torch.arange(16)[None], False


def digits(act: type[nn.Module], seed: int) -> Built:
    """The legacy 8 x 8 digits CNN on 16 patches of 2 x 2 pixels."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x_t = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    torch.manual_seed(seed)
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


def digits28(act: type[nn.Module], seed: int, patch: int = 7, steps: int = 300) -> Built:
    """Digits resized to 28 x 28 (bilinear), a two-conv CNN trained ``steps`` steps,
    on ``(28 / patch)^2`` patches of ``patch x patch`` (16 of 7 x 7 by default)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    small = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    x_t = nn.functional.interpolate(small, size=28, mode="bilinear", align_corners=False)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        act(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        act(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    )
    # minibatches: full-batch steps on 1,797 images of 28 x 28 cost seconds each
    _train(model, x_t, torch.tensor(y), nn.functional.cross_entropy, steps, batch=128)
    rows = torch.arange(28)
    mask = ((rows[:, None] // patch) * (28 // patch) + rows[None, :] // patch).view(1, 1, 28, 28)
    return model, x_t, torch.zeros(1, 1, 28, 28), mask, True


def gelu_ln(act: type[nn.Module], seed: int) -> Built:
    """A normalised MLP (LayerNorm, then the activation) on a 20-feature Friedman task."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=2000, n_features=20, noise=0.1, random_state=seed)
    x_t = torch.tensor(x, dtype=torch.float32)
    y_t = torch.tensor(y, dtype=torch.float32)[:, None]
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(20, 64), nn.LayerNorm(64), act(), nn.Linear(64, 64), nn.LayerNorm(64), act(),
        nn.Linear(64, 1),
    )  # fmt: skip
    _train(model, x_t, y_t, nn.functional.mse_loss, 600)
    return model, x_t, x_t.mean(0, keepdim=True), torch.arange(20)[None], False


#: the token task: sequences of TOKEN_LENGTH ids below TOKEN_VOCAB, id 0 the pad
TOKEN_LENGTH, TOKEN_VOCAB = 14, 12


class TokenTransformer(nn.Module):
    """A transformer encoder over one-hot token ids ``(N, L, V)``: a one-hot blended
    with the pad's is an embedding blended, so 0/1 coalitions are token ids and the
    model stays differentiable (for Shear). Two layers over 14 positions here; the
    zoo draws other lengths, vocabularies and depths."""

    def __init__(
        self,
        act: type[nn.Module],
        length: int = TOKEN_LENGTH,
        vocab: int = TOKEN_VOCAB,
        layers: int = 2,
    ) -> None:
        super().__init__()
        width = 32
        self.embed = nn.Linear(vocab, width, bias=False)
        self.position = nn.Parameter(torch.randn(length, width) * 0.1)
        layer = nn.TransformerEncoderLayer(
            width, 4, 64, dropout=0.0, batch_first=True, activation=act()
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 2)

    def forward(self, one_hot: Tensor) -> Tensor:
        hidden = self.encoder(self.embed(one_hot) + self.position)
        return self.head(hidden.mean(dim=1))


def tokens(act: type[nn.Module], seed: int) -> Built:
    """A transformer over token ids (14 positions) on a synthetic sentiment-like task:
    ids 1-4 count for, 5-8 against, and id 9 right before a positive id doubles it."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TOKEN_VOCAB, (4000, TOKEN_LENGTH), generator=generator)
    positive = (ids >= 1) & (ids <= 4)
    negative = (ids >= 5) & (ids <= 8)
    boost = (ids[:, :-1] == 9) & positive[:, 1:]
    score = positive.sum(1) - negative.sum(1) + boost.sum(1)
    labels = (score > 0).long()
    x_t = nn.functional.one_hot(ids, TOKEN_VOCAB).float()
    torch.manual_seed(seed)
    model = TokenTransformer(act)
    _train(model, x_t, labels, nn.functional.cross_entropy, 400, batch=128)
    base = nn.functional.one_hot(torch.zeros(1, TOKEN_LENGTH, dtype=torch.long), TOKEN_VOCAB)
    mask = torch.arange(TOKEN_LENGTH)[None, :, None].expand(1, TOKEN_LENGTH, TOKEN_VOCAB)
    return model.eval(), x_t, base.float(), mask, True


#: name -> (builder, activation, training seed, first explicand row, row stride)
MODELS: dict[
    str, tuple[Callable[[type[nn.Module], int], Built], type[nn.Module], int, int, int]
] = {
    "Friedman ReLU": (friedman, nn.ReLU, 1, 50, 11),
    "Friedman SiLU": (friedman, nn.SiLU, 1, 50, 11),
    "wine ReLU": (wine, nn.ReLU, 1, 3, 17),
    "digits28 CNN": (digits28, nn.ReLU, 1, 50, 13),
    "Friedman20 LayerNorm GELU": (gelu_ln, nn.GELU, 2, 50, 11),
    "token transformer": (tokens, nn.GELU, 2, 50, 13),
}
LEGACY: dict[
    str, tuple[Callable[[type[nn.Module], int], Built], type[nn.Module], int, int, int]
] = {
    "legacy wine softplus": (wine, nn.Softplus, 0, 100, 7),
    "legacy Friedman GELU": (friedman, nn.GELU, 0, 100, 7),
    "legacy digits SiLU": (digits, nn.SiLU, 0, 100, 7),
    "legacy wine ReLU": (wine, nn.ReLU, 0, 100, 7),
    "legacy Friedman ReLU": (friedman, nn.ReLU, 0, 100, 7),
    "legacy digits ReLU": (digits, nn.ReLU, 0, 100, 7),
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


def forward_cost(game: FeatureGame, d: int, rows: int = 1024, repeats: int = 5) -> float:
    """The bare model's time per row (seconds), on a batch of ``rows`` random coalitions."""
    z = (torch.rand(rows, d, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    z = z.to(game.x.device)
    times = []
    with torch.no_grad():
        game(z)
        for _ in range(repeats):
            start = time.perf_counter()
            game(z)
            times.append(time.perf_counter() - start)
    return min(times) / rows


# ------------------------------------------------------------------ methods

Method = Callable[[FeatureGame, int, int, int], Tensor]


class InputGame(nn.Module):
    """A :class:`FeatureGame`'s target output on input-shaped rows, counted into the
    game: the model as a Captum user passes it, with ``inputs``, ``baselines`` and
    ``feature_mask``."""

    def __init__(self, game: FeatureGame) -> None:
        super().__init__()
        self.game = game

    def forward(self, x: Tensor) -> Tensor:
        if not torch.is_grad_enabled() or not x.requires_grad:
            self.game.rows += x.shape[0]
        return self.game.model(x)[:, self.game.target]


def ours(cls: type, *, on_inputs: bool = False, **options: object) -> Method:
    """Our attribution class ``cls`` on a game: on its ``d`` features as inputs, or
    (``on_inputs``) on the model's inputs with the feature mask, whose geometry the
    default's process reads (``plans/local_windows.py``)."""

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        one = torch.ones(1, d, device=game.x.device)
        model: nn.Module = game
        inputs, baselines, extra = one, torch.zeros_like(one), dict(options)
        if on_inputs:
            model, inputs, baselines = InputGame(game), game.x, game.base
            extra["feature_mask"] = game.mask.view(1, *game.x.shape[1:])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            phi, evaluations = cls(model).attribute(
                inputs,
                baselines,
                budget=budget,
                generator=generator,
                return_evaluations=True,
                **extra,
            )
            # the library's count: forward rows plus derivatives as forward equivalents
            game.reported = int(evaluations[0])
        if on_inputs:  # each element holds its feature's value: one per feature
            return phi.new_zeros(d).index_put_((game.mask,), phi[0].flatten())
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


def shapiq_method(kind: str, **options: object) -> Method:
    import shapiq

    def run(game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        approximator = getattr(shapiq, kind)(n=d, random_state=seed, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = approximator.approximate(
                budget=budget, game=lambda z: game.numpy(np.asarray(z, dtype=np.float32))
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


DEFAULT = "ours PairedKernelShap() default"
OURS: dict[str, Method] = {
    DEFAULT: ours(PairedKernelShap),
    "ours cubic": ours(PairedKernelShap, estimator="cubic"),
    "ours regression MC": ours(PairedKernelShap, estimator="regression_mc"),
    "ours antithetic permutation": ours(ShapleySampling),
    "ours Shear": ours(Shear),
    "ours BayesShap": ours(BayesShap),
}
PEERS: dict[str, Method] = {
    "shapiq kADDSHAP": shapiq_method("kADDSHAP", max_order=2, pairing_trick=True),
    "shapiq kADDSHAP unpaired": shapiq_method("kADDSHAP", max_order=2),
    "shapiq KernelSHAP": shapiq_method("KernelSHAP", pairing_trick=True),
    "shapiq UnbiasedKernelSHAP": shapiq_method("UnbiasedKernelSHAP", pairing_trick=True),
    "shapiq SVARM": shapiq_method("SVARM", pairing_trick=True),
    "shapiq StratifiedSamplingSV": shapiq_method("StratifiedSamplingSV"),
    "shapiq OwenSamplingSV": shapiq_method("OwenSamplingSV"),
    "shapiq PermutationSamplingSV": shapiq_method("PermutationSamplingSV"),
    "SHAP Permutation": shap_method("permutation"),
    "SHAP Kernel": shap_method("kernel"),
    "Captum ShapleyValueSampling": captum_method("ShapleyValueSampling"),
    "Captum KernelShap": captum_method("KernelShap"),
}
SPEX: dict[str, Method] = {
    "shapiq SPEX": shapiq_method("SPEX", index="SV", max_order=1),
    "shapiq ProxySPEX": shapiq_method("ProxySPEX", index="SV", max_order=1),
}

#: peers skipped beyond 1,024 evaluations (and in --quick) unless --all
SLOW = ("shapiq StratifiedSamplingSV",)

#: a cell: relative L1 error, mean squared error, evaluations, rows, ms per explanation
Cell = dict[str, float]
Table = dict[str, dict[int, Cell]]

# ------------------------------------------------------------------ run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Friedman ReLU and wine ReLU, 2 explicands, 1 seed, budgets 4d/256/1024",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--all", action="store_true", help="run the slow peers at every budget")
    parser.add_argument("--explicands", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--legacy", action="store_true", help="add the six legacy models")
    parser.add_argument("--spex", action="store_true", help="add shapiq's SPEX and ProxySPEX")
    parser.add_argument(
        "--spex-limit", type=float, default=10.0, help="seconds per SPEX call before dropping it"
    )
    parser.add_argument(
        "--metric", choices=("rel_l1", "mse"), default="rel_l1", help="the plot's error"
    )
    parser.add_argument(
        "--plot",
        default=None,
        help="benchmarks/estimators.png, or with --quick /tmp/estimators_quick.png (the json "
        "is written beside it)",
    )
    parser.add_argument(
        "--replot", action="store_true", help="redraw the plot and the summary from the .json"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.plot is None:  # --quick must not overwrite the full run's figures
        args.plot = "/tmp/estimators_quick.png" if args.quick else "benchmarks/estimators.png"
    json_path = args.plot.rsplit(".", 1)[0] + ".json"
    if args.replot:
        with open(json_path) as handle:
            saved = json.load(handle)
        results = {
            name: {
                "meta": entry["meta"],
                "table": {
                    label: {int(b): cell for b, cell in row.items()}
                    for label, row in entry["table"].items()
                },
            }
            for name, entry in saved.items()
        }
        summary(results)
        equal_time(results)
        plot(results, args.plot, args.metric)
        return
    explicands = 2 if args.quick else args.explicands
    seeds = 1 if args.quick else args.seeds
    catalogue = {**MODELS, **LEGACY}
    names = args.models.split(",")
    if args.quick and args.models == ",".join(MODELS):
        names = ["Friedman ReLU", "wine ReLU"]
    if args.legacy:
        names += list(LEGACY)
    device = torch.device(args.device)
    methods = {**OURS, **PEERS, **(SPEX if args.spex else {})}
    started = time.perf_counter()
    print(
        f"{explicands} explicands x {seeds} seeds per model, {args.threads} torch thread(s); "
        "rel = relative L1 error against exact Shapley, mse = mean squared error (means); "
        "evals = model evaluations per explanation (ours: rows plus derivatives as forward "
        "equivalents); ms = wall time per explanation"
    )
    results: dict[str, dict] = {}
    for name in names:
        build, act, train_seed, first, stride = catalogue[name]
        model, data, base, mask, classify = build(act, train_seed)
        model, data, base, mask = (t.to(device) for t in (model, data, base, mask))
        d = int(mask.max()) + 1
        budgets = [4 * d, 256, 1024] if args.quick else [4 * d, 256, 1024, 4096]
        games, truths = [], []
        for index in range(explicands):
            x = data[first + stride * index : first + stride * index + 1]
            with torch.no_grad():
                target = int(model(x).argmax()) if classify else 0
            game = FeatureGame(model, x, base, mask, target)
            one = torch.ones(1, d, device=device)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # its cost forecast
                truths.append(
                    ExactShapley(game)
                    .attribute(one, torch.zeros_like(one), show_progress=False)[0]
                    .double()
                )
            games.append(game)
        cost = forward_cost(games[0], d)
        meta = {"d": d, "forward_us_per_row": 1e6 * cost, "budgets": budgets}
        print(
            f"\n## {name} (d = {d}); the bare model: {1e6 * cost:.1f} us per row "
            f"(batch of 1,024; {1e3 * 1024 * cost:.2f} ms per 1,024 rows)"
        )
        table: Table = defaultdict(dict)
        dropped: set[str] = set()
        if name == names[0]:  # untimed first calls: imports, compilation, caches
            for method in methods.values():
                try:
                    method(games[0], d, 256, 0)
                except (ValueError, ImportError):
                    pass
        for budget in budgets:
            for label, method in methods.items():
                if label in SLOW and (budget > 1024 or args.quick) and not args.all:
                    continue  # minutes per model, and never near the best
                if label in dropped:
                    continue
                rel, mse, evals, rows, times = [], [], [], [], []
                for seed in range(seeds):
                    for game, truth in zip(games, truths):
                        game.rows = game.reported = 0
                        start = time.perf_counter()
                        try:
                            phi = method(game, d, budget, seed).to(truth.device).double()
                        except ValueError:
                            break  # budget too small for this method
                        except ImportError as error:  # ProxySPEX without lightgbm
                            print(f"{label}: skipped ({str(error)[:80]})")
                            dropped.add(label)
                            break
                        times.append(time.perf_counter() - start)
                        if label in SPEX and times[-1] > args.spex_limit:
                            print(f"{label}: {times[-1]:.0f} s > --spex-limit; dropped")
                            dropped.add(label)
                        # ours: n_evaluations (derivatives included, checked >= the
                        # wrapper's rows); peers: the rows the wrapper counted
                        evals.append(
                            max(game.reported, game.rows) if label.startswith("ours") else game.rows
                        )
                        rows.append(game.rows)
                        rel.append(float((phi - truth).abs().sum() / truth.abs().sum()))
                        mse.append(float(((phi - truth) ** 2).mean()))
                    if label in dropped:
                        break
                if rel and label not in dropped:
                    table[label][budget] = {
                        "rel_l1": float(np.mean(rel)),
                        "mse": float(np.mean(mse)),
                        "evals": float(np.mean(evals)),
                        "rows": float(np.mean(rows)),
                        "ms": 1e3 * float(np.mean(times)),
                    }
        results[name] = {"meta": meta, "table": dict(table)}
        report(name, dict(table), budgets)
    elapsed = time.perf_counter() - started
    with open(json_path, "w") as handle:
        json.dump(results, handle, indent=1)
    summary(results)
    equal_time(results)
    plot(results, args.plot, args.metric)
    load = os.getloadavg()
    print(
        f"\nran {elapsed:.0f} s (load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} "
        f"at the end); plot: {args.plot}; figures: {json_path} (--replot redraws from it)"
    )


def report(name: str, table: Table, budgets: list[int]) -> None:
    """Every method's cells for one model, as a markdown table."""
    print(f"\n{name}: rel error / mse (evals, ms)\n")
    print("| method | " + " | ".join(str(b) for b in budgets) + " |")
    print("|" + "---|" * (len(budgets) + 1))
    for label, row in table.items():
        cells = []
        for budget in budgets:
            if budget in row:
                c = row[budget]
                cells.append(
                    f"{c['rel_l1']:.2e} / {c['mse']:.1e} ({c['evals']:.0f}, {c['ms']:.0f})"
                )
            else:
                cells.append("-")
        print(f"| {label} | " + " | ".join(cells) + " |")


def best(table: Table, budget: int, mine: bool, metric: str) -> tuple[float, str]:
    cells = [
        (row[budget][metric], label)
        for label, row in table.items()
        if label.startswith("ours") == mine and budget in row
    ]
    return min(cells) if cells else (math.nan, "-")


def summary(results: dict[str, dict]) -> None:
    """The ratios (ready to paste), the best peer per cell and our budget spent."""
    for metric, title in (("rel_l1", "relative L1 error"), ("mse", "mean squared error")):
        print(f"\n**Ratios of {title}** (below 1: ours wins)\n")
        print("| model | ratio | 4 d | 256 | 1,024 | 4,096 |")
        print("|---|---|---|---|---|---|")
        for name, entry in results.items():
            table, meta = entry["table"], entry["meta"]
            budgets = meta["budgets"]
            first = f"{name} (d = {meta['d']})"
            for kind in ("best ours / best peer", "default / best peer"):
                cells = []
                for budget in budgets:
                    peer = best(table, budget, False, metric)[0]
                    if kind.startswith("best"):
                        mine = best(table, budget, True, metric)[0]
                    else:
                        mine = table.get(DEFAULT, {}).get(budget, {}).get(metric, math.nan)
                    cells.append(f"{mine / peer:.2f}")
                cells += ["-"] * (4 - len(cells))
                print(f"| {first} | {kind} | " + " | ".join(cells) + " |")
                first = ""
    print("\n**Best peer and best of ours per cell** (relative L1 error)\n")
    print("| model | 4 d | 256 | 1,024 | 4,096 |")
    print("|---|---|---|---|---|")
    for name, entry in results.items():
        table, budgets = entry["table"], entry["meta"]["budgets"]
        cells = []
        for budget in budgets:
            peer = best(table, budget, False, "rel_l1")
            mine = best(table, budget, True, "rel_l1")
            cells.append(f"{peer[1]} {peer[0]:.2e}; {mine[1][5:]} {mine[0]:.2e}")
        cells += ["-"] * (4 - len(cells))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "\n**Budget spent by ours** (rows evaluated / budget; Shear's derivatives are not rows)\n"
    )
    labels = list(OURS)
    print("| model | budget | " + " | ".join(label[5:] for label in labels) + " |")
    print("|" + "---|" * (len(labels) + 2))
    for name, entry in results.items():
        table, budgets = entry["table"], entry["meta"]["budgets"]
        for budget in budgets:
            cells = [
                f"{table[label][budget]['rows'] / budget:.2f}"
                if label in table and budget in table[label]
                else "-"
                for label in labels
            ]
            print(f"| {name} | {budget} | " + " | ".join(cells) + " |")
    print("\n**Wall time per explanation, ms** (the model's bare cost per row beside its name)\n")
    print("| model | method | 4 d | 256 | 1,024 | 4,096 |")
    print("|---|---|---|---|---|---|")
    for name, entry in results.items():
        table, meta = entry["table"], entry["meta"]
        first = f"{name} ({meta['forward_us_per_row']:.1f} us/row)"
        for label in (
            DEFAULT,
            "ours cubic",
            "ours antithetic permutation",
            "shapiq kADDSHAP",
            "shapiq kADDSHAP unpaired",
            "shapiq KernelSHAP",
            "SHAP Permutation",
        ):
            if label not in table:
                continue
            cells = [
                f"{table[label][b]['ms']:.1f}" if b in table[label] else "-"
                for b in meta["budgets"]
            ]
            cells += ["-"] * (4 - len(cells))
            print(f"| {first} | {label} | " + " | ".join(cells) + " |")
            first = ""


def equal_time(results: dict[str, dict], times: tuple[float, ...] = (2, 5, 20, 50, 200)) -> None:
    """The lowest error reached within each wall time per explanation, ours against peers."""
    print(
        "\n**At equal wall time**: the lowest relative L1 error of any budget point within T ms "
        "per explanation, best ours / best peer (-: no point that fast)\n"
    )
    print("| model | " + " | ".join(f"{t:g} ms" for t in times) + " |")
    print("|" + "---|" * (len(times) + 1))
    for name, entry in results.items():
        table = entry["table"]
        cells = []
        for limit in times:
            found = {True: (math.inf, "-"), False: (math.inf, "-")}
            for label, row in table.items():
                mine = label.startswith("ours")
                for cell in row.values():
                    if cell["ms"] <= limit and cell["rel_l1"] < found[mine][0]:
                        found[mine] = (cell["rel_l1"], label)
            if math.isinf(found[True][0]) or math.isinf(found[False][0]):
                cells.append("-")
            else:
                cells.append(
                    f"{found[True][0] / found[False][0]:.2f} ({found[True][1][5:]} "
                    f"{found[True][0]:.1e} / {found[False][1]} {found[False][0]:.1e})"
                )
        print(f"| {name} | " + " | ".join(cells) + " |")


def plot(results: dict[str, dict], path: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    columns = len(names)
    width = max(4.6 * columns, 11.0)
    figure, axes = plt.subplots(2, columns, figsize=(width, 9.0), squeeze=False)
    labels = list(dict.fromkeys(label for e in results.values() for label in e["table"]))
    ours_labels = [label for label in labels if label.startswith("ours")]
    peers = [label for label in labels if not label.startswith("ours")]
    # ours: solid lines with circles; peers: dashed lines, markers and colours spread
    colour = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(ours_labels)}
    colour.update(
        {
            label: plt.get_cmap("tab20b")((i * 20 // max(1, len(peers))) % 20)
            for i, label in enumerate(peers)
        }
    )
    marker = {label: "o" for label in ours_labels}
    marker.update({label: "s^vDxP*"[i % 7] for i, label in enumerate(peers)})
    ylabel = "relative L1 error" if metric == "rel_l1" else "mean squared error"
    for column, name in enumerate(names):
        table, meta = results[name]["table"], results[name]["meta"]
        for row_index, (key, xlabel) in enumerate(
            (
                ("evals", "model evaluations per explanation"),
                ("ms", "wall time per explanation (ms)"),
            )
        ):
            axis = axes[row_index, column]
            for label in ours_labels + peers:
                if label not in table:
                    continue
                row = table[label]
                budgets = sorted(row)
                mine = label.startswith("ours")
                axis.loglog(
                    [row[b][key] for b in budgets],
                    [row[b][metric] for b in budgets],
                    "-" if mine else "--",
                    color=colour[label],
                    marker=marker[label],
                    markersize=3 if mine else 4,
                    linewidth=2.2 if label == DEFAULT else 1.5 if mine else 1.0,
                    label=label,
                )
            axis.set_title(
                f"{name} (d = {meta['d']}; model {meta['forward_us_per_row']:.1f} us/row)",
                fontsize=9,
            )
            axis.set_xlabel(xlabel)
            axis.set_ylabel(ylabel)
            axis.grid(True, which="both", alpha=0.3)
    handles, shown = axes[0, 0].get_legend_handles_labels()
    columns_shown = max(2, min(6, int(width // 3)))
    figure.legend(handles, shown, loc="lower center", ncol=columns_shown, fontsize=8)
    legend_rows = math.ceil(len(shown) / columns_shown)
    figure.tight_layout(rect=(0, 0.025 * legend_rows + 0.01, 1, 1))
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
