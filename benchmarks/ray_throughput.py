"""explain_dataset on Ray: throughput with 1 and 2 actors on one machine.

The workload is model-bound: ExactShapley over ``--features`` features
(``2^d`` coalitions per example) through an MLP, so the time is the model's.
Each run starts a fresh actor pool (``num_actors`` = 1, then 2, then 1, 2,
... in alternating rounds, so the shared machine's load falls on both), one
CPU and one torch thread per actor.

Two figures per run:

* wall: examples / the whole ``explain_dataset`` call, actor start-up included;
* steady: shards completed after each actor's first one, divided by the time
  between the first and the last completion (from the shard files' mtimes):
  the throughput once the actors are up, which is what a long job sees.

The target: 2 actors >= 1.6x the throughput of 1. The ratio is
the median of the per-round ratios. This machine is shared with other
sessions, so each round also measures a control without Ray: the same work
in 1 and in 2 plain processes (one torch thread each, start-up excluded), the
parallelism the machine had to give at that moment.

Run:  python benchmarks/ray_throughput.py [--quick] [--device cpu|cuda] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from captum_graphshap import ExactShapley
from captum_graphshap.distributed import explain_dataset
from captum_graphshap.distributed.shards import shard_path


def make_model(features: int, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(features, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, 10),
    ).eval()


def steady_rate(folder: Path, shards: int, actors: int, shard_size: int) -> float:
    times = sorted(shard_path(folder, s).stat().st_mtime for s in range(shards))
    later = times[actors - 1 :]
    if len(later) < 2 or later[-1] <= later[0]:
        return float("nan")
    return (len(later) - 1) * shard_size / (later[-1] - later[0])


def _plain_worker(args: tuple[int, int, int, int, int]) -> float:
    """Explain ``count`` examples in shards, one thread; seconds of compute."""
    import time

    features, width, count, shard_size, seed = args
    torch.set_num_threads(1)
    model = make_model(features, width)
    data = torch.randn(count, features, generator=torch.Generator().manual_seed(seed))
    explainer = ExactShapley(model)
    start = time.perf_counter()
    for first in range(0, count, shard_size):
        explainer.attribute(data[first : first + shard_size], target=0)
    return time.perf_counter() - start


def plain_processes(processes: int, features: int, width: int, count: int, shard: int) -> float:
    """Examples per second of ``processes`` plain processes sharing ``count`` examples."""
    import multiprocessing

    share = count // processes
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        seconds = pool.map(
            _plain_worker, [(features, width, share, shard, i) for i in range(processes)]
        )
    return share * processes / max(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shards and one round")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--shards", type=int, default=24)
    parser.add_argument("--shard-size", type=int, default=8)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.shards = 1, 12

    import ray

    gpu = args.device == "cuda"
    ray.init(num_cpus=2, num_gpus=torch.cuda.device_count() if gpu else 0, log_to_driver=False)
    model = make_model(args.features, args.width)
    n = args.shards * args.shard_size
    data = torch.randn(n, args.features, generator=torch.Generator().manual_seed(1))
    rows: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    control: dict[int, list[float]] = {1: [], 2: []}
    print(
        f"ExactShapley, d = {args.features} ({2**args.features} coalitions per example), "
        f"MLP width {args.width}, {n} examples in {args.shards} shards of {args.shard_size}, "
        f"device {args.device}"
    )
    for round_index in range(args.rounds):
        order = (1, 2) if round_index % 2 == 0 else (2, 1)
        for actors in order:
            with tempfile.TemporaryDirectory() as folder:
                run = explain_dataset(
                    lambda device: ExactShapley(model.to(device)),
                    data,
                    folder,
                    attribute_kwargs={"target": 0},
                    shard_size=args.shard_size,
                    batch_size=args.shard_size,
                    num_actors=actors,
                    use_gpu=gpu,
                )
                steady = steady_rate(Path(folder), args.shards, actors, args.shard_size)
            rows[actors].append((run.examples_per_second, steady))
            plain = plain_processes(actors, args.features, args.width, n, args.shard_size)
            control[actors].append(plain)
            print(
                f"  round {round_index}: {actors} actor(s): wall {run.examples_per_second:6.1f} "
                f"ex/s ({run.seconds:5.1f} s), steady {steady:6.1f} ex/s; "
                f"{actors} plain process(es): {plain:6.1f} ex/s"
            )
    ray.shutdown()

    def ratios(index: int) -> float:
        return statistics.median(b[index] / a[index] for a, b in zip(rows[1], rows[2]))

    print(
        "\n| actors | wall ex/s (median) | steady ex/s (median) | plain processes ex/s (median) |"
        "\n| --- | --- | --- | --- |"
    )
    for actors in (1, 2):
        wall = statistics.median(r[0] for r in rows[actors])
        steady = statistics.median(r[1] for r in rows[actors])
        plain = statistics.median(control[actors])
        print(f"| {actors} | {wall:.1f} | {steady:.1f} | {plain:.1f} |")
    machine = statistics.median(b / a for a, b in zip(control[1], control[2]))
    print(
        f"\n2 actors / 1 actor: wall {ratios(0):.2f}x, steady {ratios(1):.2f}x "
        "(target >= 1.6x; median of per-round ratios); the same work in 2 plain processes / 1: "
        f"{machine:.2f}x (what the shared machine gave)"
    )


if __name__ == "__main__":
    main()
