"""The coalition engine: evaluate ``v(S)`` for many coalitions in few model calls.

Every method of the package is a coalition plan, one call to this engine and
an estimator. The engine turns boolean coalition masks over ``d`` features into
perturbed inputs with ``torch.where`` (features in ``S`` keep the input, the
rest take the baseline), deduplicates coalitions, packs many coalitions and
examples into each forward call and returns one value per (example,
coalition).

Value of a coalition, for example ``n`` (docs/definitions.md)::

    v_n(S) = g(f(x_n restricted to S, baseline elsewhere))[target_n]

with ``g`` the identity (``value="output"``, Captum's default) or
``log_softmax`` (``value="log_prob"``, the papers' score; the target then
defaults to the class predicted on the full input). With ``references``, the
baseline is replaced by each reference in turn and ``v`` is the mean over them
(an empirical expectation over a background set).

This module holds the game and :func:`prepare_game`; the steps live below it:
:mod:`.prepare` (argument checks), :mod:`.dedup` (deduplication),
:mod:`.perturb` (perturbed rows), :mod:`.output_modes` (multi-output and
aggregated outputs, the multi-output tape), :mod:`.chunk_runner` (chunked
model calls, out-of-memory halving, one-coalition-per-call fallback).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._compat import (
    BaselineType,
    TargetType,
    format_additional_forward_args,
    format_inputs,
    format_target,
    host_to_device,
    output_flat_index,
)
from .batching import bytes_per_row, start_units
from .chunk_runner import ChunkRun, takes_one_prompt
from .dedup import RowSource, distinct_keys, row_keys
from .features import FeatureMasks
from .output_modes import (
    AggregatedOutput,
    MultipleOutputs,
    OutputTape,
    Probe,
    check_output,
    select_values,
    tape_key,
)
from .perturb import expand_args_repeat
from .plan import CoalitionSet, DenseCoalitions, coalition_keys
from .prepare import (
    ValueKind,
    can_blend,
    check_forward_func,
    check_options,
    format_backgrounds,
    format_features,
)

__all__ = [
    "AggregatedOutput",
    "CoalitionGame",
    "MultipleOutputs",
    "accumulation_dtype",
    "prepare_game",
]


def accumulation_dtype(device: torch.device) -> torch.dtype:
    """Estimators accumulate in float64 (float32 on MPS, which lacks it)."""
    return torch.float32 if device.type == "mps" else torch.float64


@dataclass
class CoalitionGame:
    """A batch of cooperative games defined by a model and its inputs.

    Build it with :func:`prepare_game`, which validates every argument.
    ``evaluate`` serves plans shared by the batch, ``evaluate_rows`` plans
    that differ per example.
    """

    forward_func: Callable[..., Any]
    inputs: tuple[Tensor, ...]
    #: one ``(B, 1 or N, *S)`` tensor per input: B = 1 for a baseline,
    #: B = number of references for a background set
    backgrounds: tuple[Tensor, ...]
    features: FeatureMasks
    additional_args: tuple[Any, ...]
    target: Tensor | None
    value: ValueKind
    perturbations_per_eval: int | None
    #: per input: build rows with ``lerp`` (floating, finite ``x - background``)
    #: instead of ``where``
    blend: tuple[bool, ...] = ()
    #: write every chunk's rows into one reused buffer per input (faster; a
    #: model that stores its inputs then sees them overwritten)
    reuse_buffers: bool = False
    #: ``"raise"``: non-finite model outputs are an error naming the
    #: coalitions; ``"propagate"``: they flow into the attributions
    on_nan: str = "raise"
    #: the model's outputs per example when ``target`` is None and it has
    #: several (Captum's multi-output mode); each run of a method explains
    #: one of them (``output_index``), replaying the evaluations of the first
    outputs: int = 1
    output_index: int = 0
    #: ``(N,)`` model evaluations made so far per example (forward rows, and
    #: derivative passes as forward equivalents); one game serves one call
    evaluations: Tensor = dataclasses.field(default_factory=lambda: torch.zeros(0))
    #: ``[True]`` once a model output was NaN or infinite (``on_nan="propagate"``);
    #: one list shared by the restricted and aggregated copies of the game, so
    #: the adapter can tell a model's NaN from an estimator's
    nonfinite_outputs: list[bool] = dataclasses.field(default_factory=lambda: [False])
    #: ``target`` on the host when it was given there (ints, tuples, lists, a CPU
    #: tensor): its range checks read this copy, not the device
    target_host: Tensor | None = None
    #: multi-output mode: the first output's evaluations, replayed by the runs of the
    #: others; shared, as the probe below, by the restricted copies of the game
    tape: OutputTape = dataclasses.field(default_factory=OutputTape)
    #: the rows and output of the call that found several outputs per example,
    #: replayed once when the adapter restarts (not evaluated twice)
    probe: Probe = dataclasses.field(default_factory=Probe)

    def __post_init__(self) -> None:
        self._flat_target: Tensor | None = None
        #: units per call that fitted after running out of memory (None: no OOM yet)
        self.units_after_oom: int | None = None
        #: one coalition per call: from the start for Captum's LLM forward (one
        #: prompt per call), or once the model failed on a batch of several
        #: coalitions with the automatic batching (the rest of the call)
        self.one_unit_per_call = self.perturbations_per_eval is None and takes_one_prompt(
            self.forward_func
        )
        if self.evaluations.numel() != self.batch_size:
            self.evaluations = torch.zeros(self.batch_size, dtype=torch.long, device=self.device)
        #: ``(N,)`` evaluations replayed, not made again: by the multi-output tape, and
        #: the probe's rows (counted in ``evaluations`` when the probe ran)
        self.replayed_evaluations = torch.zeros_like(self.evaluations)

    @property
    def batch_size(self) -> int:
        return self.inputs[0].shape[0]

    @property
    def num_features(self) -> int:
        return self.features.num_features

    @property
    def device(self) -> torch.device:
        return self.inputs[0].device

    @property
    def num_references(self) -> int:
        return self.backgrounds[0].shape[0]

    # ------------------------------------------------------------------ public

    def evaluate(
        self,
        coalitions: Tensor | CoalitionSet,
        *,
        distinct: bool = False,
        per_reference: bool = False,
        show_progress: bool = False,
        desc: str = "coalitions",
    ) -> Tensor:
        """Values of coalitions shared by the batch.

        Args:
            coalitions:
                ``(M, d)`` bool, or a :class:`~.plan.CoalitionSet` expanded one
                chunk at a time; row m is coalition S_m.
            distinct:
                The plan promises its rows are distinct, which skips deduplication.
            per_reference:
                Keep the value of each reference of a background set apart
                instead of averaging them (intervals over references).

        Returns:
            ``(N, M)`` tensor in :func:`accumulation_dtype`; ``(N, M, B)`` with
            ``per_reference`` (B = number of references, 1 for a baseline).
        """
        store = self._check_coalitions(coalitions)
        self.resolve_target()
        if distinct:
            representative, inverse = None, None
        else:
            representative, inverse = distinct_keys(coalition_keys(store))
        units_per_call = max(1, self._rows_per_call() // self.batch_size)
        totals = self._run(
            RowSource(store, representative),
            example_index=None,
            units_per_call=units_per_call,
            show_progress=show_progress,
            desc=desc,
            per_reference=per_reference,
        )  # (U, N) or (U * B, N)
        count = len(store) if representative is None else representative.shape[0]
        if per_reference:
            values = totals.view(count, self.num_references, -1).permute(2, 0, 1)
            return values if inverse is None else values[:, inverse]
        values = totals.T
        return values if inverse is None else values[:, inverse]

    def evaluate_rows(
        self,
        example_index: Tensor,
        coalitions: Tensor | CoalitionSet,
        *,
        distinct: bool = False,
        reference_index: Tensor | None = None,
        show_progress: bool = False,
        desc: str = "coalitions",
        every_output: bool = False,
    ) -> Tensor:
        """Values of (example, coalition) rows, for plans that differ per example.

        Args:
            example_index:
                ``(R,)`` long, the example of each row.
            coalitions:
                ``(R, d)`` bool or a :class:`~.plan.CoalitionSet` of R rows.
            reference_index:
                ``(R,)`` long: the row's single reference of the background set
                (single-reference games, sampled references). None averages
                every reference, as :meth:`evaluate` does.
            every_output:
                ``(R, outputs)`` values of every output of a multi-output
                model (``(R, 1)`` with one output): for adaptive plans whose
                next rows depend on the values, so that one plan serves
                every output and the runs of the other outputs replay it.

        Returns:
            ``(R,)`` tensor in :func:`accumulation_dtype`. Repeated rows are
            evaluated once; ``distinct=True`` promises there are none.
        """
        store = self._check_coalitions(coalitions)
        self.resolve_target()
        example_index = example_index.to(device=self.device, dtype=torch.long)
        if example_index.shape != (len(store),):
            raise ValueError("example_index must have one entry per coalition row.")
        if reference_index is not None:
            reference_index = reference_index.to(device=self.device, dtype=torch.long)
            if reference_index.shape != (len(store),):
                raise ValueError("reference_index must have one entry per coalition row.")
        representative = inverse = None
        if not distinct:
            keys = row_keys(store, example_index, reference_index, self.batch_size)
            representative, inverse = distinct_keys(keys)
            example_index = example_index[representative]
            if reference_index is not None:
                reference_index = reference_index[representative]
        totals = self._run(
            RowSource(store, representative),
            example_index=example_index,
            units_per_call=self._rows_per_call(),
            show_progress=show_progress,
            desc=desc,
            reference_index=reference_index,
            every_output=every_output,
        )  # (U,) or (U, outputs)
        return totals if inverse is None else totals[inverse]

    def restricted(
        self,
        examples: Tensor | None,
        ids: Tensor | None,
        rest: int = -1,
        *,
        shared_geometry: bool = False,
    ) -> CoalitionGame:
        """The game of some examples (None: all) over some feature ids, renumbered ``0..``.

        Used to drop feature ids that occur nowhere (they are dummies), so
        estimators that are not exact for dummies (regressions, residual norms)
        see only the features that exist, and features at their baseline (the
        elements of other ids join new feature ``rest``: equal to every
        background, they build the same rows either way). ``ids`` ``(k,)`` the
        ids kept, or ``(N, d)`` bool each example's (as many in each row; the
        masks become per example, :meth:`FeatureMasks.renumbered_rows` with
        ``shared_geometry``). Calls no model; its evaluation count starts at zero.
        """
        features = self.features if examples is None else self.features.select(examples)
        if ids is not None and ids.dim() == 2:
            features = features.renumbered_rows(ids, rest, shared_geometry)
        elif ids is not None:
            features = features.renumbered(ids, rest, shared_geometry)
        if examples is None:
            return dataclasses.replace(self, features=features, evaluations=torch.zeros(0))
        batch = self.batch_size

        def pick(value: Any) -> Any:
            if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == batch:
                return value[examples]
            return value

        return dataclasses.replace(
            self,
            inputs=tuple(t[examples] for t in self.inputs),
            backgrounds=tuple(
                b[:, examples] if b.shape[1] == batch and batch > 1 else b for b in self.backgrounds
            ),
            features=features,
            additional_args=tuple(pick(arg) for arg in self.additional_args),
            target=None if self.target is None else self.target[examples],
            target_host=None,
            evaluations=torch.zeros(0),
        )

    def aggregated(self) -> CoalitionGame:
        """The game of a model that answers the whole batch with one output.

        Captum's aggregated mode: every coalition is applied to every example
        at once and the model's output for the batch is the value. Here the
        batch becomes one example whose elements are the batch's (inputs
        ``(1, N, ...)``), the feature mask must be shared, and the model is
        called once per coalition; attributions come back per output, one
        value per feature.
        """
        if self.features.per_example:
            raise ValueError(
                "forward_func returns one output for the whole batch, so feature_mask must "
                "be shared by the examples (batch size 1), as in Captum."
            )
        batch = self.batch_size
        original = self.forward_func
        args = self.additional_args

        def per_coalition(*rows: Tensor) -> Tensor:
            outputs = []
            for index in range(rows[0].shape[0]):
                output = original(*(row[index] for row in rows), *args)
                if isinstance(output, torch.futures.Future):
                    output = output.wait()
                output = torch.as_tensor(output, device=rows[0].device)
                outputs.append(output.reshape(-1))
            return torch.stack(outputs)

        masks = tuple(m.unsqueeze(1) for m in self.features.masks)
        features = FeatureMasks(masks, self.features.num_features, False, (None,) * len(masks))
        return dataclasses.replace(
            self,
            forward_func=per_coalition,
            inputs=tuple(t.unsqueeze(0) for t in self.inputs),
            backgrounds=tuple(
                b.unsqueeze(1).expand(b.shape[0], 1, batch, *b.shape[2:]) for b in self.backgrounds
            ),
            features=features,
            additional_args=(),
            target=None if self.target is None else self.target[:1],
            target_host=None if self.target_host is None else self.target_host[:1],
            perturbations_per_eval=1,
            evaluations=torch.zeros(0),
        )

    def resolve_target(self) -> None:
        """With ``value="log_prob"`` and no target, explain the predicted class.

        Costs one forward pass over the unperturbed batch; called by the
        ``evaluate`` methods, after every argument check.
        """
        if self.value != "log_prob" or self.target is not None:
            return
        with torch.no_grad():
            # a copy: a model that works in place must not change the user's inputs
            output = self.call_model(tuple(t.clone() for t in self.inputs), self.additional_args)
        self.evaluations += 1
        if output.dim() != 2:
            raise ValueError(
                f'value="log_prob" needs a model output of shape (batch, classes), got '
                f"{tuple(output.shape)}."
            )
        self.target = output.argmax(dim=1, keepdim=True)

    def value_function(self) -> Callable[..., Tensor]:
        """The game's value of whole input rows, differentiable (gradient methods).

        ``fn(*tensors)`` runs the model on rows holding ``k`` stacked copies
        of the batch (``k * N`` rows, copy-major) and returns one value per
        row: the target output, or its log-softmax. Call
        :meth:`resolve_target` first.
        """

        def values(*tensors: Tensor) -> Tensor:
            copies = max(1, tensors[0].shape[0] // self.batch_size)
            args = expand_args_repeat(self.additional_args, self.batch_size, copies)
            output = self.call_model(tensors, args)
            flat_target = (
                None if self.target is None else output_flat_index(self.target, output.shape[1:])
            )
            values = self._select(output, flat_target, copies, None)
            return values[:, self.output_index] if values.dim() > 1 else values

        return values

    def value_dtype(self) -> torch.dtype:
        return accumulation_dtype(self.device)

    def attribution_dtype(self) -> torch.dtype:
        """Floating inputs keep their dtype; token ids get the default float."""
        first = self.inputs[0]
        return first.dtype if first.is_floating_point() else torch.get_default_dtype()

    # ---------------------------------------------------------------- internals

    def _check_coalitions(self, coalitions: Tensor | CoalitionSet) -> CoalitionSet:
        if isinstance(coalitions, Tensor):
            if coalitions.dim() != 2:
                raise ValueError(
                    f"coalitions must have shape (M, {self.num_features}), "
                    f"got {tuple(coalitions.shape)}."
                )
            coalitions = DenseCoalitions(host_to_device(coalitions, self.device))
        if coalitions.num_features != self.num_features:
            raise ValueError(
                f"coalitions are over {coalitions.num_features} features, but the game has "
                f"{self.num_features}."
            )
        # on the inputs' device once, so no chunk copies between host and GPU
        return coalitions.to(self.device)

    def _rows_per_call(self) -> int:
        if self.one_unit_per_call:
            return 1
        if self.perturbations_per_eval is not None:
            return self.perturbations_per_eval * self.batch_size
        # the first call of the automatic sizing, which batching.Pacer grows
        _, elements = bytes_per_row(self.inputs)
        return start_units(0, elements, 2**62)

    def _run(
        self,
        coalitions: RowSource,
        example_index: Tensor | None,
        units_per_call: int,
        show_progress: bool,
        desc: str,
        per_reference: bool = False,
        reference_index: Tensor | None = None,
        every_output: bool = False,
    ) -> Tensor:
        """Evaluate every (coalition, reference) unit (:class:`~.chunk_runner.ChunkRun`).

        In multi-output mode, the run of the first output records all outputs
        on the tape and the runs of the other outputs replay them.
        ``every_output``: all outputs (a trailing dimension, 1 with one output).
        """
        output = slice(None) if every_output else self.output_index
        if self.outputs > 1:
            key = tape_key(coalitions, example_index, reference_index, per_reference)
            tape = self.tape.entries
            position = self.tape.position
            self.tape.position += 1
            if position < len(tape) and tape[position][0] == key:
                self.replayed_evaluations += tape[position][2]
                return tape[position][1][..., output]
            before = self.evaluations_with_replays()
        run = ChunkRun(self, coalitions, example_index, reference_index, per_reference)
        totals = run.run(units_per_call, show_progress, desc)
        if self.outputs == 1:
            return totals[..., None] if every_output else totals
        if position == len(self.tape.entries):
            self.tape.entries.append((key, totals, self.evaluations_with_replays() - before))
        return totals[..., output]

    def evaluations_with_replays(self) -> Tensor:
        """``(N,)`` the evaluations made so far and those the multi-output tape replayed
        instead: what a method that plans on what it spent reads (the same in each
        output's run, as its plan must be)."""
        return self.evaluations + self.replayed_evaluations

    def call_model(self, perturbed: tuple[Tensor, ...], args: tuple[Any, ...]) -> Tensor:
        """The model's output on rows ``perturbed`` (:func:`~.output_modes.check_output`)."""
        output = self.forward_func(*perturbed, *args)
        return check_output(output, perturbed[0].shape[0], self.device)

    def values_of(self, output: Tensor, units: int, rows_example: Tensor | None) -> Tensor:
        """The game's value of each row of a chunk's model output."""
        if self._flat_target is None and self.target is not None:
            if self.target_host is not None:  # checked on the host, moved without a sync
                flat = output_flat_index(self.target_host, output.shape[1:])
                self._flat_target = host_to_device(flat, self.device)
            else:
                self._flat_target = output_flat_index(self.target, output.shape[1:])
        return self._select(output, self._flat_target, units, rows_example)

    def _select(
        self, output: Tensor, flat_target: Tensor | None, units: int, rows_example: Tensor | None
    ) -> Tensor:
        return select_values(
            output,
            flat_target,
            units,
            rows_example,
            value=self.value,
            outputs=self.outputs,
            dtype=self.value_dtype(),
        )


def prepare_game(
    forward_func: Callable[..., Any],
    inputs: Any,
    baselines: BaselineType = None,
    target: TargetType = None,
    additional_forward_args: Any = None,
    feature_mask: Any = None,
    perturbations_per_eval: int | None = None,
    *,
    references: Any = None,
    value: str = "output",
    reuse_buffers: bool = False,
    on_nan: str = "raise",
) -> tuple[CoalitionGame, bool]:
    """Validate Captum-style arguments and build a :class:`CoalitionGame`.

    Returns the game and whether ``inputs`` was a tuple. Every check here runs
    before any model call; this function calls no model.
    """
    check_forward_func(forward_func)
    tensors, is_tuple = format_inputs(inputs)
    check_options(value, on_nan, reuse_buffers, perturbations_per_eval)
    backgrounds = format_backgrounds(baselines, references, tensors)
    features = format_features(feature_mask, tensors)
    batch, device = tensors[0].shape[0], tensors[0].device
    target_host = None
    if not (isinstance(target, Tensor) and target.device.type != "cpu"):
        target_host = format_target(target, batch, torch.device("cpu"))
    target_on_device = (
        format_target(target, batch, device)
        if target_host is None
        else host_to_device(target_host, device)
    )
    game = CoalitionGame(  # the arguments checked in this order
        forward_func=forward_func,
        inputs=tensors,
        backgrounds=backgrounds,
        features=features,
        target=target_on_device,
        additional_args=format_additional_forward_args(additional_forward_args),
        value=value,  # type: ignore[arg-type]
        perturbations_per_eval=perturbations_per_eval,
        reuse_buffers=reuse_buffers,
        on_nan=on_nan,
        blend=can_blend(tensors, backgrounds),
        target_host=target_host,
    )
    return game, is_tuple
