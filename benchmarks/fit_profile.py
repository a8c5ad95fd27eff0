"""The estimators' fits at d = 49 on any device, and where BayesShap's posterior spends its time.

Fit only, on values computed once: the kernel estimator, the default
(``PairedKernelShap()``'s cubic fit above 32 features) and ``BayesShap()``'s
posterior (the Walsh-basis process), 16 examples x 1,024 evaluations of a
random tanh MLP, median of 5 calls after one untimed call (synchronised on
CUDA). Then one ``torch.profiler`` trace of the posterior: the ops by device
time (CUDA) or CPU time. On the GPU, this is the script to run if
``gpu_defaults.py`` still shows ``BayesShap`` under 0.9 of the bare forward.

Run:  python benchmarks/fit_profile.py [--device cuda] [--rows 15]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from captum_graphshap.engine.plan import Plan
from captum_graphshap.plans.paired_designs import paired_kernel_plan
from captum_graphshap.plans.regression_adjusted import cubic_kernel_plan
from captum_graphshap.plans.walsh_gp import posterior_fit_pairs, walsh_gp_design

D, EXAMPLES, BUDGET = 49, 16, 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--rows", type=int, default=15, help="ops listed in the trace")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, 64), nn.Tanh(), nn.Linear(64, 1)).double().to(device)
    x = torch.randn(EXAMPLES, D, dtype=torch.float64, device=device)

    def values_of(plan: Plan) -> Tensor:
        rows = plan.coalitions.dense().double()
        with torch.no_grad():
            return torch.stack([model(x[n] * rows)[:, 0] for n in range(EXAMPLES)])

    def seeded() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def milliseconds(call: Callable[[], object], repeats: int = 5) -> float:
        call()
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - start)
        return sorted(times)[repeats // 2] * 1e3

    pairs = (BUDGET - 2) // 2
    kernel = paired_kernel_plan(D, BUDGET - 2, seeded(), device)
    default = cubic_kernel_plan(D, pairs, seeded(), device)
    design = walsh_gp_design(D, pairs, seeded(), device, fit_pairs=posterior_fit_pairs(D))
    fits: dict[str, Callable[[], object]] = {}
    for name, plan in (("kernel", kernel), ("default (cubic)", default)):
        fits[name] = functools.partial(plan.estimator, values_of(plan))
    posterior_values = values_of(design.plan())
    fits["BayesShap posterior"] = lambda: design.posterior(posterior_values)
    print(f"d = {D}, {BUDGET} evaluations, {EXAMPLES} examples on {device}, fit only:")
    for name, call in fits.items():
        print(f"  {name:22s} {milliseconds(call):8.2f} ms")
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as trace:
        design.posterior(posterior_values)
        sync()
    key = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(trace.key_averages().table(sort_by=key, row_limit=args.rows))


if __name__ == "__main__":
    main()
