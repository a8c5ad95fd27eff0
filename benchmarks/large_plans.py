"""Plans at real sizes: build time, end-to-end time and peak memory.

Each case runs in a fresh process, so its peak resident memory is its own:

* C-Shapley k = 1 on a 128 x 128 pixel grid and L-Shapley k = 1 on 112 x 112,
  end to end through a cheap strided CNN (the model is not the point: the
  plan and the engine are);
* plan builds alone: C-Shapley k = 1 at 128 x 128 and 224 x 224 (refused
  with the count), L-Shapley k = 2 on a line of 16,384, the Myerson value on
  lines of 200 and 500;
* ShapleySampling at d = 200 with 5,000 orderings, one and two examples;
* exact Shapley of a 7-token prompt of a tiny GPT-2 trained in-process, in
  Captum's LLMAttribution (our ExactShapley and Captum's ShapleyValues) and
  in our LLMShapley (``--llm``; needs ``transformers``; minutes, as Captum's
  ShapleyValues walks 7! orderings of 7 model calls each).

Wall times depend on what else the machine runs; peak memory does not.

Run:  python benchmarks/large_plans.py [--llm]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from _timing import add_device_argument, use_device

import captum_graphshap as cg
from captum_graphshap.graphs import GridGraph, LineGraph
from captum_graphshap.plans.exact import myerson_plan
from captum_graphshap.plans.l_c_shapley import c_shapley_plan, l_shapley_plan


def cheap_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    ).eval()


def end_to_end(method: str, size: int) -> str:
    explainer = (cg.CShapley if method == "C" else cg.LShapley)(cheap_cnn())
    x = torch.rand(1, 3, size, size)
    result = explainer.attribute(x, target=1, k=1, return_evaluations=True)
    return f"{int(result.n_evaluations[0]):,} coalitions evaluated"


def plan_only(kind: str, size: int, k: int) -> str:
    graph = LineGraph(size) if kind.endswith("line") else GridGraph(size, size)
    build = {"C": c_shapley_plan, "L": l_shapley_plan, "Myerson": myerson_plan}[kind.split()[0]]
    try:
        plan = build(graph) if kind.startswith("Myerson") else build(graph, k)
    except ValueError as error:
        return "refused: " + str(error).split(";")[0]
    return f"{len(plan):,} coalitions"


def sampling(batch: int) -> str:
    torch.manual_seed(0)
    model = torch.nn.Linear(200, 1)
    x = torch.randn(batch, 200)
    phi = cg.ShapleySampling(model).attribute(
        x, target=0, n_samples=5000, generator=torch.Generator().manual_seed(0)
    )
    return f"attributions {tuple(phi.shape)}"


def llm() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from captum.attr import LLMAttribution, ShapleyValues, TextTokenInput

    from captum_graphshap.llm import LLMShapley
    from tests import llm_task

    model, tokenizer = llm_task.trained_model(250), llm_task.LetterTokenizer()
    inp = TextTokenInput("c f # h a k d", tokenizer)
    times = {}
    for name, wrapper, method in (
        ("Captum ShapleyValues in LLMAttribution", LLMAttribution, ShapleyValues),
        ("ExactShapley in LLMAttribution", LLMAttribution, cg.ExactShapley),
        ("ExactShapley in LLMShapley", LLMShapley, cg.ExactShapley),
    ):
        explainer = wrapper(method(model), tokenizer)
        start = time.perf_counter()
        explainer.attribute(inp, target="h", forward_in_tokens=False)
        times[name] = time.perf_counter() - start
    return "; ".join(f"{name} {seconds:.3f} s" for name, seconds in times.items())


CASES = {
    "C-Shapley k=1, 128x128 pixels, end to end": lambda: end_to_end("C", 128),
    "L-Shapley k=1, 112x112 pixels, end to end": lambda: end_to_end("L", 112),
    "C-Shapley k=1 plan, 128x128": lambda: plan_only("C", 128, 1),
    "C-Shapley k=1 plan, 224x224": lambda: plan_only("C", 224, 1),
    "L-Shapley k=2 plan, line of 16,384": lambda: plan_only("L line", 16384, 2),
    "Myerson plan, LineGraph(200)": lambda: plan_only("Myerson line", 200, 0),
    "Myerson plan, LineGraph(500)": lambda: plan_only("Myerson line", 500, 0),
    "ShapleySampling d=200, 5,000 orderings, 1 example": lambda: sampling(1),
    "ShapleySampling d=200, 5,000 orderings, 2 examples": lambda: sampling(2),
    "exact Shapley of a 7-token prompt, tiny GPT-2": llm,
}


def run_case(name: str) -> None:
    torch.set_num_threads(2)
    start = time.perf_counter()
    detail = CASES[name]()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(json.dumps({"seconds": seconds, "peak_gib": peak, "detail": detail}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--llm", action="store_true", help="add the GPT-2 case (minutes)")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.case:
        use_device(args.device)
        run_case(args.case)
        return
    print(f"torch {torch.__version__}, CPU, 2 threads; one fresh process per case\n")
    print("| case | wall s | peak memory (process) | result |")
    print("| --- | ---: | ---: | --- |")
    for name in CASES:
        if not args.llm and "GPT-2" in name:
            continue
        done = subprocess.run(
            [sys.executable, __file__, "--case", name, "--device", args.device],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            print(f"| {name} | failed | | {done.stderr.strip().splitlines()[-1]} |")
            continue
        out = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {name} | {out['seconds']:.2f} | {out['peak_gib']:.2f} GiB | {out['detail']} |")


if __name__ == "__main__":
    main()
