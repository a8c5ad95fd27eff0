"""A procedural model zoo: our default against our best and the newest peers, as distributions.

Every report draws a fresh master seed (printed; ``--seed`` replays it) and
from it a zoo of models nobody tuned on, six families:

- ``mlp``: 2-3 hidden layers, ReLU / SiLU / GELU / tanh, with or without
  LayerNorm;
- ``residual``: an MLP of residual blocks (LayerNorm, activation, linear);
- ``cnn1d``: a signal of ``4 d`` samples, explained on ``d`` segments, two
  convolutions with max-pooling;
- ``cnn2d``: an image (the digits at 8 x 8, or a random texture), explained on
  ``d`` patches, two convolutions with max-pooling;
- ``attention``: self-attention over ``d`` positions of a few channels each;
- ``tokens``: a transformer over ``d`` token ids (a one-hot blended with the
  pad's is an embedding blended, so 0/1 coalitions are ids and Shear still
  has derivatives); the baseline is the pad id.

About half are trained briefly (Adam, 150-300 steps) on a synthetic task of
their family (a random teacher's output, the digits, a token-polarity task);
the rest keep their random initialisation (weights scaled by a drawn gain).
``d`` runs from 8 to 64. Each explicand is the game ``v(z) = f(b + z (x - b))``
over its ``d`` features (``FeatureGame`` of ``estimators.py``).

References: exact Shapley (``ExactShapley``, all ``2^d`` coalitions) where
``d <= --exact-max`` (16); above, the mean of two independent antithetic
``ShapleySampling`` runs of ``--reference-budget`` evaluations each, whose
disagreement (relative L1 between the two) is printed beside each model.

Methods, at budgets ``4 d``, 256 and 1,024 (``--budgets``; a cell whose budget
covers the ``2^d`` coalitions is skipped): ours are ``PairedKernelShap()`` with no option
(the default), its ``walsh_gp`` (``d <= 32``), ``cubic`` and
``regression_mc`` options, antithetic ``ShapleySampling`` and ``Shear``;
the peers are shapiq 1.8's OddSHAP, LeverageSHAP, PolySHAP (order 2),
kADDSHAP (order 2, paired) and KernelSHAP (paired), run by
``_zoo_peers_worker.py`` under the Python >= 3.12 named by ``GRAPHSHAP_PY312``
(default ``/tmp/py312/bin/python``), which asks this process for the game's
values over a pipe. Error: relative L1 ``sum|phi - ref| / sum|ref|`` per
explicand, averaged over explicands and seeds; one cell is one model at one
budget.

Output: per budget the default's win rate against the best peer of the cell,
the median and worst ratios, and the share of cells within 1.1x of our best
estimator; the counterexamples; the table of every cell. ``--markdown PATH``
writes it there, ``--json PATH`` the raw errors.

    python3.12 -m venv /tmp/py312 && /tmp/py312/bin/pip install "shapiq>=1.8" numpy
    python benchmarks/zoo.py --quick                  # a few minutes on 2 cores
    nohup python benchmarks/zoo.py --markdown benchmarks/ZOO.md --json /tmp/zoo.json &
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).parent))
from _timing import timed
from _zoo_peers_worker import read_array, send_array
from estimators import FeatureGame, TokenTransformer, ours

import captum_graphshap.attr.paired_kernel_shap as auto_rule
import captum_graphshap.plans.walsh_gp as walsh_gp
import captum_graphshap.plans.walsh_triples as walsh_triples
from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.attr.exact_shapley import ExactShapley
from captum_graphshap.attr.shear import Shear

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU, "tanh": nn.Tanh,
}  # fmt: skip
FAMILIES = ("mlp", "residual", "cnn1d", "cnn2d", "attention", "tokens")
#: models per family in the full zoo (44) and in --quick (12)
FULL_COUNTS = {"mlp": 12, "residual": 6, "cnn1d": 7, "cnn2d": 7, "attention": 6, "tokens": 6}
QUICK_COUNTS = {"mlp": 3, "residual": 2, "cnn1d": 2, "cnn2d": 2, "attention": 2, "tokens": 1}
DIMENSIONS = (8, 10, 12, 14, 16, 20, 24, 32, 40, 48, 64)
DEFAULT = "default"
OURS_OPTIONS = ("walsh_gp", "cubic", "regression_mc")
PEERS = ("OddSHAP", "LeverageSHAP", "PolySHAP", "kADDSHAP", "KernelSHAP")


@dataclasses.dataclass
class Spec:
    """One zoo model, fully determined by its fields (its ``seed`` included)."""

    family: str
    d: int
    activation: str
    layer_norm: bool
    trained: bool
    seed: int

    @property
    def name(self) -> str:
        norm = " LN" if self.layer_norm else ""
        state = "trained" if self.trained else "random"
        return f"{self.family} {self.activation}{norm} d={self.d} {state} #{self.seed % 1000}"


def draw_specs(
    master: int, counts: dict[str, int], dimensions: tuple[int, ...] = DIMENSIONS
) -> list[Spec]:
    """The zoo of a master seed: per family its count of models with drawn settings
    (``d`` drawn from ``dimensions``; the 2-d CNNs keep their 16, 32 or 64 patches)."""
    rng = np.random.default_rng(master)
    specs = []
    for family, count in counts.items():
        acts = list(ACTIVATIONS)
        for index in range(count):
            act = acts[index % 4] if family in ("mlp", "residual") else str(rng.choice(acts))
            dims = (16, 32, 64) if family == "cnn2d" else dimensions
            specs.append(
                Spec(
                    family=family,
                    d=int(rng.choice(dims)),
                    activation=act,
                    # (the draw kept for cnn2d, which has no LayerNorm, so seeds replay)
                    layer_norm=bool(index % 8 >= 4)
                    if family == "mlp"
                    else bool(rng.random() < 0.3) and family != "cnn2d",
                    trained=bool(index % 2 == 0) if family != "cnn2d" else bool(rng.random() < 0.6),
                    seed=int(rng.integers(2**31)),
                )
            )
    return specs


# ------------------------------------------------------------------ models


def _train(model: nn.Module, x: Tensor, y: Tensor, classify: bool, steps: int) -> None:
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    loss = nn.functional.cross_entropy if classify else nn.functional.mse_loss
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(x), (128,), generator=generator)
        optimiser.zero_grad()
        loss(model(x[rows]), y[rows]).backward()
        optimiser.step()
    model.eval()


def _scale_weights(model: nn.Module, gain: float) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
                module.weight.mul_(gain)


class MLP(nn.Module):
    def __init__(
        self, d: int, width: int, depth: int, act: type[nn.Module], norm: bool, residual: bool
    ):
        super().__init__()
        self.inp = nn.Linear(d, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(*([nn.LayerNorm(width)] if norm else []), act(), nn.Linear(width, width))
            for _ in range(depth)
        )
        self.residual = residual
        self.out = nn.Sequential(act(), nn.Linear(width, 1))

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.inp(x)
        for block in self.blocks:
            hidden = hidden + block(hidden) if self.residual else block(hidden)
        return self.out(hidden)


class CNN1d(nn.Module):
    def __init__(self, act: type[nn.Module], norm: bool, length: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, 8, 5, padding=2), act(), nn.MaxPool1d(2),
            nn.Conv1d(8, 16, 5, padding=2), act(), nn.MaxPool1d(2), nn.Flatten(),
        )  # fmt: skip
        self.norm = nn.LayerNorm(16 * (length // 4)) if norm else nn.Identity()
        self.head = nn.Linear(16 * (length // 4), 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.norm(self.body(x)))


class CNN2d(nn.Module):
    def __init__(self, act: type[nn.Module], side: int, classes: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), act(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), act(), nn.MaxPool2d(2), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(16 * (side // 4) ** 2, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


class Attention(nn.Module):
    """Self-attention over positions ``(N, L, C)``: embed, one attention block, pool."""

    def __init__(self, length: int, channels: int, act: type[nn.Module], norm: bool, layers: int):
        super().__init__()
        width = 32
        self.embed = nn.Linear(channels, width)
        self.position = nn.Parameter(torch.randn(length, width) * 0.3)
        self.attention = nn.ModuleList(
            nn.MultiheadAttention(width, 4, batch_first=True) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(width) if norm else nn.Identity()
        self.head = nn.Sequential(nn.Linear(width, 32), act(), nn.Linear(32, 1))

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.embed(x) + self.position
        for attention in self.attention:
            hidden = self.norm(hidden + attention(hidden, hidden, hidden, need_weights=False)[0])
        return self.head(hidden.mean(1))


Built = tuple[nn.Module, Tensor, Tensor, Tensor, bool]


def _tabular(spec: Spec, residual: bool) -> Built:
    g = torch.Generator().manual_seed(spec.seed)
    d, act = spec.d, ACTIVATIONS[spec.activation]
    x = torch.randn(2000, d, generator=g)
    model = MLP(d, 64, 3 if residual else 2, act, spec.layer_norm, residual)
    if spec.trained:  # a random teacher: a few features and their products matter
        k = max(3, d // 4)
        w = torch.randn(k, generator=g)
        pairs = torch.randint(k, (k, 2), generator=g)
        y = (torch.tanh(x[:, :k]) @ w + (x[:, pairs[:, 0]] * x[:, pairs[:, 1]]).sum(1) * 0.5)[
            :, None
        ]
        _train(model, x, y, False, 300)
    else:
        _scale_weights(model, 1.0 + float(torch.rand(1, generator=g)))
    base = x.mean(0, keepdim=True) if spec.trained else torch.zeros(1, d)
    return model.eval(), x, base, torch.arange(d)[None], False


def _cnn1d(spec: Spec) -> Built:
    g = torch.Generator().manual_seed(spec.seed)
    length = 4 * spec.d
    t = torch.linspace(0, 1, length)
    freq = torch.rand(1000, 1, generator=g) * 8 + 1
    phase = torch.rand(1000, 1, generator=g) * 6.3
    x = (torch.sin(6.3 * freq * t + phase) + 0.3 * torch.randn(1000, length, generator=g))[:, None]
    model = CNN1d(ACTIVATIONS[spec.activation], spec.layer_norm, length)
    if spec.trained:  # is there a bump above 1.2 in the first half?
        y = (x[:, 0, : length // 2].amax(1) > 1.2).long()
        _train(model, x, y, True, 200)
    else:
        _scale_weights(model, 1.0 + float(torch.rand(1, generator=g)))
    mask = (torch.arange(length) // 4).view(1, 1, length)
    return model.eval(), x, torch.zeros(1, 1, length), mask, True


def _cnn2d(spec: Spec) -> Built:
    g = torch.Generator().manual_seed(spec.seed)
    # d = 16: 4 x 4 patches of 2 x 2 (8 x 8 digits); 32: 8 x 4 of 1 x 2; 64: pixels
    patch_rows, patch_cols = {16: (2, 2), 32: (1, 2), 64: (1, 1)}[spec.d]
    model = CNN2d(ACTIVATIONS[spec.activation], 8, 10)
    if spec.trained:
        from sklearn.datasets import load_digits

        pixels, labels = load_digits(return_X_y=True)
        x = torch.tensor(pixels / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
        _train(model, x, torch.tensor(labels), True, 200)
    else:
        x = torch.rand(500, 1, 8, 8, generator=g)
        _scale_weights(model, 1.0 + float(torch.rand(1, generator=g)))
    rows = torch.arange(8)
    columns = 8 // patch_cols
    mask = ((rows[:, None] // patch_rows) * columns + rows[None, :] // patch_cols).view(1, 1, 8, 8)
    return model.eval(), x, torch.zeros(1, 1, 8, 8), mask, True


def _attention(spec: Spec) -> Built:
    g = torch.Generator().manual_seed(spec.seed)
    d, channels = spec.d, 3
    x = torch.randn(1500, d, channels, generator=g)
    model = Attention(d, channels, ACTIVATIONS[spec.activation], spec.layer_norm, 1 + spec.seed % 2)
    if spec.trained:  # a query-key task: does a position's channel 0 match the first one's 1?
        y = (x[:, 1:, 0] * x[:, :1, 1]).amax(1, keepdim=True) + x[:, :, 2].mean(1, keepdim=True)
        _train(model, x, y, False, 200)
    else:
        _scale_weights(model, 1.0 + float(torch.rand(1, generator=g)))
    mask = torch.arange(d)[None, :, None].expand(1, d, channels)
    return model.eval(), x, torch.zeros(1, d, channels), mask, False


def _tokens(spec: Spec) -> Built:
    g = torch.Generator().manual_seed(spec.seed)
    d, vocab = spec.d, 12
    ids = torch.randint(1, vocab, (3000, d), generator=g)
    x = nn.functional.one_hot(ids, vocab).float()
    model = TokenTransformer(ACTIVATIONS[spec.activation], d, vocab, 1 + spec.seed % 2)
    if spec.trained:  # ids 1-4 for, 5-8 against, 9 right before a positive id doubles it
        positive, negative = (ids <= 4), (ids >= 5) & (ids <= 8)
        boost = (ids[:, :-1] == 9) & positive[:, 1:]
        labels = (positive.sum(1) - negative.sum(1) + boost.sum(1) > 0).long()
        _train(model, x, labels, True, 200)
    base = nn.functional.one_hot(torch.zeros(1, d, dtype=torch.long), vocab).float()
    mask = torch.arange(d)[None, :, None].expand(1, d, vocab)
    return model.eval(), x, base, mask, True


BUILDERS: dict[str, Callable[[Spec], Built]] = {
    "mlp": lambda spec: _tabular(spec, False),
    "residual": lambda spec: _tabular(spec, True),
    "cnn1d": _cnn1d,
    "cnn2d": _cnn2d,
    "attention": _attention,
    "tokens": _tokens,
}


def games_of(spec: Spec, explicands: int) -> list[FeatureGame]:
    """The explicands' games of one model (seeded rows of its data, the argmax class)."""
    torch.manual_seed(spec.seed)
    model, data, base, mask, classify = BUILDERS[spec.family](spec)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    rows = torch.randperm(len(data), generator=torch.Generator().manual_seed(spec.seed))
    games = []
    for row in rows[:explicands].tolist():
        x = data[row : row + 1]
        with torch.no_grad():
            target = int(model(x).argmax()) if classify else 0
        games.append(FeatureGame(model, x, base, mask, target))
    return games


