"""PairedKernelShap's estimators against shapiq's kADDSHAP and KernelSHAP: time without the model.

Prints, measured side by side in one run (each contender once per round, the
order rotating every round, after a warm-up; medians of ``--repeats`` rounds):

1. **Estimator time, model calls excluded**, at d = 16, budgets 1,024 and
   4,096, for 1 and 10 explicands: ours (``estimator=`` cubic,
   regression_mc, stratified, kernel and the default auto) and shapiq 1.4's
   ``kADDSHAP(max_order=2, pairing_trick=True)`` and
   ``KernelSHAP(pairing_trick=True)``, one ``approximate`` call per explicand
   (shapiq explains one game at a time). The game is a lookup table of a
   random ReLU MLP over all 2^16 coalitions of each explicand, so a model
   call costs one gather; **the time spent inside the model (or shapiq's
   game callable) is measured on every call and subtracted** from the
   contender's wall time. What remains for ours is the whole ``attribute``
   call less the model: option checks, the plan (coalition draw), the engine
   (building the masked rows, batching) and the estimator's fit.
   Columns ``plan`` and ``fit`` split ours further: ``plan`` is building the
   plan alone (``PairedKernelShap``'s own plan functions, values not needed)
   and ``fit`` is ``plan.estimator(values)`` on precomputed values, timed in
   the same rounds. Ratios are to kADDSHAP on the same explicands (median of
   the per-round ratios).
2. **Peak memory at d = 1,024** (``--memory``), 10 explicands, a cheap MLP
   (1,024 -> 32 -> 1): each configuration runs in a fresh subprocess and
   reports its peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``)
   less the resident set just before ``attribute`` (imports, model and
   inputs); torch's CPU allocator returns memory to the OS, so this is the
   call's own high-water mark, model activations included.

Threads: ``--threads`` (default 1) sets ``torch.set_num_threads`` and the
BLAS/OpenMP threads numpy uses (set before numpy loads), for both libraries.

Run:  OMP_NUM_THREADS=1 python benchmarks/estimator_speed.py [--repeats 5] [--threads 1]
                                                           [--budgets 1024,4096] [--memory]
"""

from __future__ import annotations

import argparse
import os
import sys

# BLAS threads are fixed when numpy loads: parse --threads first
_threads = "1"
for _index, _arg in enumerate(sys.argv):
    if _arg == "--threads" and _index + 1 < len(sys.argv):
        _threads = sys.argv[_index + 1]
    elif _arg.startswith("--threads="):
        _threads = _arg.split("=", 1)[1]
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, _threads)

import functools  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _timing import median_ratio, rotating_rounds  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from captum_graphshap import PairedKernelShap  # noqa: E402
from captum_graphshap.attr.paired_kernel_shap import auto_plan  # noqa: E402
from captum_graphshap.plans.paired_designs import paired_kernel_plan  # noqa: E402
from captum_graphshap.plans.regression_adjusted import cubic_kernel_plan  # noqa: E402
from captum_graphshap.plans.regression_mc import regression_mc_plan  # noqa: E402

OURS = ("cubic", "regression_mc", "stratified", "kernel", "auto")
CPU = torch.device("cpu")


class Stopwatch:
    """Accumulates the wall time spent inside the wrapped model calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self.start


class LookupGame(nn.Module):
    """Explicand ``n`` is ``x_n = (n + 1) 1`` against a zero baseline; a masked row
    ``z x_n`` is looked up in ``table[n, code(z)]`` (the empty row is the same for all)."""

    def __init__(self, table: Tensor, watch: Stopwatch) -> None:
        super().__init__()
        self.table, self.watch = table, watch
        d = int(np.log2(table.shape[1]))
        self.powers = 2 ** torch.arange(d, dtype=torch.long)

    def forward(self, rows: Tensor) -> Tensor:
        with self.watch:
            example = (rows.amax(dim=1).round().long() - 1).clamp_min(0)
            code = ((rows != 0).long() * self.powers).sum(dim=1)
            return self.table[example, code]


def game_table(d: int, examples: int, seed: int = 0) -> Tensor:
    """``(N, 2^d)`` float64 values of a random ReLU MLP at ``z * x_n`` for every ``z``."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
    )
    model = model.double()
    codes = torch.arange(2**d)
    z = ((codes[:, None] >> torch.arange(d)) & 1).double()
    x = torch.randn(examples, d, dtype=torch.float64)
    with torch.no_grad():
        return torch.stack([model(z * x[n])[:, 0] for n in range(examples)])


