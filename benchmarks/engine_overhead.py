"""Engine overhead of ExactShapley, and its speed against SHAP and Captum.

Prints, measured side by side in one run:

1. ExactShapley wall time / time of pushing the same rows through the bare
   model (inputs pre-built, same batch sizes, no_grad) for
   (a) an MLP on 16 features and (b) a small CNN on 3x32x32 grouped into
   16 patches of 8x8 pixels. Target: <= 1.2x.
2. Speed-up over SHAP's ExactExplainer (the fastest exact peer) on the same
   models and features.
3. Speed-up over captum.attr.ShapleyValues at d = 8 (it walks d! orderings).

Run:  python benchmarks/engine_overhead.py [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from captum_graphshap import ExactShapley
from captum_graphshap.coalitions import all_coalitions


def best_of(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


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


def patch_mask(size: int = 32, patch: int = 8) -> torch.Tensor:
    side = size // patch
    ids = torch.arange(side * side).reshape(side, side)
    return ids.repeat_interleave(patch, 0).repeat_interleave(patch, 1)[None, None]


def bare_time(model, x, mask, d, rows_per_call, repeats, device) -> float:
    """The physical limit: the same rows through the model, inputs already built."""
    coalitions = all_coalitions(d, device)
    chunks = []
    for start in range(0, coalitions.shape[0], rows_per_call):
        keep = coalitions[start : start + rows_per_call][:, mask.reshape(-1)].view(
            -1, *mask.shape[1:]
        )
        chunks.append(torch.where(keep, x, torch.zeros_like(x)))

    def run():
        with torch.no_grad():
            for chunk in chunks:
                model(chunk)

    return best_of(run, repeats, device)


def shap_exact_time(model, x, mask, d, repeats, device) -> float | None:
    """SHAP's ExactExplainer at its best: one batch for all 2^d coalitions,
    timed after a warm-up call (its first call JIT-compiles with numba)."""
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
    explainer(row, batch_size=2**d)  # warm-up
    return best_of(lambda: explainer(row, batch_size=2**d), repeats, device)


def captum_exact_time(model, x, mask, device) -> float:
    from captum.attr import ShapleyValues

    start = time.perf_counter()
    ShapleyValues(model).attribute(x, target=0, feature_mask=mask, perturbations_per_eval=256)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def overhead_row(name, model, x, mask, repeats, device) -> str:
    explainer = ExactShapley(model)
    explainer.attribute(x, target=0, feature_mask=mask)  # warm-up
    ours = best_of(lambda: explainer.attribute(x, target=0, feature_mask=mask), repeats, device)
    rows_per_call = max(1, 2**21 // x[0].numel())
    bare = bare_time(model, x, mask, 16, rows_per_call, repeats, device)
    shap_s = shap_exact_time(model, x, mask, 16, repeats, device)
    shap_cell = f"{shap_s:.3f}" if shap_s is not None else "n/a"
    speedup = f"{shap_s / ours:.1f}x" if shap_s is not None else "n/a"
    return f"| {name} | {ours:.3f} | {bare:.3f} | {ours / bare:.2f}x | {shap_cell} | {speedup} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")

    print(
        "\n| case (d = 16) | ExactShapley s | bare model s | overhead | "
        "SHAP ExactExplainer s | speed-up vs SHAP |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    mlp_mask = torch.arange(16, device=device)[None]
    print(
        overhead_row(
            "MLP, 16 features",
            mlp16().to(device),
            torch.randn(1, 16, device=device),
            mlp_mask,
            args.repeats,
            device,
        )
    )
    print(
        overhead_row(
            "CNN 3x32x32, 16 patches of 8x8",
            cnn32().to(device),
            torch.rand(1, 3, 32, 32, device=device),
            patch_mask().to(device),
            args.repeats,
            device,
        )
    )

    print("\n| case (d = 8) | ExactShapley s | Captum ShapleyValues s | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    model = mlp16().to(device)
    x = torch.randn(1, 16, device=device)
    mask8 = (torch.arange(16, device=device) // 2)[None]
    explainer = ExactShapley(model)
    ours = best_of(
        lambda: explainer.attribute(x, target=0, feature_mask=mask8), args.repeats, device
    )
    theirs = captum_exact_time(model, x, mask8, device)
    print(f"| MLP, 16 inputs in 8 features | {ours:.4f} | {theirs:.2f} | {theirs / ours:.0f}x |")


if __name__ == "__main__":
    main()
