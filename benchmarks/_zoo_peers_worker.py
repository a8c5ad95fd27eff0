"""Worker of ``zoo.py``: shapiq's newest approximators on games evaluated by the caller.

Run by a Python >= 3.12 with shapiq >= 1.8 and numpy (no torch needed). It
reads jobs from stdin and asks the caller for coalition values over the same
pipes, so the game can be any model of any ``d`` (no ``2^d`` table):

- caller -> worker: a line ``JOB <peer> <d> <budget> <seed>`` or ``END``;
- worker -> caller: ``Q`` and an ``.npy`` (bool coalitions ``(n, d)``), the
  caller answers ``V`` and an ``.npy`` of ``n`` values (each array framed by
  its byte count on the line before it, :func:`send_array`); then ``R <seconds>`` and an
  ``.npy`` of the ``d`` Shapley estimates (NaN where the peer refused), where
  ``seconds`` is the peer's wall time less the time spent waiting for values.

``TIME <peer> <d> <budget> <repeats>``: the peer's wall time on a cheap game
computed here (``sum_i z_i + sum_i z_i z_{i+1}``), answered ``T <seconds>``: one
call's (a cold call: the worker idled while the caller ran) with ``repeats`` 1,
else the median of ``repeats`` back-to-back calls after an untimed one (warm).
"""

from __future__ import annotations

import io
import statistics
import sys
import time
import warnings

import numpy as np


def approximator(peer: str, n: int, seed: int):
    """A shapiq approximator by name (imported here: ``zoo.py`` imports this module's
    framing under Python 3.11, where shapiq 1.8 is absent)."""
    from shapiq.approximator import KernelSHAP, LeverageSHAP, OddSHAP, PolySHAP, kADDSHAP

    return {
        "OddSHAP": lambda: OddSHAP(n, random_state=seed),
        "LeverageSHAP": lambda: LeverageSHAP(n, random_state=seed),
        "PolySHAP": lambda: PolySHAP(n, max_order=2, random_state=seed),
        "kADDSHAP": lambda: kADDSHAP(n, max_order=2, pairing_trick=True, random_state=seed),
        "KernelSHAP": lambda: KernelSHAP(n, pairing_trick=True, random_state=seed),
    }[peer]()


def send_array(stream, head: str, array: np.ndarray) -> None:
    """A line ``<head> <bytes>`` then that many bytes of ``.npy`` (pipes cannot seek)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    stream.write(f"{head} {buffer.tell()}\n".encode() + buffer.getvalue())
    stream.flush()


def read_array(stream) -> tuple[list[str], np.ndarray]:
    """The head's words (without the byte count) and the array of :func:`send_array`."""
    words = stream.readline().decode().split()
    if not words:
        raise EOFError("the other side of the pipe closed")
    data = stream.read(int(words[-1]))
    return words[:-1], np.load(io.BytesIO(data), allow_pickle=False)


def _run(peer: str, d: int, budget: int, seed: int, inp, out) -> None:
    waited = 0.0

    def game(coalitions: np.ndarray) -> np.ndarray:
        nonlocal waited
        start = time.perf_counter()
        send_array(out, "Q", np.asarray(coalitions, dtype=bool))
        values = read_array(inp)[1]
        waited += time.perf_counter() - start
        return values

    start = time.perf_counter()
    estimate = np.full(d, np.nan)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = approximator(peer, d, seed).approximate(int(budget), game)
        estimate = np.array([float(values[(i,)]) for i in range(d)])
    except Exception as error:  # a peer refusing a budget: NaN, reported on stderr
        print(f"{peer} d={d} budget={budget}: {type(error).__name__}: {error}", file=sys.stderr)
    seconds = time.perf_counter() - start - waited
    send_array(out, f"R {seconds:.6f}", estimate)


def _time(peer: str, d: int, budget: int, repeats: int) -> float:
    def game(coalitions: np.ndarray) -> np.ndarray:
        z = np.asarray(coalitions, dtype=float)
        return z.sum(1) + (z[:, 1:] * z[:, :-1]).sum(1)

    if repeats > 1:  # warm: the first call is not timed
        approximator(peer, d, repeats).approximate(int(budget), game)
    times = []
    for seed in range(repeats):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            approximator(peer, d, seed).approximate(int(budget), game)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        words = inp.readline().decode().split()
        if not words or words[0] == "END":
            return
        if words[0] == "TIME":
            seconds = _time(words[1], int(words[2]), int(words[3]), int(words[4]))
            out.write(f"T {seconds:.6f}\n".encode())
            out.flush()
            continue
        _run(words[1], int(words[2]), int(words[3]), int(words[4]), inp, out)


if __name__ == "__main__":
    main()