def plan_for(estimator: str, d: int, budget: int, generator: torch.Generator):
    """The plan ``PairedKernelShap(estimator=...)`` builds for ``budget`` evaluations."""
    count = budget - 2
    count -= count % 2
    if estimator == "auto":
        plan, chosen = auto_plan(d, count, generator, CPU)
        if plan is not None:
            return plan
        estimator = chosen
    if estimator == "kernel":
        return paired_kernel_plan(d, count, generator, CPU)
    if estimator == "regression_mc":
        return regression_mc_plan(d, (count + 1) // 2, generator, CPU)
    triples = 0 if estimator == "stratified" else None
    return cubic_kernel_plan(d, (count + 1) // 2, generator, CPU, triples=triples)


def timing(d: int, budget: int, examples: int, table: Tensor, repeats: int) -> None:
    """One table: every contender's time less its model time, and ratios to kADDSHAP."""
    import shapiq

    watch = Stopwatch()
    game = LookupGame(table[:examples], watch)
    inputs = (torch.arange(examples, dtype=torch.float64) + 1)[:, None].expand(examples, d)
    baselines = torch.zeros_like(inputs)
    powers = 2 ** np.arange(d)
    host = table[:examples].numpy()
    model_seconds: dict[str, list[float]] = {}
    contenders: dict[str, Callable[[], object]] = {}

    def ours(estimator: str) -> Callable[[], object]:
        explainer = PairedKernelShap(game)

        def run() -> object:
            generator = torch.Generator().manual_seed(0)
            return explainer.attribute(
                inputs, baselines, budget=budget, generator=generator, estimator=estimator
            )

        return run

    def peer(kind: str, **options: object) -> Callable[[], object]:
        def run() -> object:
            out = []
            for n in range(examples):

                def value(z: np.ndarray, row: int = n) -> np.ndarray:
                    with watch:
                        return host[row, np.asarray(z, dtype=np.int64) @ powers]

                approximator = getattr(shapiq, kind)(n=d, random_state=n, **options)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out.append(approximator.approximate(budget=budget, game=value))
            return out

        return run

    def plan_only(estimator: str) -> Callable[[], object]:
        return lambda: plan_for(estimator, d, budget, torch.Generator().manual_seed(0))

    def fit_only(estimator: str) -> Callable[[], object]:
        plan = plan_for(estimator, d, budget, torch.Generator().manual_seed(0))
        with torch.no_grad():
            rows = plan.coalitions.dense()
            values = torch.stack([game(inputs[n] * rows.double()) for n in range(examples)])
        return lambda: plan.estimator(values)

    for estimator in OURS:
        contenders[estimator] = ours(estimator)
        contenders[f"{estimator} plan"] = plan_only(estimator)
        contenders[f"{estimator} fit"] = fit_only(estimator)
    contenders["kADDSHAP"] = peer("kADDSHAP", max_order=2, pairing_trick=True)
    contenders["KernelSHAP"] = peer("KernelSHAP", pairing_trick=True)

    def metered(name: str, fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            before = watch.seconds
            result = fn()
            model_seconds.setdefault(name, []).append(watch.seconds - before)
            return result

        return run

    wrapped = {name: metered(name, fn) for name, fn in contenders.items()}
    for fn in wrapped.values():  # warm-up
        fn()
    model_seconds.clear()
    times = rotating_rounds(wrapped, repeats, CPU)
    net = {name: [t - m for t, m in zip(times[name], model_seconds[name])] for name in times}
    peer_net = statistics.median(net["kADDSHAP"])
    print(f"\n### d = {d}, budget = {budget}, {examples} explicand(s) (ms, median of {repeats})\n")
    print("| contender | total less model | model | plan | fit | / kADDSHAP |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in (*OURS, "kADDSHAP", "KernelSHAP"):
        plan_ms = fit_ms = "-"
        if name in OURS:
            plan_ms = f"{1e3 * statistics.median(net[f'{name} plan']):.1f}"
            fit_ms = f"{1e3 * statistics.median(net[f'{name} fit']):.1f}"
        print(
            f"| {name} | {1e3 * statistics.median(net[name]):.1f} "
            f"| {1e3 * statistics.median(model_seconds[name]):.1f} | {plan_ms} | {fit_ms} "
            f"| {median_ratio(net, name, 'kADDSHAP'):.2f} |"
        )
    print(f"\nkADDSHAP less model: {1e3 * peer_net:.1f} ms")


# ------------------------------------------------------------------ memory

MEMORY_CASES = (
    ("auto", 4096),
    ("cubic", 4096),
    ("stratified", 4096),
    ("regression_mc", 4096),
    ("auto", 16384),
)


def memory_child(estimator: str, budget: int, d: int, examples: int) -> dict[str, float]:
    """Runs in a fresh process: peak RSS of one ``attribute`` call over the RSS before it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1)).eval()
    inputs = torch.randn(examples, d)
    baselines = torch.zeros_like(inputs)
    explainer = PairedKernelShap(model)
    with open("/proc/self/statm") as handle:
        before = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    with torch.no_grad():
        explainer.attribute(
            inputs,
            baselines,
            target=0,
            budget=budget,
            generator=torch.Generator().manual_seed(0),
            estimator=estimator,
        )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"peak_bytes": peak - before, "seconds": seconds}


def memory(d: int, examples: int) -> None:
    print(f"\n### peak memory, d = {d}, {examples} explicands (MLP {d} -> 32 -> 1)\n")
    print("| estimator | budget | peak RSS over start (MiB) | wall (s, model included) |")
    print("|---|---:|---:|---:|")
    for estimator, budget in MEMORY_CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--child", f"{estimator},{budget},{d},{examples}"],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            why = out.stderr.strip().splitlines()[-1][:90]
            print(f"| {estimator} | {budget} | failed: {why} | |")
            continue
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {estimator} | {budget} | {result['peak_bytes'] / 2**20:.0f} "
            f"| {result['seconds']:.2f} |"
        )


def fit_at_49(repeats: int, d: int = 49, budget: int = 1024, examples: int = 16) -> None:
    """The default's fit against the kernel estimator's, per example, at d = 49 (issue 31).

    The values are a random tanh MLP's at ``z * x_n`` for the plan's rows
    (evaluated once, outside the timing). Two timings per contender, on the same
    rounds: the fit alone (``plan.estimator(values)`` on a plan that has
    already served a batch, so what a plan keeps for every batch is not
    counted), and the plan and the fit (a fresh plan from the same seed each
    time, then its estimator: what one ``attribute`` call costs besides the
    model). Target: the default's fit costs at most 10x the kernel
    estimator's per example.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 1)).double()
    x = torch.randn(examples, d, dtype=torch.float64)
    contenders: dict[str, Callable[[], object]] = {}
    for estimator in ("auto", "kernel"):
        plan = plan_for(estimator, d, budget, torch.Generator().manual_seed(0))
        with torch.no_grad():
            rows = plan.coalitions.dense().double()
            values = torch.stack([model(x[n] * rows)[:, 0] for n in range(examples)])

        def fresh(estimator: str = estimator, values: Tensor = values) -> object:
            return plan_for(estimator, d, budget, torch.Generator().manual_seed(0)).estimator(
                values
            )

        contenders[estimator] = functools.partial(plan.estimator, values)
        contenders[f"{estimator}+plan"] = fresh
        contenders[estimator]()  # warm-up: the plan keeps what serves every batch
        fresh()
    times = rotating_rounds(contenders, repeats, CPU)
    print(
        f"\nd = {d}, {budget} evaluations, batch {examples} "
        f"(median of {repeats} rounds, ms per example):"
    )
    for name, seconds in times.items():
        label = name.replace("auto", "default (auto)")
        print(f"  {label:22s} {statistics.median(seconds) / examples * 1e3:8.2f}")
    ratio = median_ratio(times, "auto", "kernel")
    print(f"  fit: default / kernel: {ratio:.1f}x (target <= 10x)")
    ratio = median_ratio(times, "auto+plan", "kernel+plan")
    print(f"  plan and fit: default / kernel: {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budgets", default="1024,4096")
    parser.add_argument("--batches", default="1,10")
    parser.add_argument("--memory", action="store_true", help="also the d = 1,024 memory table")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--fit49-only", action="store_true", help="only the d = 49 fit table (batch 16)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child is not None:
        estimator, budget, d, examples = args.child.split(",")
        print(json.dumps(memory_child(estimator, int(budget), int(d), int(examples))))
        return
    print(
        f"torch threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    )
    fit_at_49(args.repeats)
    if args.fit49_only:
        return
    if not args.memory_only:
        d = 16
        batches = [int(b) for b in args.batches.split(",")]
        table = game_table(d, max(batches))
        for budget in (int(b) for b in args.budgets.split(",")):
            for examples in batches:
                timing(d, budget, examples, table, args.repeats)
    if args.memory or args.memory_only:
        memory(1024, 10)


if __name__ == "__main__":
    main()
