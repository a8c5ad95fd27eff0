"""Full-size images: plan build, evaluations, wall time and peak memory at 224 x 224.

Each case runs in a fresh process, so its peak memory is its own (peak
resident set on CPU, ``torch.cuda.max_memory_allocated`` on a GPU):

* the L-/C-Shapley k = 1 plans of a 224 x 224 pixel grid, built alone;
* pixel-level L-Shapley and C-Shapley k = 1 end to end through a cheap CNN
  (about 1.14 million model rows: the plan and the engine are the point; on a
  CPU resnet18 would take hours for these rows, on a GPU it is ``--device
  cuda`` work);
* C-Shapley and L-Shapley k = 1 on SLIC superpixels (50 and 200 segments) of
  scikit-image's astronaut at 224 x 224, through torchvision's
  ``resnet18(weights=None)`` (random weights: nothing is downloaded), with
  the default (measured) batching; SLIC 50 also with the former fixed
  2^19-element calls (3 rows per call) and with ``perturbations_per_eval=32``,
  for comparison.

``--quick`` keeps the plan builds and runs the end-to-end cases smaller
(112 x 112 pixel grid, SLIC 50 only).

Run:  python benchmarks/vision.py [--quick] [--device cpu|cuda] [--threads 2]
          [--only "SLIC 200;L-Shapley"]   (cases whose name contains one of the strings)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
from large_plans import cheap_cnn  # the same cheap model as large_plans.py

import captum_graphshap as cg
from captum_graphshap.graphs import GridGraph
from captum_graphshap.plans.l_c_shapley import c_shapley_plan, l_shapley_plan


class Counting(torch.nn.Module):
    """Counts model rows and the rows of each call."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.shape[0])
        return self.model(x)


def resnet18() -> torch.nn.Module:
    from torchvision.models import resnet18 as build

    torch.manual_seed(0)
    return build(weights=None).eval()


def astronaut(size: int) -> tuple[np.ndarray, torch.Tensor]:
    """The astronaut at ``size x size``: the HWC array (for SLIC) and a normalised CHW batch."""
    from skimage import data
    from skimage.transform import resize

    image = resize(data.astronaut(), (size, size), anti_aliasing=True)  # floats in [0, 1]
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    x = (torch.from_numpy(image).permute(2, 0, 1).float() - mean) / std
    return image, x[None]


def plan_only(method: str, size: int) -> dict[str, object]:
    build = c_shapley_plan if method == "C" else l_shapley_plan
    graph = GridGraph(size, size)
    start, cpu = time.perf_counter(), time.process_time()
    plan = build(graph, 1)
    store = plan.coalitions
    mib = (store.members.numel() + store.offsets.numel()) * 8 / 2**20  # type: ignore[attr-defined]
    return {
        "plan_s": time.perf_counter() - start,
        "plan_cpu_s": time.process_time() - cpu,
        "coalitions": len(plan),
        "detail": f"{len(plan):,} coalitions, {mib:.0f} MiB of member ids",
    }


def explain(
    method: str,
    model: torch.nn.Module,
    x: torch.Tensor,
    device: torch.device,
    per_eval: int | None = None,
    **kwargs: object,
) -> dict[str, object]:
    counting = Counting(model.to(device))
    explainer = (cg.CShapley if method == "C" else cg.LShapley)(counting)
    x = x.to(device)
    with torch.no_grad():
        target = int(model(x).argmax())
    # the plan alone (cached afterwards, so the call below does not rebuild it)
    start = time.perf_counter()
    graph = kwargs.get("graph")
    if graph is None:
        graph = GridGraph(x.shape[-2], x.shape[-1])
    (c_shapley_plan if method == "C" else l_shapley_plan)(graph, 1)  # type: ignore[arg-type]
    plan_s = time.perf_counter() - start
    counting.calls.clear()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = explainer.attribute(
            x,
            target=target,
            k=1,
            perturbations_per_eval=per_eval,
            show_progress=False,
            return_evaluations=True,
            **kwargs,
        )
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    rows = sum(counting.calls)
    sizes = sorted(set(counting.calls[:-1] or counting.calls))
    settled = max(set(counting.calls), key=counting.calls.count)
    return {
        "plan_s": plan_s,
        "evaluations": int(result.n_evaluations[0]),
        "wall_s": wall,
        "rows_per_s": rows / wall,
        "detail": f"rows per call {sizes[0]}..{sizes[-1]}, mostly {settled}",
    }


