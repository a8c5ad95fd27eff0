"""The swap's cost at defaults: ``PairedKernelShap()`` against Captum's ``KernelShap()``.

A user who swaps ``KernelShap`` for ``PairedKernelShap`` and passes no
``n_samples`` gets ``2 d + 2048`` coalitions (SHAP's ``KernelExplainer``
rule) where Captum draws 25. This script shows what that buys and costs, side
by side in one run: a random CNN on 28 x 28 one-channel images, 16 patches
of 7 x 7 pixels as features (d = 16), a few images; ground truth from
``ExactShapley`` over the 2^16 coalitions.

Printed per contender: model evaluations per image, wall time for the batch,
and the error against exact Shapley (relative L2 error and Pearson
correlation, averaged over images):

* at defaults: ``PairedKernelShap()`` against ``KernelShap()``;
* at equal ``n_samples`` (``--samples``, default 200): the two again.

Run:  python benchmarks/default_cost.py [--images 4] [--samples 200] [--seed 0] [--markdown]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from _table import add_markdown_argument, markdown_table
from captum.attr import KernelShap
from torch import Tensor, nn

from captum_graphshap import ExactShapley, PairedKernelShap


def make_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
    ).eval()  # fmt: skip


def patch_mask() -> Tensor:
    """``(1, 1, 28, 28)``: 16 patches of 7 x 7 pixels, ids 0..15."""
    rows = torch.arange(28) // 7
    return (rows[:, None] * 4 + rows[None, :])[None, None]


def errors(estimate: Tensor, exact: Tensor, mask: Tensor) -> tuple[float, float]:
    """Mean relative L2 error and mean Pearson correlation over images, per patch."""
    corners = [(mask[0, 0] == k).nonzero()[0] for k in range(16)]  # one pixel per patch
    ours, truth = (
        torch.stack([e[:, 0, r, c] for r, c in corners], 1).double() for e in (estimate, exact)
    )
    relative = ((ours - truth).norm(dim=1) / truth.norm(dim=1)).mean()
    centred = [t - t.mean(dim=1, keepdim=True) for t in (ours, truth)]
    correlation = (
        (centred[0] * centred[1]).sum(1) / (centred[0].norm(dim=1) * centred[1].norm(dim=1))
    ).mean()
    return float(relative), float(correlation)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    add_markdown_argument(parser)
    args = parser.parse_args()
    # Captum's per-example advice for several inputs: the batch is the comparison here
    warnings.filterwarnings("ignore", message="You are providing multiple inputs")
    torch.manual_seed(args.seed)
    model = make_cnn()
    x = torch.rand(args.images, 1, 28, 28)
    mask = patch_mask()
    with torch.no_grad():
        target = model(x).argmax(dim=1)
    exact = ExactShapley(model).attribute(x, baselines=0.0, target=target, feature_mask=mask)

    def ours(n_samples: int | None) -> tuple[Tensor, float]:
        g = torch.Generator().manual_seed(args.seed)
        result = PairedKernelShap(model).attribute(
            x, baselines=0.0, target=target, feature_mask=mask, n_samples=n_samples,
            generator=g, return_evaluations=True,
        )  # fmt: skip
        return result.attributions, float(result.n_evaluations.float().mean())

    def captum(n_samples: int) -> tuple[Tensor, float]:
        torch.manual_seed(args.seed)
        attributions = KernelShap(model).attribute(
            x, baselines=0.0, target=target, feature_mask=mask, n_samples=n_samples
        )
        return attributions, float(n_samples)  # Captum evaluates each sample once

    equal = f"n_samples={args.samples}"
    rows = [
        ("defaults", "PairedKernelShap()", lambda: ours(None)),
        ("defaults", "captum KernelShap()", lambda: captum(25)),
        (equal, "PairedKernelShap", lambda: ours(args.samples)),
        (equal, "captum KernelShap", lambda: captum(args.samples)),
    ]
    print(
        f"random CNN, 28x28 images, d = 16 patches of 7x7, {args.images} images, "
        f"torch threads {torch.get_num_threads()}"
    )
    header = ("setting", "method", "evaluations / image", "time (s)", "relative L2 error",
              "correlation")  # fmt: skip
    if not args.markdown:
        print("{:<16} {:<22} {:>11} {:>8} {:>11} {:>6}".format(*header))
    table = []
    for setting, name, run in rows:
        start = time.perf_counter()
        estimate, evaluations = run()
        took = time.perf_counter() - start
        relative, correlation = errors(estimate, exact, mask)
        table.append((setting, name, f"{evaluations:,.0f}", f"{took:.2f}", f"{relative:.3f}",
                      f"{correlation:.3f}"))  # fmt: skip
        if not args.markdown:
            print("{:<16} {:<22} {:>11} {:>8} {:>11} {:>6}".format(*table[-1]))
    if args.markdown:
        print(markdown_table(header, table, [False, False, True, True, True, True]))


if __name__ == "__main__":
    main()