# ------------------------------------------------------------------ references


#: The references' generators are seeded apart from the measured runs' (``seed + 7919 s +
#: e``): with the same seed, antithetic ``ShapleySampling`` on the second explicand drew
#: the reference's first orderings, and its error was measured against itself in part.
REFERENCE_SEED_OFFSET = 10**9


def reference(
    games: list[FeatureGame], d: int, args: argparse.Namespace, seed: int
) -> tuple[Tensor, float]:
    """``(E, d)`` reference values and their own error scale (0 when exact).

    The scale is the two antithetic runs' disagreement (relative L1 between
    them) over two: each run's error is about the disagreement over sqrt(2),
    their mean's another sqrt(2) below."""
    one = torch.ones(1, d)
    values, gaps = [], []
    for game in games:
        with torch.no_grad():
            if d <= args.exact_max:
                values.append(
                    ExactShapley(game)
                    .attribute(one, torch.zeros_like(one), show_progress=False)[0]
                    .double()
                )
                continue
            runs = [
                ShapleySampling(game).attribute(
                    one, torch.zeros_like(one), budget=args.reference_budget,
                    generator=torch.Generator().manual_seed(REFERENCE_SEED_OFFSET + seed + k),
                    show_progress=False,
                )[0].double()
                for k in (1, 2)
            ]  # fmt: skip
        values.append((runs[0] + runs[1]) / 2)
        gaps.append(float((runs[0] - runs[1]).abs().sum() / values[-1].abs().sum()))
    return torch.stack(values), (statistics.mean(gaps) / 2 if gaps else 0.0)


