"""ShapleySampling's window: error with and without the rest of ``budget=`` spent.

Whole orderings cost ``d - 1`` rows; the rows left buy one more ordering's
contributions at a random cyclic window (``plans/permutation_window.py``).
This runs the same calls (same seeds, same whole orderings) with the window
and with it switched off, on random tanh MLPs, against a reference of 4,000
antithetic orderings, and prints the mean relative error of each, their
ratio per model and the evaluations spent.

    python benchmarks/sampling_window.py [--models 6] [--seeds 30] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
from unittest import mock

import torch

from captum_graphshap import ShapleySampling
from captum_graphshap.attr import shapley_sampling

CELLS = ((100, 151), (100, 250), (30, 45), (30, 80), (16, 40))


def error(model, x, reference, d: int, budget: int, seed: int) -> tuple[float, float]:
    result = ShapleySampling(model).attribute(
        x,
        target=0,
        budget=budget,
        generator=torch.Generator().manual_seed(seed),
        return_evaluations=True,
    )
    phi = result.attributions.double()
    relative = (phi - reference).norm(dim=1) / reference.norm(dim=1)
    return relative.mean().item(), result.n_evaluations.double().mean().item()


def cell(d: int, budget: int, models: int, seeds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"on": [], "off": [], "spent_on": [], "spent_off": []}
    for model_seed in range(models):
        g = torch.Generator().manual_seed(model_seed)
        hidden = torch.randn(d, 32, generator=g, dtype=torch.float64) / d**0.5
        head = torch.randn(32, 1, generator=g, dtype=torch.float64)

        def model(z: torch.Tensor, hidden=hidden, head=head) -> torch.Tensor:
            return torch.tanh(z @ hidden) @ head

        x = torch.randn(2, d, generator=g, dtype=torch.float64)
        reference = ShapleySampling(model).attribute(
            x,
            target=0,
            n_samples=4000,
            generator=torch.Generator().manual_seed(99),
            show_progress=False,
        )
        for switch in ("on", "off"):
            patch = (
                mock.patch.object(shapley_sampling, "draw_window", lambda *a, **k: None)
                if switch == "off"
                else mock.patch.object(
                    shapley_sampling, "draw_window", shapley_sampling.draw_window
                )
            )
            with patch:
                runs = [error(model, x, reference, d, budget, s) for s in range(seeds)]
            out[switch].append(statistics.mean(e for e, _ in runs))
            out[f"spent_{switch}"].append(statistics.mean(s for _, s in runs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.markdown:
        print("| d | budget | spent without / with | error without | with | ratio median (range) |")
        print("|---|---|---|---|---|---|")
    for d, budget in CELLS:
        out = cell(d, budget, args.models, args.seeds)
        ratios = [b / a for a, b in zip(out["off"], out["on"])]
        cells = (
            d,
            budget,
            statistics.mean(out["spent_off"]),
            statistics.mean(out["spent_on"]),
            statistics.mean(out["off"]),
            statistics.mean(out["on"]),
            statistics.median(ratios),
            min(ratios),
            max(ratios),
        )
        if args.markdown:
            print(
                "| {} | {} | {:.0f} / {:.0f} | {:.3f} | {:.3f} | {:.2f} ({:.2f}-{:.2f}) |".format(
                    *cells
                )
            )
        else:
            print(
                "d = {}, budget {}: spent {:.0f} without, {:.0f} with; error {:.3f} without, "
                "{:.3f} with; ratio median {:.2f} ({:.2f}-{:.2f})".format(*cells)
            )


if __name__ == "__main__":
    main()
