"""Where the default's own time goes at d = 49, on any device: the whole call on a near-free model.

The model is a linear map of a 7 x 7 image (1 channel), so the time is the
estimator's: 16 examples at 1,024 evaluations, the 49 features given as a
patch mask (whose geometry gives the default's process its local parities,
as on resnet18's patches in ``gpu_defaults.py``). Printed:

* the call's time (median of 3 after one untimed call; synchronised on
  CUDA) for ``PairedKernelShap``'s default, its ``estimator="kernel"`` and
  ``BayesShap``; with ``--chunks`` the default also at each size of
  ``walsh_gp.CHUNK_FLOATS`` given (its estimates must not change);
* the default's phases, each function timed by a synchronised wrapper
  (nested, so they overlap);
* a ``torch.profiler`` table of one default call (``--rows`` ops by device
  time on CUDA, CPU time elsewhere).

Run this when ``gpu_defaults.py`` shows the default under 0.9 of the bare
forward. On an H200 it found the posterior in chunks sized for a CPU: 119 ms
at 32 M floats a chunk, 24 ms at 256 M (now the accelerator's).

Run:  python benchmarks/fit_profile.py [--device cuda] [--rows 18] [--chunks 32,256,1024]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _timing import timed
from torch import Tensor, nn

import captum_graphshap.plans.walsh_gp as walsh_gp
import captum_graphshap.plans.walsh_kriging as walsh_kriging
from captum_graphshap import BayesShap, PairedKernelShap

EXAMPLES, SIDE, BUDGET = 16, 7, 1024
#: (module, function) pairs timed one by one in the phase table
PHASES = [
    (walsh_gp, "walsh_gp_posterior"),
    (walsh_gp, "posterior_parts"),
    (walsh_gp, "_relevance_scale"),
    (walsh_gp, "_factored_covariances"),
    (walsh_gp, "built_covariances"),
    (walsh_gp, "pattern_covariances"),
    (walsh_gp, "add_local_covariances"),
    (walsh_gp, "linear_projection"),
    (walsh_gp, "factor_projected"),
    (walsh_kriging, "cholesky_in_place"),
    (walsh_gp, "kriging"),
    (walsh_gp, "_shapley_covariance"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=18, help="ops listed in the trace")
    parser.add_argument("--chunks", default="", help="CHUNK_FLOATS sizes to try, in M floats")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(SIDE * SIDE, 1)).to(device).eval()
    x = torch.randn(EXAMPLES, 1, SIDE, SIDE, device=device)
    mask = torch.arange(SIDE * SIDE, device=device).view(1, 1, SIDE, SIDE)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def call(cls: type, **options: object) -> Callable[[], Tensor]:
        def run() -> Tensor:
            return cls(model).attribute(
                x, target=0, feature_mask=mask, budget=BUDGET,
                generator=torch.Generator().manual_seed(0), **options,
            )  # fmt: skip

        return run

    def milliseconds(run: Callable[[], Tensor]) -> tuple[float, Tensor]:
        """Median of 3 calls after an untimed one, and the last call's estimate."""
        outputs = [run()]
        times = [timed(lambda: outputs.append(run()), device) for _ in range(3)]
        return statistics.median(times) * 1e3, outputs[-1]

    print(f"d = {SIDE * SIDE} (a {SIDE} x {SIDE} patch mask), {EXAMPLES} examples x {BUDGET} "
          f"evaluations of a linear model on {device}; whole calls:")  # fmt: skip
    for name, run in [
        ("PairedKernelShap (default)", call(PairedKernelShap)),
        ('PairedKernelShap(estimator="kernel")', call(PairedKernelShap, estimator="kernel")),
        ("BayesShap", call(BayesShap)),
    ]:
        print(f"  {name:38s} {milliseconds(run)[0]:8.1f} ms")
    if args.chunks:
        key = "cpu" if device.type == "cpu" else "accelerator"
        saved, estimates = walsh_gp.CHUNK_FLOATS[key], []
        try:
            for size in (int(text) for text in args.chunks.split(",")):
                walsh_gp.CHUNK_FLOATS[key] = size << 20
                ms, out = milliseconds(call(PairedKernelShap))
                estimates.append(out)
                print(f"  default, chunks of {size} M floats   {ms:8.1f} ms")
        finally:
            walsh_gp.CHUNK_FLOATS[key] = saved
        apart = max(float((e - estimates[0]).abs().max()) for e in estimates)
        print(f"  estimates across chunk sizes at most {apart:.1e} apart")
    print_phases(call(PairedKernelShap), sync)
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as trace:
        call(PairedKernelShap)()
        sync()
    key = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(trace.key_averages().table(sort_by=key, row_limit=args.rows))


def print_phases(run: Callable[[], Tensor], sync: Callable[[], None]) -> None:
    """The default's phases, each wrapped to synchronise and time itself (restored after)."""
    spent: dict[str, float] = {}
    saved = [(module, name, getattr(module, name)) for module, name in PHASES]

    def timing(name: str, function: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            sync()
            start = time.perf_counter()
            result = function(*args, **kwargs)
            sync()
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
            return result

        return wrapper

    try:
        for module, name, function in saved:
            setattr(module, name, timing(name, function))
        run()
        spent.clear()
        start = time.perf_counter()
        run()
        total = time.perf_counter() - start
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
    print(f"the default's phases (one call, {total * 1e3:.1f} ms with the wrappers; nested):")
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {name:28s} {seconds * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
