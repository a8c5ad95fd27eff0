"""The training's cost forecast: timed on its first steps, reported once where it is long.

The labelling forecasts its cost (``fitting.forecast_labelling``); the training
did not, and a potential fit on large images on a CPU (64 images of
3 x 128 x 128, 64 patches) had step batches of ten coalition rows at about a
second a step: over an hour at ``epochs=None``, with nothing said. The clock
times steps :data:`TIMED_STEPS` (the first step pays one-off costs), weighs
them by each step's network rows (a pretraining step of the potential holds
fewer than a recursion step) and, where the rest is estimated at
:data:`~captum_graphshap.engine.batching.AUTO_PROGRESS_SECONDS` or more, warns
with a :class:`~captum_graphshap.engine.batching.CostForecast` (with a
progress bar, the bar's postfix shows it instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._warnings import warn_caller
from ..engine import batching

#: steps ``[start, stop)`` timed for the forecast: the first is left out
TIMED_STEPS = (1, 4)


class TrainingClock:
    """Times a fit's first steps and forecasts the rest once.

    ``work(start, stop)``: the network rows of steps ``[start, stop)`` (any unit
    proportional to a step's time); ``total``: the fit's steps; ``bar``: the
    progress bar shown, if any (its postfix takes the forecast).
    """

    def __init__(
        self, work: Callable[[int, int], float], total: int, description: str, bar: Any = None
    ) -> None:
        self.work, self.total, self.description, self.bar = work, total, description, bar
        self.started: float | None = None

    def step_done(self, step: int) -> None:
        """Called after each step ``step`` (0-based)."""
        first, stop = TIMED_STEPS
        if step == first - 1:
            self.started = time.perf_counter()
        elif step == stop - 1 and self.started is not None and stop < self.total:
            seconds = time.perf_counter() - self.started
            per_unit = seconds / max(self.work(first, stop), 1e-12)
            self.report(per_unit * self.work(stop, self.total), seconds / (stop - first))

    def report(self, left: float, per_step: float) -> None:
        """The forecast of ``left`` seconds more at ``per_step`` seconds a timed step."""
        if left < batching.AUTO_PROGRESS_SECONDS:
            return
        estimate = batching.format_seconds(left)
        if self.bar is not None:
            self.bar.set_postfix_str(f"about {estimate} more", refresh=False)
            return
        first, stop = TIMED_STEPS
        warn_caller(
            f"{self.description}: {self.total:,} optimiser steps, about {estimate} more "
            f"({per_step:.3g} s a step on steps {first + 1}-{stop}). Pass show_progress=True "
            "to follow it, or fewer epochs= (passes over the training data) to shorten "
            "it; a GPU runs the steps faster.",
            batching.CostForecast,
        )
