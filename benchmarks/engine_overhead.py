"""Engine overhead of ExactShapley, and its speed against SHAP and Captum.

Prints, measured side by side in one run:

1. ExactShapley wall time / time of pushing the same rows through the bare
   model (inputs pre-built, same batch sizes, no_grad) for
   (a) an MLP on 16 features and (b) small CNNs on 3x32x32 grouped into
   16 patches of 8x8 pixels: a strided two-layer one so cheap that building
   its inputs costs about a fifth of its forward pass, and a LeNet-style one.
   Target: <= 1.2x. Fresh input rows per call are the default (a model that
   stores its inputs keeps them); the column "reuse" is the same with
   ``reuse_buffers=True`` (one buffer per input, overwritten every call).
2. Speed-up over SHAP's ExactExplainer (the fastest exact peer) on the same
   models and features.
3. Speed-up over captum.attr.ShapleyValues at d = 8 (it walks d! orderings).

Timings on shared machines drift, so each comparison alternates the two
contenders round by round and reports medians and the median of the
per-round ratios.

Run:  python benchmarks/engine_overhead.py [--repeats 9] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import numpy as np
import torch
from _timing import median_ratio, rotating_rounds, timed
from torch import nn

from captum_graphshap import ExactShapley
from captum_graphshap.engine.batching import AUTO_ELEMENTS_PER_CALL
from captum_graphshap.plans.exact import all_coalitions


def paired(
    first: Callable[[], object], second: Callable[[], object], repeats: int, device: torch.device
) -> tuple[float, float, float]:
    """Median times of ``first`` and ``second`` and the median per-round ratio."""
    first(), second()  # warm-up
    times = rotating_rounds({"first": first, "second": second}, repeats, device)
    return (
        statistics.median(times["first"]),
        statistics.median(times["second"]),
        median_ratio(times, "first", "second"),
    )


def mlp16() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    ).eval()


def cnn32() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).eval()


def lenet32() -> nn.Module:
    """A LeNet-style CNN: its forward pass, not input construction, dominates."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    ).eval()


def patch_mask(size: int = 32, patch: int = 8) -> torch.Tensor:
    side = size // patch
    ids = torch.arange(side * side).reshape(side, side)
    return ids.repeat_interleave(patch, 0).repeat_interleave(patch, 1)[None, None]


def bare_model(model, x, mask, d, rows_per_call, device) -> Callable[[], None]:
    """The physical limit: the same rows through the model, inputs already built."""
    coalitions = all_coalitions(d, device)
    flat = mask.reshape(-1)
    chunks = []
    for start in range(0, coalitions.shape[0], rows_per_call):
        block = coalitions[start : start + rows_per_call]
        keep = block.gather(1, flat.expand(block.shape[0], -1)).view(-1, *mask.shape[1:])
        chunks.append(torch.where(keep, x, torch.zeros_like(x)))

    def run() -> None:
        with torch.no_grad():
            for chunk in chunks:
                model(chunk)

    return run


def shap_exact(model, x, mask, d, device) -> Callable[[], object] | None:
    """SHAP's ExactExplainer at its best: one batch for all 2^d coalitions
    (its first call JIT-compiles with numba; ``paired`` warms it up)."""
    try:
        import shap
    except ImportError:
        return None
    flat_mask = mask.reshape(-1)

    def f(z: np.ndarray) -> np.ndarray:
        present = torch.as_tensor(z, dtype=torch.bool, device=device)
        keep = present[:, flat_mask].view(-1, *mask.shape[1:])
        with torch.no_grad():
            out = model(torch.where(keep, x, torch.zeros_like(x)))
        return out[:, 0].cpu().numpy()

    masker = shap.maskers.Independent(np.zeros((1, d)), max_samples=1)
    explainer = shap.explainers.Exact(f, masker)
    row = np.ones((1, d))
    return lambda: explainer(row, batch_size=2**d, silent=True)


def captum_exact_time(model, x, mask, device) -> float:
    """One run of Captum's ShapleyValues (d! orderings; too slow to repeat)."""
    from captum.attr import ShapleyValues

    explainer = ShapleyValues(model)
    return timed(
        lambda: explainer.attribute(x, target=0, feature_mask=mask, perturbations_per_eval=256),
        device,
    )


def overhead_rows(name, model, x, mask, repeats, device) -> str:
    explainer = ExactShapley(model)

    def ours() -> object:
        return explainer.attribute(x, target=0, feature_mask=mask)

    def reusing() -> object:
        return explainer.attribute(x, target=0, feature_mask=mask, reuse_buffers=True)

    rows_per_call = max(1, AUTO_ELEMENTS_PER_CALL // x[0].numel())
    bare = bare_model(model, x, mask, 16, rows_per_call, device)
    ours_s, bare_s, overhead = paired(ours, bare, repeats, device)
    _, _, reuse_overhead = paired(reusing, bare, repeats, device)
    theirs = shap_exact(model, x, mask, 16, device)
    if theirs is None:
        shap_cells = "n/a | n/a"
    else:
        _, shap_s, speedup = paired(ours, theirs, repeats, device)
        shap_cells = f"{shap_s:.3f} | {1 / speedup:.1f}x"
    return (
        f"| {name} | {ours_s:.3f} | {bare_s:.3f} | {overhead:.2f}x | {reuse_overhead:.2f}x "
        f"| {shap_cells} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")

    print(
        "\n| case (d = 16) | ExactShapley s | bare model s | overhead | overhead, reuse | "
        "SHAP ExactExplainer s | speed-up vs SHAP |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    mlp_mask = torch.arange(16, device=device)[None]
    print(
        overhead_rows(
            "MLP, 16 features",
            mlp16().to(device),
            torch.randn(1, 16, device=device),
            mlp_mask,
            args.repeats,
            device,
        )
    )
    image = torch.rand(1, 3, 32, 32, device=device)
    patches = patch_mask().to(device)
    cnns = {
        "strided CNN 3x32x32 (8/16 ch), 16 patches": (cnn32(), args.repeats),
        "LeNet-style CNN 3x32x32 (16/32 ch), 16 patches": (lenet32(), max(3, args.repeats // 3)),
    }
    for name, (model, repeats) in cnns.items():
        print(overhead_rows(name, model.to(device), image, patches, repeats, device))

    print("\n| case (d = 8) | ExactShapley s | Captum ShapleyValues s | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    model = mlp16().to(device)
    x = torch.randn(1, 16, device=device)
    mask8 = (torch.arange(16, device=device) // 2)[None]
    explainer = ExactShapley(model)
    explainer.attribute(x, target=0, feature_mask=mask8)
    ours = statistics.median(
        timed(lambda: explainer.attribute(x, target=0, feature_mask=mask8), device)
        for _ in range(args.repeats)
    )
    theirs = captum_exact_time(model, x, mask8, device)
    print(f"| MLP, 16 inputs in 8 features | {ours:.4f} | {theirs:.2f} | {theirs / ours:.0f}x |")


if __name__ == "__main__":
    main()
