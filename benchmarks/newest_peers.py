"""Our default against shapiq's newest approximators (OddSHAP, LeverageSHAP, PolySHAP).

shapiq 1.6+ needs Python >= 3.12, so it cannot be installed beside this
project's 3.11: this script builds each model's value tables here (every
coalition of ``d <= 20`` features, exact Shapley from them), hands them to
``_newest_peers_worker.py`` run by the interpreter named in
``GRAPHSHAP_PY312`` (a Python >= 3.12 with ``shapiq>=1.6`` and numpy), and
runs ``PairedKernelShap()`` (no option) on the same table games at the same
budgets and seeds. Prints the relative L1 error against exact Shapley per
model and budget, and our default's over each peer's.

    python3.12 -m venv /tmp/py312 && /tmp/py312/bin/pip install "shapiq>=1.6" numpy
    GRAPHSHAP_PY312=/tmp/py312/bin/python python benchmarks/newest_peers.py [--explicands 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import estimators as benchmark

from captum_graphshap import ExactShapley, PairedKernelShap

MODELS = ("Friedman ReLU", "Friedman SiLU", "wine ReLU", "token transformer",
          "Friedman20 LayerNorm GELU")  # fmt: skip


def tables_of(name: str, explicands: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(E, 2^d)`` value tables (bit ``i`` of the index: feature ``i`` in) and exact Shapley."""
    build, act, seed, first, stride = benchmark.MODELS[name]
    model, data, base, mask, classify = build(act, seed)
    d = int(mask.max()) + 1
    codes = torch.arange(2**d)
    coalitions = ((codes[:, None] >> torch.arange(d)) & 1).float()
    tables, exact = [], []
    for index in range(explicands):
        x = data[first + index * stride : first + index * stride + 1]
        with torch.no_grad():
            target = int(model(x).argmax()) if classify else 0
        game = benchmark.FeatureGame(model, x, base, mask, target)
        with torch.no_grad():
            tables.append(torch.cat([game(rows) for rows in coalitions.split(65536)]).double())
        exact.append(ExactShapley(TableGame(tables[-1])).attribute(torch.ones(1, d))[0])
    return torch.stack(tables), torch.stack(exact)


class TableGame(torch.nn.Module):
    """The game read from its table: rows are 0/1 coalitions."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        d = rows.shape[1]
        return self.table[(rows > 0.5).long() @ (1 << torch.arange(d))]


def relative_error(estimate: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean(np.abs(estimate - exact).sum(-1) / np.abs(exact).sum(-1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--explicands", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    python312 = os.environ.get("GRAPHSHAP_PY312")
    if not python312:
        sys.exit("set GRAPHSHAP_PY312 to a Python >= 3.12 with shapiq>=1.6 (see --help)")
    torch.set_num_threads(1)
    print("| model | budget | ours default | OddSHAP | LeverageSHAP | PolySHAP | ours / best |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        tables, exact = tables_of(name, args.explicands)
        d = exact.shape[1]
        budgets = [4 * d, 256, 1024, 4096]
        with tempfile.TemporaryDirectory() as folder:
            source, target = Path(folder, "tables.npz"), Path(folder, "estimates.npz")
            np.savez(source, tables=tables.numpy(), budgets=np.array(budgets), seeds=args.seeds)
            subprocess.run([python312, str(Path(__file__).with_name("_newest_peers_worker.py")),
                            str(source), str(target)], check=True)  # fmt: skip
            peers = dict(np.load(target))
        for b, budget in enumerate(budgets):
            ours = []
            for seed in range(args.seeds):
                for e in range(len(tables)):
                    phi = PairedKernelShap(TableGame(tables[e])).attribute(
                        torch.ones(1, d), torch.zeros(1, d), budget=budget,
                        generator=torch.Generator().manual_seed(seed),
                    )  # fmt: skip
                    ours.append(phi[0].numpy())
            mine = relative_error(np.stack(ours).reshape(args.seeds, len(tables), d), exact.numpy())
            errors = []
            for peer in ("shapiq OddSHAP", "shapiq LeverageSHAP", "shapiq PolySHAP"):
                estimate = peers[peer][b]
                errors.append(
                    relative_error(estimate, exact.numpy())
                    if np.isfinite(estimate).all()
                    else float("nan")
                )
            finite = [e for e in errors if np.isfinite(e)]
            ratio = mine / min(finite) if finite else float("nan")
            cells = " | ".join(f"{e:.2e}" for e in errors)
            print(
                f"| {name} (d = {d}) | {budget} | {mine:.2e} | {cells} | {ratio:.2f} |", flush=True
            )


if __name__ == "__main__":
    main()