def superpixels(method: str, segments: int, size: int, device: torch.device, per_eval=None):
    image, x = astronaut(size)
    graph = cg.SuperpixelGraph.slic(image, n_segments=segments, compactness=10)
    mask = graph.feature_mask[None, None].expand(1, 3, size, size)
    out = explain(
        method, resnet18(), x, device, per_eval, feature_mask=mask.to(device), graph=graph
    )
    out["detail"] = f"{graph.num_nodes} segments; {out['detail']}"
    return out


def cases(quick: bool) -> dict[str, tuple]:
    pixels = 112 if quick else 224
    table: dict[str, tuple] = {
        "C-Shapley k=1 plan, 224x224 pixel grid": ("plan", "C", 224),
        "L-Shapley k=1 plan, 224x224 pixel grid": ("plan", "L", 224),
        f"C-Shapley k=1, {pixels}x{pixels} pixels, cheap CNN": ("pixels", "C", pixels),
        f"L-Shapley k=1, {pixels}x{pixels} pixels, cheap CNN": ("pixels", "L", pixels),
        "C-Shapley k=1, SLIC 50, resnet18 224x224": ("slic", "C", 50, None),
    }
    if not quick:
        table.update(
            {
                "C-Shapley k=1, SLIC 50, resnet18, former fixed calls (3 rows)": (
                    "slic",
                    "C",
                    50,
                    3,
                ),
                "C-Shapley k=1, SLIC 50, resnet18, perturbations_per_eval=32": (
                    "slic",
                    "C",
                    50,
                    32,
                ),
                "L-Shapley k=1, SLIC 50, resnet18 224x224": ("slic", "L", 50, None),
                "C-Shapley k=1, SLIC 200, resnet18 224x224": ("slic", "C", 200, None),
            }
        )
    return table


def run_case(spec: list, device: torch.device) -> None:
    kind = spec[0]
    if kind == "plan":
        out = plan_only(spec[1], spec[2])
    elif kind == "pixels":
        x = torch.rand(1, 3, spec[2], spec[2], generator=torch.Generator().manual_seed(0))
        out = explain(spec[1], cheap_cnn(), x, device)
    else:
        out = superpixels(spec[1], spec[2], 224, device, spec[3])
    if device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        out["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller end-to-end cases")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per case")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        help="run only the cases whose name contains one of these ';'-separated strings",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.case:
        run_case(json.loads(args.case), device)
        return
    memory = "peak GPU memory" if device.type == "cuda" else "peak RSS"
    print(f"torch {torch.__version__}, {device}, {args.threads} threads; one process per case\n")
    print(f"| case | plan s | evaluations | wall s | rows/s | {memory} | notes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, spec in cases(args.quick).items():
        if args.only and not any(part in name for part in args.only.split(";")):
            continue
        command = [sys.executable, __file__, "--case", json.dumps(spec)]
        command += ["--device", args.device, "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"| {name} | failed | | | | | {done.stderr.strip().splitlines()[-1]} |")
            continue
        out = json.loads(done.stdout.strip().splitlines()[-1])
        plan = f"{out['plan_s']:.2f}"
        if "plan_cpu_s" in out:
            plan += f" ({out['plan_cpu_s']:.2f} CPU)"
        evaluations = f"{out['evaluations']:,}" if "evaluations" in out else "—"
        wall = f"{out['wall_s']:.1f}" if "wall_s" in out else "—"
        rate = f"{out['rows_per_s']:,.0f}" if "rows_per_s" in out else "—"
        print(
            f"| {name} | {plan} | {evaluations} | {wall} | {rate} | "
            f"{out['peak_gib']:.2f} GiB | {out['detail']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
