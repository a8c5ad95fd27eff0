"""Timing helpers shared by the benchmark scripts.

This machine's timings drift by up to 2x between minutes (shared host), so
contenders run in the same rounds, in an order that rotates each round, and
scripts report medians and the median of the per-round ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of one call, synchronising CUDA around it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def rotating_rounds(
    contenders: dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Times of every contender, all run once per round in a rotating order."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(contenders[name], device))
    return times


def median_ratio(times: dict[str, list[float]], name: str, reference: str) -> float:
    """Median over rounds of ``times[name] / times[reference]``."""
    return statistics.median(a / b for a, b in zip(times[name], times[reference]))


def add_device_argument(parser: object) -> None:
    """``--device cpu|cuda`` on a script's argparse parser."""
    parser.add_argument(  # type: ignore[attr-defined]
        "--device", default="cpu", help="cpu (default) or cuda: where models and inputs live"
    )


def use_device(name: str) -> torch.device:
    """Make ``name`` the default device of new tensors and modules, and return it.

    Scripts that build their models and inputs without naming a device then
    run on it unchanged; CPU-only libraries (SHAP, scikit-learn) get host
    copies where the scripts hand them tensors.
    """
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available here.")
    torch.set_default_device(device)
    return device
