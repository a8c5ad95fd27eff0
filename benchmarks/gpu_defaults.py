"""Every class's default on resnet18 at 224 x 224: rows per second against the bare model.

torchvision's ``resnet18(weights=None)`` (random weights, nothing
downloaded), fp32, eval mode; 16 random images at 224 x 224 whose features
are the 49 patches of a 7 x 7 grid (32 x 32 pixels each); 1,024 evaluations
per image for every class that takes a budget (``budget=1024``), and its own
plan for those that do not (``CShapley``/``LShapley`` with ``k=1``).
``ExactShapley`` (2^49 coalitions) and ``MyersonValue`` (over a million
connected sets on the 7 x 7 grid) refuse this size, as they should.

For each call (timed twice, the best kept, after one untimed call of its own, as the bare model is
timed after its own; the first call's seconds are printed beside it): model
rows (counted by wrapping the model), seconds, rows per
second and their share of the bare model's rows per second (resnet18 alone
on random batches of 256, 512 and 1,024 images, the best), next to Captum's
``ShapleyValueSampling`` (``budget // 50`` orderings: 20, 1,000 evaluations) and ``KernelShap``
(1,024 samples, one image per call as Captum runs it; timed on ``--captum-images``
images and scaled to 16) where the class estimates the same thing. ``Shear``'s
budget also buys derivatives: its share counts its forward equivalents (the
forward rows plus 4 per Hessian-vector product row and 3 per gradient row,
the library's count).

Run:  python benchmarks/gpu_defaults.py [--device cuda] [--images 16] [--table PATH]
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import torch
from _table import append_row
from _timing import timed

import captum_graphshap as cg
from captum_graphshap.graphs import GridGraph

BUDGET = 1024


class Counting(torch.nn.Module):
    """The model, counting the rows it is called on."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.rows = model, 0
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        self.sizes.append(x.shape[0])
        return self.model(x)


def bare_rows_per_second(model: torch.nn.Module, side: int, device: torch.device) -> float:
    best = 0.0
    with torch.no_grad():
        for batch in (256, 512, 1024) if device.type == "cuda" else (16, 64):
            x = torch.randn(batch, 3, side, side, device=device)
            model(x)
            seconds = min(timed(functools.partial(model, x), device) for _ in range(2))
            print(f"bare forward at {batch:,} rows per call: {batch / seconds:,.0f} rows/s")
            best = max(best, batch / seconds)
    return best


