"""``graphshap``: the command line.

``graphshap demo`` trains a small model on an embedded synthetic task and
explains it with exact Shapley values, Myerson values on a chain of features
and Captum's sampling estimate, then prints the table. (The L-/C-Shapley demo
on digits replaces it when those methods land.)
"""

from __future__ import annotations

import argparse
import csv
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

FEATURES = ("age", "dose", "weight", "bp", "hr", "glucose", "chol", "noise")


def synthetic_task(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A task with known structure: additive terms, one neighbour interaction
    (dose x weight) and a dummy feature (noise)."""
    x = torch.randn(n, len(FEATURES), generator=generator)
    y = 1.5 * x[:, 0] + x[:, 1] * x[:, 2] - x[:, 3] + 0.5 * torch.tanh(2 * x[:, 5]) + 0.3 * x[:, 6]
    return x, y[:, None]


def train_model(seed: int) -> tuple[nn.Module, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x, y = synthetic_task(4096, generator)
    model = nn.Sequential(
        nn.Linear(len(FEATURES), 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        optimiser.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimiser.step()
    held_out, _ = synthetic_task(3, generator)
    return model.eval(), held_out


def run_demo(out_dir: Path, seed: int) -> Path:
    from captum.attr import ShapleyValueSampling

    from . import ExactShapley, LineGraph, MyersonValue

    started = time.perf_counter()
    model, examples = train_model(seed)
    print(
        f"trained an MLP on a synthetic task with {len(FEATURES)} features "
        f"({time.perf_counter() - started:.1f} s)"
    )
    timings = {}
    t0 = time.perf_counter()
    exact = _as_tensor(ExactShapley(model).attribute(examples, target=0))
    timings["exact Shapley (2^8 = 256 coalitions)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    myerson = _as_tensor(
        MyersonValue(model).attribute(examples, target=0, graph=LineGraph(len(FEATURES)))
    )
    timings["Myerson on the chain (37 coalitions)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sampled = ShapleyValueSampling(model).attribute(
        examples, target=0, n_samples=32, perturbations_per_eval=32
    )
    timings["Captum ShapleyValueSampling (32 permutations)"] = time.perf_counter() - t0

    rows = []
    for n in range(examples.shape[0]):
        with torch.no_grad():
            gain = float(model(examples[n : n + 1]) - model(torch.zeros(1, len(FEATURES))))
        print(f"\nexample {n}: f(x) - f(0) = {gain:+.4f}")
        print(f"{'feature':>8} {'x':>7} {'exact':>9} {'myerson':>9} {'captum':>9}")
        for i, name in enumerate(FEATURES):
            row = (
                n,
                name,
                float(examples[n, i]),
                float(exact[n, i]),
                float(myerson[n, i]),
                float(sampled[n, i]),
            )
            rows.append(row)
            print(f"{name:>8} {row[2]:+7.3f} {row[3]:+9.4f} {row[4]:+9.4f} {row[5]:+9.4f}")
        print(
            f"{'sum':>8} {'':>7} {float(exact[n].sum()):+9.4f} {float(myerson[n].sum()):+9.4f} "
            f"{float(sampled[n].sum()):+9.4f}"
        )
    print()
    for name, seconds in timings.items():
        print(f"{name:<48} {seconds * 1000:8.1f} ms")
    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / "demo_attributions.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["example", "feature", "value", "exact_shapley", "myerson_chain", "captum_sampling"]
        )
        writer.writerows(rows)
    print(f"\nwrote {table}")
    return table


def _as_tensor(attributions: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    # A tensor input gives a tensor back; this narrows the type for mypy.
    return attributions if isinstance(attributions, torch.Tensor) else attributions[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="graphshap", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a small model and explain it")
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("graphshap-report"),
        help="folder for the outputs (default: ./graphshap-report)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_demo(args.out, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
