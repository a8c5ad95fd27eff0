"""Rows per model call, progress and the cost forecast of one evaluation.

With ``perturbations_per_eval=None`` the engine does not guess a fixed batch
size: :class:`Pacer` starts at about :data:`START_ELEMENTS_PER_CALL` input
elements per call (at least one row), times the calls, and doubles the rows
per call while throughput (rows per second) improves by at least
:data:`GROWTH_GAIN`, as long as the inputs of one call stay under
:func:`input_bytes_cap` and enough work is left to profit. Once a larger
call is no faster, or memory runs short (out of memory halves the call, as
before), it settles on the best size seen. An explicit
``perturbations_per_eval`` is honoured exactly (Captum's meaning), and with
``torch.use_deterministic_algorithms(True)`` the size is fixed too, since a
model's rounding may depend on its batch size.

The same timings give the **cost forecast**. When a call evaluates at least
:data:`FORECAST_ROWS` model rows, the coalitions, rows per call and the time
estimated from the first timed calls (the best of two: the first pays
one-off costs) are reported: in the progress bar when one is shown,
otherwise as a :class:`CostForecast` warning once the estimate reaches
:data:`AUTO_PROGRESS_SECONDS`. ``show_progress=None`` (the default) shows a
bar exactly when that estimate is reached; ``True`` always shows one,
``False`` never does.

On CUDA, calls are timed with events that are read only once the GPU has
passed them (:meth:`torch.cuda.Event.query`), so probing adds no host
synchronisation to the evaluation loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from .._warnings import warn_caller
from . import call_sizes
from .call_sizes import SizingKey

#: First call of the automatic batching: about this many input elements
#: (2^19: 2 MiB of float32 per call; 3 rows of a 224 x 224 RGB image, 668 of
#: a 28 x 28 digit), from which calls grow while they get faster: a smaller
#: start spends a small plan's time probing (benchmarks/lc_speed.py).
START_ELEMENTS_PER_CALL = 2**19
#: A fixed call size the benchmarks print beside the measured sizing, for
#: comparison.
AUTO_ELEMENTS_PER_CALL = 2**19
#: A doubling is kept when rows per second grow by at least this factor ...
GROWTH_GAIN = 1.08
#: ... or this one on an accelerator, whose calls CUDA events time to the
#: microsecond (the host's 8% allows for a shared CPU's noise): at 8% resnet18
#: at 224 x 224 settled at 256 rows per call on an H100, and the defaults ran at
#: 0.89-0.95 of its best batch's rows per second.
ACCELERATOR_GROWTH_GAIN = 1.03
#: Doublings in a row that are not faster before the size settles.
ALLOWED_MISSES = 2
#: Calls timed at each size while probing (the fastest counts: the first call
#: at a new size pays one-off costs such as oneDNN primitive creation).
PROBES_PER_SIZE = 2
#: A single call this long (seconds) is timing enough for its size.
LONG_CALL_SECONDS = 1.0
#: Inputs of one call at most this many bytes (CPU), and ...
CPU_INPUT_BYTES = 2**27
#: ... at most this fraction of the memory available when the call starts.
MEMORY_FRACTION = 1 / 16
#: Inputs of one call on a GPU at most this many bytes.
GPU_INPUT_BYTES = 2**30
#: Plans of at least this many model rows get a cost forecast ...
FORECAST_ROWS = 10_000
#: ... reported (and, by default, a progress bar shown) when the work left
#: is estimated to take at least this many seconds.
AUTO_PROGRESS_SECONDS = 5.0


class CostForecast(UserWarning):
    """The forecast of a long evaluation: coalitions, rows per call, estimated time.

    Issued when no progress bar is shown (``show_progress=False``); silence
    it with ``warnings.simplefilter("ignore", CostForecast)``.
    """


def available_memory(device: torch.device) -> int | None:
    """Bytes of memory free for new tensors on ``device`` (None when unknown).

    On CUDA: the driver's free memory and the caching allocator's reserved but
    unused blocks, which it hands out before asking the driver for more (the
    driver alone counts a model's freed activations as taken).
    """
    if device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except RuntimeError:  # pragma: no cover - no CUDA context
            return None
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + unused)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as info:
                for line in info:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:  # pragma: no cover - not Linux
            return None
    return None


def input_bytes_cap(device: torch.device) -> int:
    """The most input bytes one automatically sized call may hold on ``device``."""
    cap = GPU_INPUT_BYTES if device.type == "cuda" else CPU_INPUT_BYTES
    free = available_memory(device)
    if free is not None:
        cap = min(cap, int(free * MEMORY_FRACTION))
    return max(cap, 1)


def start_units(bytes_per_unit: int, elements_per_unit: int, cap_units: int) -> int:
    """The first call's units: about :data:`START_ELEMENTS_PER_CALL` elements, within the cap."""
    return max(1, min(START_ELEMENTS_PER_CALL // max(1, elements_per_unit), cap_units))


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Clock:
    """Times calls: ``perf_counter`` on the host, events read without blocking on CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.pending: list[tuple[Any, Any, int]] = []
        self.started: Any = None

    def begin(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            self.started = event
        else:
            self.started = time.perf_counter()

    def end(self, units: int) -> list[tuple[int, float]]:
        """Finish the call begun last; the (units, seconds) of calls timed so far."""
        if not self.cuda:
            return [(units, time.perf_counter() - self.started)]
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        self.pending.append((self.started, event, units))
        done = []
        while self.pending and self.pending[0][1].query():
            start, stop, count = self.pending.pop(0)
            done.append((count, start.elapsed_time(stop) / 1000.0))
        return done


class Pacer:
    """The rows per call, progress bar and forecast of one engine run.

    The engine asks ``step`` (units per call; a unit is one coalition and
    reference, ``width`` model rows), calls :meth:`begin` before building a
    chunk and :meth:`done` after its values are read, and reports
    :meth:`out_of_memory` and :meth:`one_per_call`.
    """

    def __init__(
        self,
        *,
        units: int,
        width: int,
        coalitions: int,
        step: int,
        adaptive: bool,
        bytes_per_unit: int,
        device: torch.device,
        show_progress: bool | None,
        desc: str,
        sizing: SizingKey | None = None,
        examples: int | None = None,
    ) -> None:
        self.units = units
        #: rows that each belong to one example (``evaluate_rows``): how many
        #: examples they cover; None: every coalition is evaluated for all ``width``
        self.examples = examples
        self.width = width
        self.coalitions = coalitions
        self.device = device
        self.desc = desc
        self.show_progress = show_progress
        self.adaptive = adaptive and not torch.are_deterministic_algorithms_enabled()
        self.cap = units
        if self.adaptive:
            self.cap = max(1, input_bytes_cap(device) // max(1, bytes_per_unit))
        self.step = max(1, min(step, self.cap))
        self.done_units = 0
        self.clock = _Clock(device)
        #: units per call -> fastest seconds per unit seen, and how many calls timed
        self.timings: dict[int, tuple[float, int]] = {}
        self.settled = not self.adaptive
        self.gain = GROWTH_GAIN if device.type == "cpu" else ACCELERATOR_GROWTH_GAIN
        #: where the rows per call found here are remembered (call_sizes)
        self.sizing = sizing if self.adaptive else None
        learnt = call_sizes.recall(self.sizing)
        if learnt is not None:  # start where an earlier run on this model settled
            self.step = max(1, min(learnt.rows // max(1, width), self.cap))
            self.settled = learnt.final
        self.misses = 0
        self.timed_calls = 0
        self.forecast_made = False
        self.estimate = ""
        self.bar: Any = None
        if show_progress:
            self.bar = self._new_bar(0)

    # ----------------------------------------------------------- engine hooks

    def __enter__(self) -> Pacer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
        if not self.settled and self.timings:  # still growing when the work ran out
            self._remember(final=False)

    def begin(self) -> None:
        if not (self.settled and self.forecast_made):
            self.clock.begin()

    def done(self, units: int, timed: bool = True) -> None:
        """A call of ``units`` units succeeded: count it, learn from its time, update the bar.

        ``timed=False``: no model call was made (a replayed output), so there
        is no time to learn from.
        """
        if timed and not (self.settled and self.forecast_made):
            step = self.step
            for count, seconds in self.clock.end(units):
                self._learn(count, seconds)
            if self.bar is not None and self.step != step:
                self.bar.set_postfix_str(self._postfix(), refresh=False)
        self.done_units += units
        if self.bar is not None:
            self.bar.update(units * self.width)

    def out_of_memory(self, failed: int) -> None:
        """A call of ``failed`` units ran out of memory: halve it, and never grow past that."""
        self.step = max(1, failed // 2)
        self.cap = self.step
        self.settled = True
        self.clock.pending.clear()
        self._remember(final=True)

    def limit(self, units: int) -> None:
        """At most ``units`` units per call (an earlier run of the game ran out of memory)."""
        self.step = min(self.step, units)
        self.cap = min(self.cap, units)

    def one_per_call(self) -> None:
        """The model takes one unit per call: stop sizing."""
        self.step = self.cap = 1
        self.settled = True
        self.clock.pending.clear()

    # ----------------------------------------------------------- sizing

    def _learn(self, units: int, seconds: float) -> None:
        per_unit = seconds / max(1, units)
        best, calls = self.timings.get(units, (math.inf, 0))
        self.timings[units] = (min(best, per_unit), calls + 1)
        self.timed_calls += 1
        # The first call pays one-off costs (kernel selection, allocator
        # warm-up): forecast from the best of two calls, unless the first one
        # alone is long enough to matter.
        if not self.forecast_made and (self.timed_calls >= 2 or seconds >= LONG_CALL_SECONDS):
            self._forecast(min(t for t, _ in self.timings.values()))
        if self.settled or units != self.step:
            return
        measured = self.timings[units]
        if measured[1] < PROBES_PER_SIZE and seconds < LONG_CALL_SECONDS:
            return
        smaller = [size for size in self.timings if size < units]
        if smaller:
            fastest = min(smaller, key=lambda size: self.timings[size][0])
            if measured[0] * self.gain > self.timings[fastest][0]:
                # Timings are noisy (a shared host, the first call of a size):
                # one doubling that is not faster may be a fluke, two in a row
                # are not. Then settle on the fastest size seen.
                self.misses += 1
                if self.misses >= ALLOWED_MISSES:
                    self.step = units if measured[0] < self.timings[fastest][0] else fastest
                    self.settled = True
                    self._remember(final=True)
                    return
            else:
                self.misses = 0
        larger = min(2 * units, self.cap)
        left = self.units - self.done_units
        if larger <= units or left < 2 * PROBES_PER_SIZE * larger:
            self.settled = True
            if smaller:
                fastest = min([*smaller, units], key=lambda size: self.timings[size][0])
                self.step = fastest
            # at the memory cap the size is final; out of work, only a lower bound
            self._remember(final=larger <= units)
            return
        self.step = larger

    def _remember(self, final: bool) -> None:
        call_sizes.remember(self.sizing, call_sizes.LearntSize(self.step * self.width, final))

    # ----------------------------------------------------------- forecast

    def _forecast(self, seconds_per_unit: float) -> None:
        self.forecast_made = True
        rows = self.units * self.width
        left = (self.units - self.done_units) * seconds_per_unit
        long_work = left >= AUTO_PROGRESS_SECONDS
        if self.bar is None and self.show_progress is None and long_work:
            self.bar = self._new_bar(self.done_units * self.width)
        if rows < FORECAST_ROWS:
            return
        self.estimate = format_seconds(left)
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
        elif long_work:
            text = (
                f"{self._work(rows)}, {_rows(self.step * self.width)} per call"
                + (" (growing while faster)" if not self.settled else "")
                + f", about {self.estimate} at "
                f"{self.width / max(seconds_per_unit, 1e-12):,.0f} rows/s (first calls)"
            )
            warn_caller(
                f"{self.desc}: {text}. Pass show_progress=True to follow it, a larger "
                "perturbations_per_eval if the model has memory to spare, or fewer "
                "features (feature_mask) or a smaller k to shorten it.",
                CostForecast,
            )

    def _work(self, rows: int) -> str:
        """The run's size in words: coalitions times examples (times references), or
        rows of their own examples."""
        if self.examples is not None:
            return f"{rows:,} model rows of {self.examples:,} example(s)"
        references = "" if self.units == self.coalitions else f" x {self.units // self.coalitions}"
        return (
            f"{self.coalitions:,} coalitions x {self.width} example(s){references} = "
            f"{rows:,} model rows"
        )

    def _postfix(self) -> str:
        if self.units * self.width < FORECAST_ROWS or not self.estimate:
            return ""
        return (
            f"{self.coalitions:,} coalitions, {_rows(self.step * self.width)}/call, "
            f"first-calls estimate {self.estimate}"
        )

    def _new_bar(self, initial: int) -> Any:
        # Captum's bars, under the same label (kept: Captum's tests read it), count
        # iterations (permutations, samples); this one counts model rows, and says so
        return tqdm(
            total=self.units * self.width,
            initial=initial,
            desc=self.desc,
            unit="row",
            bar_format=(
                "{l_bar}{bar}| {n_fmt}/{total_fmt} model rows "
                "[{elapsed}<{remaining}, {rate_fmt}{postfix}]"
            ),
        )


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


def bytes_per_row(inputs: Sequence[Tensor]) -> tuple[int, int]:
    """Input bytes and elements of one example's row (all inputs together)."""
    elements = sum(t[0].numel() for t in inputs) if inputs and inputs[0].shape[0] else 0
    size = sum(t[0].numel() * t.element_size() for t in inputs) if elements else 0
    return size, elements