def patch_mask(side: int, device: torch.device) -> torch.Tensor:
    index = torch.arange(side, device=device) // (side // 7)
    return (index[:, None] * 7 + index[None, :]).reshape(1, 1, side, side)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--captum-images", type=int, default=4)
    parser.add_argument("--budget", type=int, default=BUDGET, help="evaluations per image")
    parser.add_argument("--side", type=int, default=224, help="image side, a multiple of 7")
    parser.add_argument("--table", help="append the rows to this markdown table")
    parser.add_argument(
        "--profile",
        type=float,
        default=0.0,
        help="profile each call whose share is below this (torch.profiler: busy device "
        "time against wall time, and the top operations)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(weights=None).to(device).eval()
    counted = Counting(model)
    x = torch.randn(args.images, 3, args.side, args.side, device=device)
    mask = patch_mask(args.side, device)
    target = 3
    bare = bare_rows_per_second(model, args.side, device)
    print(f"resnet18 fp32 on {device}: bare forward {bare:,.0f} rows/s (best batch)")
    grid = GridGraph(7, 7)
    budget = {"budget": args.budget}

    def seeded() -> dict[str, Any]:
        return {"generator": torch.Generator().manual_seed(0)}

    cases: dict[str, tuple[Callable[[], Any], dict[str, Any], str | None]] = {
        "CShapley(k=1)": (cg.CShapley, {"k": 1, "graph": grid}, None),
        "LShapley(k=1)": (cg.LShapley, {"k": 1, "graph": grid}, None),
        f"ShapleySampling(budget={args.budget})": (cg.ShapleySampling, budget, "sampling"),
        f"PairedKernelShap(budget={args.budget}) (default)": (
            cg.PairedKernelShap,
            budget,
            "kernel",
        ),
        f'PairedKernelShap(estimator="kernel", budget={args.budget})': (
            cg.PairedKernelShap,
            {**budget, "estimator": "kernel"},
            "kernel",
        ),
        f"Shear(budget={args.budget})": (cg.Shear, budget, "sampling"),
        f"BayesShap(budget={args.budget})": (cg.BayesShap, budget, "kernel"),
        f"OwenValue(budget={args.budget}), the grid's hierarchy": (
            cg.OwenValue,
            {**budget, "hierarchy": grid.hierarchy()},
            None,
        ),
    }
    randomised = {"ShapleySampling", "PairedKernelShap", "Shear", "BayesShap", "OwenValue"}
    # warm-up: cuDNN, allocator, plans (one image, a small budget)
    cg.PairedKernelShap(counted).attribute(
        x[:1], target=target, feature_mask=mask, budget=64, **seeded()
    )
    captum = captum_seconds(model, x, mask, target, args.captum_images, args.budget, device)
    print(f"{'call':52s} {'rows':>10s} {'s':>7s} {'rows/s':>9s} {'share':>6s} {'Captum s':>9s}")
    for name, (cls, options, peer) in cases.items():
        explainer = cls(counted)
        extra = seeded() if cls.__name__ in randomised else {}
        # every class reports its evaluations per example (for Shear, with its derivatives
        # in forward equivalents: 4 per Hessian-vector product row, 3 per gradient row)
        results: list[Any] = []
        try:
            attribute = functools.partial(
                explainer.attribute,
                x,
                target=target,
                feature_mask=mask,
                return_evaluations=True,
                show_progress=False,
                **options,
                **extra,
            )
            call = functools.partial(_kept, attribute, results)
            # one untimed call of its own first, as the bare model is timed after its
            # own: cuDNN picks its kernels for each new batch shape on the first call
            first = timed(call, device)
            counted.rows = 0
            counted.sizes.clear()
            seconds = timed(call, device)
            rows, sizes = counted.rows, sorted(counted.sizes)
            seconds = min(seconds, timed(call, device))  # the best of two timed calls
        except Exception as error:  # report and go on: one table for every class
            print(f"{name:52s} failed: {type(error).__name__}: {error}"[:200])
            append_row(args.table, f"{name}: failed, {type(error).__name__}", args.images)
            continue
        share = rows / seconds / bare
        if cls is cg.Shear:  # its budget buys derivatives too: they count
            equivalents = int(results[-1].n_evaluations.sum())
            name = f"{name} [{equivalents:,} forward equivalents with its derivatives]"
            share = equivalents / seconds / bare
        theirs = captum.get(peer) if peer else None
        theirs_text = f"{theirs:9.2f}" if theirs is not None else "        -"
        print(
            f"{name:52s} {rows:10,d} {seconds:7.2f} {rows / seconds:9,.0f} {share:6.2f} "
            f"{theirs_text}  (first call {first:.2f} s)"
        )
        print(
            f"    {len(sizes)} model calls, rows per call min {sizes[0]:,} median "
            f"{sizes[len(sizes) // 2]:,} max {sizes[-1]:,}"
        )
        if share < args.profile:
            profile_call(call, device)
        if cls is cg.Shear:
            derivative_seconds(explainer, x, mask, target, device)
        append_row(
            args.table,
            f"{name}, resnet18 {args.side}x{args.side}, 49 patches",
            args.images,
            rows,
            seconds,
            rows / seconds,
            share,
            None if theirs is None else round(theirs, 2),
            None,
        )
    for peer, seconds in captum.items():
        print(f"Captum {peer}: {seconds:.2f} s for {args.images} images")


def profile_call(call: Callable[[], Any], device: torch.device) -> None:
    """One more call under torch.profiler: the device's busy time against the wall
    time (idle: host-bound or synchronising), and the operations that took the most."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as run:
        wall = timed(call, device)
    averages = run.key_averages()
    busy = sum(
        getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
        for e in averages
    )
    print(f"    profile: device busy {busy / 1e6:.3f} s of {wall:.3f} s wall (with profiler)")
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(averages.table(sort_by=key, row_limit=12, max_name_column_width=50))
    print(averages.table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=50))


def derivative_seconds(
    explainer: Any, x: torch.Tensor, mask: torch.Tensor, target: int, device: torch.device
) -> None:
    """Shear's derivatives alone: its cross-contributions, warm, in each form."""
    import warnings

    for kind in ("auto", "gradient"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = functools.partial(
                explainer.cross_contributions, x, target=target, feature_mask=mask, kind=kind
            )
            run()
            print(f"    Shear cross_contributions(kind={kind!r}): {timed(run, device):.3f} s")


def _kept(call: Callable[[], Any], results: list[Any]) -> None:
    """``call()``, its result appended to ``results``."""
    results.append(call())


def captum_seconds(
    model: torch.nn.Module,
    x: torch.Tensor,
    mask: torch.Tensor,
    target: int,
    images: int,
    budget: int,
    device: torch.device,
) -> dict[str, float]:
    """Captum's seconds for all the images: ShapleyValueSampling (20 orderings, all
    images in one call) and KernelShap (1,024 samples, per image, scaled)."""
    from captum.attr import KernelShap, ShapleyValueSampling

    count = x.shape[0]
    out = {}
    sampling = ShapleyValueSampling(model)
    out["sampling"] = timed(
        lambda: sampling.attribute(
            x,
            target=target,
            feature_mask=mask,
            n_samples=max(1, budget // 50),
            perturbations_per_eval=64,
        ),
        device,
    )
    kernel = KernelShap(model)
    images = min(images, count)
    try:
        import sklearn  # noqa: F401  (Captum's KernelShap fits with it)
    except ImportError:
        print("no scikit-learn: Captum's KernelShap is not timed")
        return out
    seconds = timed(
        lambda: [
            kernel.attribute(
                x[n : n + 1],
                target=target,
                feature_mask=mask,
                n_samples=budget,
                perturbations_per_eval=64,
            )
            for n in range(images)
        ],
        device,
    )
    out["kernel"] = seconds * count / images
    return out


if __name__ == "__main__":
    main()