def relative_l1(estimate: Tensor, truth: Tensor) -> float:
    return float((estimate.double() - truth).abs().sum() / truth.abs().sum().clamp_min(1e-12))


# ------------------------------------------------------------------ methods


#: ``--candidates``: variants of the default's rule, measured beside it (module
#: attributes set for the call only) and reported as a default of their own
CANDIDATES: dict[str, dict[tuple[object, str], object]] = {
    # the rule before this zoo: above 16 features the process factorised on the
    # pairs of 20 d evaluations only, adjusted over the rest
    "before: 20 d pairs above 16 features": {
        (auto_rule, "auto_fit_pairs"): lambda d: 512 if d <= 16 else (20 * d - 3) // 2,
    },
    # the rule before 2026-11-27: the process up to 32 features only (cubic fit or
    # permutations above)
    "before: the process up to 32 features": {(walsh_gp, "WIDE_MAX_FEATURES"): 32},
    # the rule before 2026-11-27: the triples reweighted only up to 256 rows, 16 features
    "before: triples up to 256 rows": {
        (walsh_gp, "triple_weights"): lambda interactions, pairs: (
            walsh_triples.triple_weights(interactions, pairs)
            if pairs < 256 and interactions.shape[1] <= 16
            else None
        ),
    },
    # the rule before 2026-11-27's local parities (plans/walsh_local.py)
    "before: no local parities": {(walsh_gp, "local_enabled"): lambda windows: False},
    # the rule before the windows from the mask's geometry (plans/local_windows.py):
    # consecutive ids
    "before: windows of ids": {(auto_rule, "feature_windows"): lambda features: None},
    # the rule before the process up to 96 features: up to 64
    "before: the process up to 64 features": {(walsh_gp, "WIDE_MAX_FEATURES"): 64},
    # the rule before permutations up to the process from 33 to 47 features: the cubic
    # fit from 6 d
    "before: cubic from 6 d": {(auto_rule, "AUTO_PERMUTATIONS_BELOW_MIDDLE"): 6},
    # the process's relevance powers before 2026-11-28's runs J-L: 1 and 2
    "before: relevance powers 1 and 2": {(walsh_gp, "RELEVANCE_POWERS"): (1.0, 2.0)},
    # before 2026-11-28: features at the baseline kept (attr/dummies.py)
    "before: null players kept": {(PairedKernelShap, "drops_null_players"): False},
}


