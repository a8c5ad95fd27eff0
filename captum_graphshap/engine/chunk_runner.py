"""One engine run, chunk by chunk: model calls, out-of-memory halving, per-call fallback.

A run evaluates ``units``: one (coalition, reference) pair each, covering the
whole batch (plans shared by the batch) or one example (per-example rows).
:class:`ChunkRun` builds a chunk's perturbed rows, calls the model, reads the
values and adds them into one total per slot, with the chunk size of
:class:`~.batching.Pacer`. Two failures are retried instead of raised: out of
memory halves the chunk (and says so once, with the size that worked), and
any other error of the automatic batching falls back to one coalition per
call (a model that takes one example at a time; if that fails too, its error
is the real one). Non-finite values are refused at the end, naming the
coalitions, unless ``on_nan="propagate"``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from .batching import Pacer, bytes_per_row
from .call_sizes import sizing_key
from .dedup import RowSource
from .features import FeatureMasks
from .output_modes import AggregatedOutput, MultipleOutputs, Probe
from .perturb import RowBuilder, expand_args_index, expand_args_repeat


class ChunkedGame(Protocol):
    """What a run reads from, and updates on, its game (:class:`~.coalition_game.CoalitionGame`)."""

    inputs: tuple[Tensor, ...]
    backgrounds: tuple[Tensor, ...]
    features: FeatureMasks
    additional_args: tuple[Any, ...]
    blend: tuple[bool, ...]
    reuse_buffers: bool
    perturbations_per_eval: int | None
    on_nan: str
    outputs: int
    evaluations: Tensor
    replayed_evaluations: Tensor
    nonfinite_outputs: list[bool]
    one_unit_per_call: bool
    units_after_oom: int | None
    probe: Probe

    @property
    def forward_func(self) -> Callable[..., Any]: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def num_references(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def value_dtype(self) -> torch.dtype: ...

    def call_model(self, perturbed: tuple[Tensor, ...], args: tuple[Any, ...]) -> Tensor: ...

    def values_of(self, output: Tensor, units: int, rows_example: Tensor | None) -> Tensor: ...


@dataclasses.dataclass(eq=False)
class ChunkRun:
    """Evaluate every (coalition, reference) unit of one run into per-slot totals.

    With ``example_index`` None each unit covers the whole batch (rows
    ordered unit-major, example-minor, as Captum's ``repeat`` expansion);
    otherwise each unit is the single example ``example_index[u]``.
    ``per_reference`` keeps one total per unit instead of averaging;
    ``reference_index`` gives each row its own single reference.
    """

    game: ChunkedGame
    coalitions: RowSource
    example_index: Tensor | None
    reference_index: Tensor | None
    per_reference: bool

    def __post_init__(self) -> None:
        game = self.game
        self.count = len(self.coalitions)
        self.refs = 1 if self.reference_index is not None else game.num_references
        self.units = self.count * self.refs
        self.shared = self.example_index is None
        #: model rows per unit
        self.width = game.batch_size if self.shared else 1
        self.trailing = (game.outputs,) if game.outputs > 1 else ()
        self.arg_cache: dict[int, tuple[Any, ...]] = {}
        self.rows = RowBuilder(
            game.inputs, game.features, game.backgrounds, game.blend, reuse=game.reuse_buffers
        )
        #: the error that made the run fall back to one coalition per call,
        #: reported once that works
        self.fallback_from: tuple[str, int] | None = None
        #: out of memory: say so once, with the size that worked
        self.halved = False

    def run(self, units_per_call: int, show_progress: bool, desc: str) -> Tensor:
        """The totals, averaged over references; a trailing axis of outputs in multi-output mode."""
        game = self.game
        slots = self.units if self.per_reference else self.count
        totals = torch.zeros(
            (slots, game.batch_size, *self.trailing) if self.shared else (slots, *self.trailing),
            dtype=game.value_dtype(),
            device=game.device,
        )
        pacer = Pacer(
            units=self.units,
            width=self.width,
            coalitions=self.count,
            step=units_per_call,
            adaptive=game.perturbations_per_eval is None and not game.one_unit_per_call,
            bytes_per_unit=bytes_per_row(game.inputs)[0] * self.width,
            device=game.device,
            show_progress=show_progress,
            desc=desc,
            sizing=sizing_key(game.forward_func, game.device, game.inputs),
            examples=None if self.shared else game.batch_size,
        )
        if game.units_after_oom is not None:
            pacer.limit(game.units_after_oom)
        start = 0
        with torch.no_grad(), pacer:
            while start < self.units:
                step = pacer.step
                pacer.begin()
                unit = torch.arange(start, min(start + step, self.units), device=game.device)
                if self._evaluate_chunk(unit, totals, pacer):
                    start += unit.numel()
        return self._finish(totals)

    def _evaluate_chunk(self, unit: Tensor, totals: Tensor, pacer: Pacer) -> bool:
        """Add the values of units ``unit`` into ``totals``; False: retry with a smaller chunk."""
        coalition_id = unit // self.refs
        if self.reference_index is not None:
            reference_id = self.reference_index[coalition_id]
        else:
            reference_id = unit % self.refs
        try:
            perturbed, args, rows_example = self._model_inputs(coalition_id, reference_id)
            output = self.game.probe.replay(perturbed)
            replayed = output is not None
            if output is None:
                output = self.game.call_model(perturbed, args)
        except Exception as error:
            if not self._retry_smaller(error, unit.numel(), pacer):
                raise
            return False
        self._report_retries(pacer)
        # a replayed output was counted when the probe ran: here it counts as replayed
        self._count(unit.numel(), rows_example, replayed)
        try:
            row_values = self.game.values_of(output, unit.numel(), rows_example)
        except MultipleOutputs:
            # The first call found several outputs per example: the
            # adapter restarts once per output, and this chunk's rows
            # are replayed instead of evaluated (and counted) again.
            self.game.probe.keep(perturbed, output)
            raise
        slot = unit if self.per_reference else coalition_id
        if self.shared:
            totals.index_add_(0, slot, row_values.view(-1, self.game.batch_size, *self.trailing))
        else:
            totals.index_add_(0, slot, row_values)
        pacer.done(unit.numel(), timed=not replayed)
        return True

    def _model_inputs(
        self, coalition_id: Tensor, reference_id: Tensor
    ) -> tuple[tuple[Tensor, ...], tuple[Any, ...], Tensor | None]:
        """A chunk's perturbed rows, additional arguments and (per-example rows) examples."""
        game = self.game
        units = coalition_id.numel()
        if self.shared:
            block = self.coalitions.take(coalition_id)
            perturbed = self.rows.shared(block, reference_id)
            args = self.arg_cache.get(units)
            if args is None:
                args = expand_args_repeat(game.additional_args, game.batch_size, units)
                self.arg_cache[units] = args
            return perturbed, args, None
        assert self.example_index is not None
        rows_example = self.example_index[coalition_id]
        perturbed = self.rows.rows(self.coalitions.take(coalition_id), rows_example, reference_id)
        args = expand_args_index(game.additional_args, game.batch_size, rows_example)
        return perturbed, args, rows_example

    def _retry_smaller(self, error: Exception, units: int, pacer: Pacer) -> bool:
        """Whether a failed chunk of ``units`` units is retried (smaller) instead of raised."""
        if units == 1 or isinstance(error, AggregatedOutput):
            return False
        if is_out_of_memory(error):
            pacer.out_of_memory(units)
            # the game's later runs (each output of a multi-output model, the next
            # plan of a method) start at the size that fitted, so the chunk the
            # restart replays is the one already evaluated
            self.game.units_after_oom = pacer.step
            self.rows.release()
            self.halved = True
            return True
        game = self.game
        if game.perturbations_per_eval is not None or game.one_unit_per_call:
            return False
        # A forward that handles one example at a time (Captum's
        # LLMAttribution wrappers): retry this chunk one unit per
        # call; if that fails too, its error is the real one.
        game.one_unit_per_call = True
        pacer.one_per_call()
        self.fallback_from = (type(error).__name__, units * self.width)
        return True

    def _report_retries(self, pacer: Pacer) -> None:
        """A chunk succeeded: warn once about a halving or a fallback that led here."""
        if self.halved:
            _warn_halved(pacer.step * self.width)
            self.halved = False
        if self.fallback_from is not None:  # one coalition per call works: say so once
            _warn_one_per_call(*self.fallback_from)
            self.fallback_from = None

    def _count(self, units: int, rows_example: Tensor | None, replayed: bool = False) -> None:
        """Count the model rows of a chunk on the game, per example (``replayed``: in
        ``game.replayed_evaluations``, rows the probe evaluated and counted)."""
        counts = self.game.replayed_evaluations if replayed else self.game.evaluations
        if self.shared:
            counts += units
        else:
            assert rows_example is not None
            counts.index_add_(0, rows_example, torch.ones_like(rows_example))

    def _finish(self, totals: Tensor) -> Tensor:
        game = self.game
        if game.on_nan == "raise":
            self._check_finite(totals)
        elif not game.nonfinite_outputs[0]:
            game.nonfinite_outputs[0] = not bool(torch.isfinite(totals).all())
        if self.refs > 1 and not self.per_reference:
            totals /= self.refs
        return totals

    def _check_finite(self, totals: Tensor) -> None:
        """Refuse non-finite model outputs, naming the coalitions and examples (one sync)."""
        finite = torch.isfinite(totals)
        if bool(finite.all()):  # the usual case: one reduction, one sync
            return
        refs, per_reference = self.refs, self.per_reference
        bad = ~finite
        if self.game.outputs > 1:
            bad = bad.any(dim=-1)
        if self.example_index is None:
            slots, examples = bad.nonzero(as_tuple=True)
        else:
            slots = bad.nonzero()[:, 0]
            examples = self.example_index[slots // refs if per_reference else slots]
        coalition = slots // refs if per_reference else slots
        first = self.coalitions.take(coalition[:1])[0].nonzero()[:, 0].tolist()
        shown = first if len(first) <= 12 else [*first[:12], "..."]
        raise ValueError(
            f"forward_func returned NaN or infinite values for {int(coalition.unique().numel())} "
            f"of {len(self.coalitions)} coalitions, in examples "
            f"{sorted(set(examples.tolist()))[:20]}; the first has features {shown} present "
            "(the rest at the baseline). Check the model on such inputs, or pass "
            "on_nan='propagate' to return the non-finite attributions."
        )


def takes_one_prompt(forward_func: Callable[..., Any]) -> bool:
    """Whether ``forward_func`` is Captum's LLM forward, which takes one prompt per call.

    ``LLMAttribution`` (and ``RemoteLLMAttribution``) set the wrapped method's
    ``forward_func`` to a bound method of themselves that formats and scores
    one perturbed prompt: a batch of coalitions fails there, so such calls
    start at one coalition per call instead of failing once and warning.
    ``LLMShapley`` says it batches (``batches_coalitions``).
    """
    owner = getattr(forward_func, "__self__", None)
    if owner is None:
        return False
    from captum.attr import LLMAttribution  # public; the engine imports Captum only here

    return isinstance(owner, LLMAttribution) and not getattr(owner, "batches_coalitions", False)


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's ``OutOfMemoryError`` and CPU allocation failures; no other error."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "out of memory" in text or "DefaultCPUAllocator: can't allocate memory" in text
    )


# stacklevel 7: this function, _report_retries, _evaluate_chunk, ChunkRun.run,
# CoalitionGame._run, CoalitionGame.evaluate(_rows), and the line that called it


def _warn_halved(rows: int) -> None:
    warnings.warn(
        f"out of memory in a forward call; retrying with {rows} rows per call (halved). "
        "Pass a smaller perturbations_per_eval to avoid the retries.",
        RuntimeWarning,
        stacklevel=7,
    )


def _warn_one_per_call(error: str, rows: int) -> None:
    warnings.warn(
        f"forward_func raised {error} on a batch of {rows} rows; evaluating one coalition "
        "per call instead (a model that takes one example at a time?). Pass "
        "perturbations_per_eval=1 to start that way.",
        RuntimeWarning,
        stacklevel=7,
    )