def with_constants(method: Callable, constants: dict[tuple[object, str], object]) -> Callable:
    """``method`` run with module constants set, restored after."""

    def run(*args: object) -> Tensor:
        saved = {key: getattr(*key) for key in constants}
        try:
            for (module, name), value in constants.items():
                setattr(module, name, value)
            return method(*args)
        finally:
            for (module, name), value in saved.items():
                setattr(module, name, value)

    return run


def our_methods(d: int, candidates: list[str]) -> dict[str, Callable]:
    methods = {
        DEFAULT: ours(PairedKernelShap, on_inputs=True),
        "antithetic ShapleySampling": ours(ShapleySampling),
        "Shear": ours(Shear),
    }
    for option in OURS_OPTIONS:
        if option != "walsh_gp" or d <= 32:
            methods[option] = ours(PairedKernelShap, on_inputs=True, estimator=option)
    for name in candidates:
        default = ours(PairedKernelShap, on_inputs=True)
        methods[name] = with_constants(default, CANDIDATES[name])
    return methods


class PeerTimeout(Exception):
    """A peer's job ran past ``Peers.timeout`` seconds of its own time (the worker is
    restarted; the job has no estimate)."""


class Peers:
    """The 3.12 worker, kept running; ``estimate`` answers its value queries.

    With ``timeout`` (seconds), a job whose worker keeps the caller waiting longer
    than that in all (the time spent computing its values not counted) raises
    :class:`PeerTimeout` after the worker is killed and started afresh."""

    def __init__(self, python: str, timeout: float | None = None) -> None:
        self.python, self.timeout = python, timeout
        self.seconds: dict[str, list[float]] = {}
        self._start()

    def _start(self) -> None:
        worker = Path(__file__).with_name("_zoo_peers_worker.py")
        self.process = subprocess.Popen(
            [self.python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def _wait(self, out: IO[bytes], left: float) -> float:
        """Wait for the worker's next message at most ``left`` seconds; the seconds left."""
        if self.timeout is None:
            return left
        start = time.perf_counter()
        if not select.select([out], [], [], max(left, 0.0))[0]:
            self.process.kill()
            self.process.wait()
            self._start()
            raise PeerTimeout
        return left - (time.perf_counter() - start)

    def estimate(self, peer: str, game: FeatureGame, d: int, budget: int, seed: int) -> Tensor:
        assert self.process.stdin and self.process.stdout
        inp, out = self.process.stdin, self.process.stdout
        inp.write(f"JOB {peer} {d} {budget} {seed}\n".encode())
        inp.flush()
        left = self.timeout or 0.0
        while True:
            left = self._wait(out, left)
            head, array = read_array(out)
            if head[0] == "R":
                self.seconds.setdefault(peer, []).append(float(head[1]))
                return torch.as_tensor(array, dtype=torch.float64)
            send_array(inp, "V", game.numpy(array.astype(np.float32)))

    def time(self, peer: str, d: int, budget: int, repeats: int) -> float:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(f"TIME {peer} {d} {budget} {repeats}\n".encode())
        self.process.stdin.flush()
        return float(self.process.stdout.readline().decode().split()[1])

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.write(b"END\n")
        self.process.stdin.flush()
        self.process.wait()


def measure_model(spec: Spec, args: argparse.Namespace, peers: Peers | None, seed: int) -> dict:
    """Errors of every method at every budget for one model (mean over explicands, seeds)."""
    games = games_of(spec, args.explicands)
    d = spec.d
    truth, noise = reference(games, d, args, seed)
    labels: dict[int, str] = {}
    for token in args.budgets:  # the first token naming a budget labels it (4d = 256 at d = 64)
        labels.setdefault(budget_of(token, d), token)
    budgets = [b for b in labels if b < 2**d]
    cells = {}
    for budget in budgets:
        errors: dict[str, list[float]] = {}
        for s in range(args.seeds):
            for e, game in enumerate(games):
                run_seed = seed + 7919 * s + e
                for name, method in our_methods(d, args.candidates).items():
                    try:
                        phi = method(game, d, budget, run_seed)
                        errors.setdefault(name, []).append(relative_l1(phi, truth[e]))
                    except (ValueError, RuntimeError):  # a budget the method refuses
                        errors.setdefault(name, []).append(float("nan"))
                for peer in PEERS if peers else ():
                    phi = peers.estimate(peer, game, d, budget, run_seed)  # type: ignore[union-attr]
                    errors.setdefault(peer, []).append(
                        relative_l1(phi, truth[e]) if torch.isfinite(phi).all() else float("nan")
                    )
        cells[str(budget)] = {k: float(np.mean(v)) for k, v in errors.items()}
    return {
        "spec": dataclasses.asdict(spec), "name": spec.name, "noise": noise, "cells": cells,
        "labels": {str(b): labels[b] for b in budgets},
    }  # fmt: skip


def budget_of(token: str, d: int) -> int:
    """``"4d"`` -> ``4 d`` evaluations, ``"256"`` -> 256."""
    return int(token[:-1]) * d if token.endswith("d") else int(token)


# ------------------------------------------------------------------ report


def _best(errors: dict[str, float], names: tuple[str, ...] | list[str]) -> tuple[str, float]:
    finite = {n: errors[n] for n in names if n in errors and np.isfinite(errors[n])}
    if not finite:
        return "-", float("nan")
    name = min(finite, key=finite.__getitem__)
    return name, finite[name]


def cell_rows(results: list[dict], default_name: str = DEFAULT) -> list[dict]:
    """One row per (model, budget): the default (or a candidate in its place), our best
    (the shipped options and that default), the best peer and the ratios."""
    rows = []
    for result in results:
        for budget, errors in result["cells"].items():
            ours_names = [
                n for n in errors if n not in PEERS and (n == default_name or n not in CANDIDATES)
            ]
            best_ours, ours_error = _best(errors, ours_names)
            best_peer, peer_error = _best(errors, PEERS)
            default = errors[default_name]
            rows.append({
                "model": result["name"], "family": result["spec"]["family"],
                "d": result["spec"]["d"], "budget": int(budget), "noise": result["noise"],
                "label": result.get("labels", {}).get(budget),
                "default": default, "best_ours": best_ours, "ours_error": ours_error,
                "best_peer": best_peer, "peer_error": peer_error,
                "vs_peer": default / peer_error if peer_error > 0 else float("nan"),
                "vs_ours": default / ours_error if ours_error > 0 else float("nan"),
            })  # fmt: skip
    return rows


def budget_label(row: dict) -> str:
    if row.get("label"):
        return row["label"]
    return "4d" if row["budget"] == 4 * row["d"] else str(row["budget"])


def summary(rows: list[dict]) -> list[str]:
    lines = [
        "| budget | cells | default wins vs best peer | <= 0.9x best peer | median / worst "
        "ratio to best peer | within 1.1x of our best | median / worst ratio to our best |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(budget_label(row), []).append(row)
    groups["all"] = rows
    for label, group in groups.items():
        peer = [r["vs_peer"] for r in group if np.isfinite(r["vs_peer"])]
        mine = [r["vs_ours"] for r in group if np.isfinite(r["vs_ours"])]
        if not mine:
            continue
        # without peers (--no-peers) their columns are blank, ours still reported
        against_peer = (
            f"{np.mean(np.array(peer) < 1):.0%} | {np.mean(np.array(peer) <= 0.9):.0%} | "
            f"{np.median(peer):.2f} / {max(peer):.2f}"
            if peer
            else "- | - | -"
        )
        lines.append(
            f"| {label} | {len(group)} | {against_peer} | "
            f"{np.mean(np.array(mine) <= 1.1):.0%} | {np.median(mine):.2f} / {max(mine):.2f} |"
        )
    return lines


def winners(rows: list[dict], key: str) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[key]] = counts.get(row[key], 0) + 1
    return ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | budget | ref. noise | default | our best | best peer | default / peer "
        "| default / our best |",
        "|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['budget']} | {r['noise']:.4f} | {r['default']:.4f} | "
            f"{r['best_ours']} {r['ours_error']:.4f} | {r['best_peer']} {r['peer_error']:.4f} | "
            f"{r['vs_peer']:.2f} | {r['vs_ours']:.2f} |"
        )
    return lines


def report(results: list[dict], header: list[str], candidates: list[str]) -> str:
    """The markdown report: the distribution, the counterexamples, every cell."""
    rows = cell_rows(results)
    lines = [*header, "", "### Distribution over the zoo's cells", "", *summary(rows), ""]
    for name in candidates:
        lines += [f"With `{name}` in the default's place:", ""]
        lines += [*summary(cell_rows(results, name)), ""]
    lines.append(f"Best of ours per cell: {winners(rows, 'best_ours')}.")
    lines.append(f"Best peer per cell: {winners(rows, 'best_peer')}.")
    lines += ["", "### Counterexamples", "", "The default at or above the best peer:", ""]
    lines += table([r for r in rows if r["vs_peer"] >= 1.0])
    lines += ["", "The default above 1.1x our best:", ""]
    lines += table([r for r in rows if r["vs_ours"] > 1.1])
    lines += ["", "### Every cell", "", *table(rows)]
    return "\n".join(lines) + "\n"


class CheapGame(nn.Module):
    """``sum_i z_i + sum_i z_i z_{i+1}``: the model costs next to nothing, so the
    time is the estimator's own (the worker's ``TIME`` game is the same)."""

    def forward(self, z: Tensor) -> Tensor:
        return z.sum(1) + (z[:, 1:] * z[:, :-1]).sum(1)


def default_seconds(d: int, budget: int, seed: int) -> float:
    """One call of the default on :class:`CheapGame` with ``d`` features, in seconds."""
    one = torch.ones(1, d)
    return timed(
        lambda: PairedKernelShap(CheapGame()).attribute(
            one, torch.zeros_like(one), budget=budget, generator=torch.Generator().manual_seed(seed)
        ),
        one.device,
    )


def wall_times(peers: Peers, rounds: int = 3, repeats: int = 5) -> list[str]:
    """The default's wall time against kADDSHAP's on :class:`CheapGame`, medians of
    ``rounds`` rounds that alternate the two (this host's speed drifts).

    Cold: one call each, after the other side's (each process idles meanwhile, and a
    call after a pause runs slower on these machines). Warm: on each side one
    untimed call, then the median of ``repeats`` back-to-back calls.
    """
    lines = [
        "| d | budget | default cold (s) | kADDSHAP cold (s) | cold ratio "
        "| default warm (s) | kADDSHAP warm (s) | warm ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in (16, 32, 64):
        for budget in sorted({4 * d, 256, 1024}):
            cold: tuple[list[float], list[float]] = ([], [])
            warm: tuple[list[float], list[float]] = ([], [])
            for seed in range(rounds):
                cold[0].append(default_seconds(d, budget, seed))
                cold[1].append(peers.time("kADDSHAP", d, budget, 1))
                default_seconds(d, budget, seed)
                warm[0].append(
                    statistics.median(default_seconds(d, budget, seed + r) for r in range(repeats))
                )
                warm[1].append(peers.time("kADDSHAP", d, budget, repeats))
            times = [statistics.median(t) for t in (*cold, *warm)]
            lines.append(
                f"| {d} | {budget} | {times[0]:.4f} | {times[1]:.4f} | {times[0] / times[1]:.2f} "
                f"| {times[2]:.4f} | {times[3]:.4f} | {times[2] / times[3]:.2f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="master seed (default: fresh)")
    parser.add_argument(
        "--quick", action="store_true", help="12 models, 1 explicand, shorter references"
    )
    parser.add_argument("--explicands", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--exact-max", type=int, default=16)
    parser.add_argument(
        "--budgets",
        type=lambda text: [t for t in text.split(",") if t],
        default=["4d", "256", "1024"],
        help="comma-separated budgets: a number of evaluations, or k d ('4d', '6d')",
    )
    parser.add_argument("--max-d", type=int, default=96, help="only models with d at most this")
    parser.add_argument(
        "--dimensions",
        type=lambda text: tuple(int(t) for t in text.split(",") if t),
        default=DIMENSIONS,
        help="comma-separated d to draw from (not the 2-d CNNs'), e.g. 72,80,96",
    )
    parser.add_argument("--min-d", type=int, default=0, help="only models with d at least this")
    parser.add_argument("--reference-budget", type=int, default=200_000)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument(
        "--candidates",
        type=lambda text: [n for n in text.split(",") if n],
        default=[],
        help=f"comma-separated variants of the default to measure beside it: {list(CANDIDATES)}",
    )
    parser.add_argument(
        "--wall", action="store_true", help="only the wall time of the default against kADDSHAP"
    )
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    master = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") % 10**6
    counts = QUICK_COUNTS if args.quick else FULL_COUNTS
    if args.quick:
        args.explicands, args.reference_budget = 1, min(args.reference_budget, 40_000)
    families = args.families.split(",")
    specs = [
        s
        for s in draw_specs(master, counts, args.dimensions)
        if s.family in families and args.min_d <= s.d <= args.max_d
    ]
    command = shlex.join(["python", "benchmarks/zoo.py", *sys.argv[1:]])
    if args.seed is None:
        command += f" --seed {master}"
    print(f"master seed {master} (replay: {command})", flush=True)
    python = os.environ.get("GRAPHSHAP_PY312", "/tmp/py312/bin/python")
    peers = None if args.no_peers else Peers(python)
    if args.wall and peers:
        text = "\n".join(["## Wall time on a cheap game", "", *wall_times(peers)]) + "\n"
        peers.close()
        if args.markdown:
            Path(args.markdown).write_text(text)
        return
    results = []
    start = time.perf_counter()
    for spec in specs:
        results.append(measure_model(spec, args, peers, master))
        for budget, errors in results[-1]["cells"].items():
            cells = ", ".join(f"{n} {e:.4f}" for n, e in errors.items())
            print(
                f"{spec.name} (ref. noise {results[-1]['noise']:.4f}) @ {budget}: {cells}",
                flush=True,
            )
        if args.json:
            Path(args.json).write_text(json.dumps({"seed": master, "results": results}))
    header = [
        f"## Model zoo (`{command}`)", "",
        f"Master seed {master}; {len(specs)} models, {args.explicands} explicand(s) and "
        f"{args.seeds} seed(s) per cell; references exact for d <= {args.exact_max}, above it "
        f"two antithetic runs of {args.reference_budget:,} evaluations (their noise column: "
        f"half their relative L1 disagreement); {time.perf_counter() - start:.0f} s on "
        f"{torch.get_num_threads()} thread(s).",
    ]  # fmt: skip
    if peers:
        peers.close()
    text = report(results, header, args.candidates)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
