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
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .._compat import (
    BaselineType,
    TargetType,
    format_additional_forward_args,
    format_baselines,
    format_inputs,
    format_references,
    format_target,
    output_flat_index,
)
from .batching import Pacer, bytes_per_row, start_units
from .features import FeatureMasks, format_feature_mask
from .plan import CoalitionSet, DenseCoalitions, coalition_keys

ValueKind = Literal["output", "log_prob"]
VALUE_KINDS: tuple[str, ...] = ("output", "log_prob")
NAN_POLICIES: tuple[str, ...] = ("raise", "propagate")

#: The fixed call size of ``perturbations_per_eval=None`` before calls were
#: sized by measurement (:mod:`.batching`); benchmarks print it for comparison.
AUTO_ELEMENTS_PER_CALL = 2**19


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

    def __post_init__(self) -> None:
        self._flat_target: Tensor | None = None
        #: the rows and output of the call that found several outputs per
        #: example, replayed once when the adapter restarts (not evaluated twice)
        self._probe: tuple[list[Tensor], Tensor] | None = None
        #: one coalition per call: from the start for Captum's LLM forward (one
        #: prompt per call), or once the model failed on a batch of several
        #: coalitions with the automatic batching (the rest of the call)
        self.one_unit_per_call = self.perturbations_per_eval is None and takes_one_prompt(
            self.forward_func
        )
        #: multi-output mode: the values of every ``_run`` of the first output's
        #: run, all outputs kept, replayed by the runs of the other outputs
        self.tape: list[tuple[tuple[Any, ...], Tensor]] = []
        self.tape_position = 0
        if self.evaluations.numel() != self.batch_size:
            self.evaluations = torch.zeros(self.batch_size, dtype=torch.long, device=self.device)

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
            representative, inverse = _distinct(coalition_keys(store))
        units_per_call = max(1, self._rows_per_call() // self.batch_size)
        totals = self._run(
            _RowSource(store, representative),
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
            keys = _row_keys(store, example_index, reference_index, self.batch_size)
            representative, inverse = _distinct(keys)
            example_index = example_index[representative]
            if reference_index is not None:
                reference_index = reference_index[representative]
        totals = self._run(
            _RowSource(store, representative),
            example_index=example_index,
            units_per_call=self._rows_per_call(),
            show_progress=show_progress,
            desc=desc,
            reference_index=reference_index,
        )  # (U,)
        return totals if inverse is None else totals[inverse]

    def restricted(self, examples: Tensor | None, ids: Tensor | None) -> CoalitionGame:
        """The game of some examples (None: all) over some feature ids, renumbered ``0..``.

        Used to drop feature ids that occur nowhere (they are dummies), so
        estimators that are not exact for dummies (regressions, residual norms)
        see only the features that exist. Calls no model; its evaluation count
        starts at zero.
        """
        features = self.features if examples is None else self.features.select(examples)
        if ids is not None:
            features = features.renumbered(ids)
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
            output = self._call_model(tuple(t.clone() for t in self.inputs), self.additional_args)
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
            output = self._call_model(tensors, self._expand_args_repeat(copies))
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
            coalitions = DenseCoalitions(coalitions.to(device=self.device))
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
        coalitions: _RowSource,
        example_index: Tensor | None,
        units_per_call: int,
        show_progress: bool,
        desc: str,
        per_reference: bool = False,
        reference_index: Tensor | None = None,
    ) -> Tensor:
        """Evaluate every (coalition, reference) unit; average over references.

        With ``example_index`` None each unit covers the whole batch (rows
        ordered unit-major, example-minor, as Captum's ``repeat`` expansion);
        otherwise each unit is the single example ``example_index[u]``.
        ``per_reference`` keeps one total per unit instead of averaging;
        ``reference_index`` gives each row its own single reference.
        """
        if self.outputs > 1:
            key = _tape_key(coalitions, example_index, reference_index, per_reference)
            position = self.tape_position
            self.tape_position += 1
            if position < len(self.tape) and self.tape[position][0] == key:
                return self.tape[position][1][..., self.output_index]
        totals = self._run_all_outputs(
            coalitions,
            example_index,
            units_per_call,
            show_progress,
            desc,
            per_reference,
            reference_index,
        )
        if self.outputs == 1:
            return totals
        if position == len(self.tape):
            self.tape.append((key, totals))
        return totals[..., self.output_index]

    def _run_all_outputs(
        self,
        coalitions: _RowSource,
        example_index: Tensor | None,
        units_per_call: int,
        show_progress: bool,
        desc: str,
        per_reference: bool,
        reference_index: Tensor | None,
    ) -> Tensor:
        """:meth:`_run`'s evaluation; a trailing axis of outputs in multi-output mode."""
        count = len(coalitions)
        refs = 1 if reference_index is not None else self.num_references
        units = count * refs
        shared = example_index is None
        width = self.batch_size if shared else 1
        slots = units if per_reference else count
        trailing = (self.outputs,) if self.outputs > 1 else ()
        totals = torch.zeros(
            (slots, self.batch_size, *trailing) if shared else (slots, *trailing),
            dtype=self.value_dtype(),
            device=self.device,
        )
        arg_cache: dict[int, tuple[Any, ...]] = {}
        buffers = _RowBuffers(self.inputs, reuse=self.reuse_buffers)
        pacer = Pacer(
            units=units,
            width=width,
            coalitions=count,
            step=units_per_call,
            adaptive=self.perturbations_per_eval is None and not self.one_unit_per_call,
            bytes_per_unit=bytes_per_row(self.inputs)[0] * width,
            device=self.device,
            show_progress=show_progress,
            desc=desc,
        )
        start = 0
        fallback_from: tuple[str, int] | None = None
        halved = False  # out of memory: say so once, with the size that worked
        with torch.no_grad(), pacer:
            while start < units:
                step = pacer.step
                pacer.begin()
                unit = torch.arange(start, min(start + step, units), device=self.device)
                coalition_id = unit // refs
                if reference_index is not None:
                    reference_id = reference_index[coalition_id]
                else:
                    reference_id = unit % refs
                try:
                    if shared:
                        block = coalitions.take(coalition_id)
                        perturbed = self._perturb_shared(block, reference_id, buffers)
                        rows_example = None
                        args = arg_cache.get(unit.numel())
                        if args is None:
                            args = self._expand_args_repeat(unit.numel())
                            arg_cache[unit.numel()] = args
                    else:
                        assert example_index is not None
                        rows_example = example_index[coalition_id]
                        perturbed = self._perturb_rows(
                            coalitions.take(coalition_id), rows_example, reference_id, buffers
                        )
                        args = self._expand_args_index(rows_example)
                    output = self._replayed_probe(perturbed)
                    replayed = output is not None
                    if output is None:
                        output = self._call_model(perturbed, args)
                except Exception as error:
                    if unit.numel() == 1 or isinstance(error, AggregatedOutput):
                        raise
                    if _out_of_memory(error):
                        pacer.out_of_memory(unit.numel())
                        buffers.release()
                        halved = True
                        continue
                    if self.perturbations_per_eval is not None or self.one_unit_per_call:
                        raise
                    # A forward that handles one example at a time (Captum's
                    # LLMAttribution wrappers): retry this chunk one unit per
                    # call; if that fails too, its error is the real one.
                    self.one_unit_per_call = True
                    pacer.one_per_call()
                    fallback_from = (type(error).__name__, unit.numel() * width)
                    continue
                if halved:
                    _warn_halved(pacer.step * width)
                    halved = False
                if fallback_from is not None:  # one coalition per call works: say so once
                    _warn_one_per_call(*fallback_from)
                    fallback_from = None
                if replayed:
                    pass  # counted when the probe ran
                elif shared:
                    self.evaluations += unit.numel()
                else:
                    assert rows_example is not None
                    self.evaluations.index_add_(0, rows_example, torch.ones_like(rows_example))
                try:
                    row_values = self._values_of(output, unit.numel(), rows_example)
                except MultipleOutputs:
                    # The first call found several outputs per example: the
                    # adapter restarts once per output, and this chunk's rows
                    # are replayed instead of evaluated (and counted) again.
                    self._probe = ([t.clone() for t in perturbed], output)
                    raise
                slot = unit if per_reference else coalition_id
                if shared:
                    totals.index_add_(0, slot, row_values.view(-1, self.batch_size, *trailing))
                else:
                    totals.index_add_(0, slot, row_values)
                pacer.done(unit.numel(), timed=not replayed)
                start += unit.numel()
        if self.on_nan == "raise":
            self._check_finite(totals, coalitions, example_index, refs, per_reference)
        elif not self.nonfinite_outputs[0]:
            self.nonfinite_outputs[0] = not bool(torch.isfinite(totals).all())
        if refs > 1 and not per_reference:
            totals /= refs
        return totals

    def _replayed_probe(self, perturbed: Sequence[Tensor]) -> Tensor | None:
        """The output of the chunk that found several outputs, if these are its rows."""
        if self._probe is None:
            return None
        rows, output = self._probe
        self._probe = None
        same = len(rows) == len(perturbed) and all(
            a.shape == b.shape and bool(torch.equal(a, b)) for a, b in zip(rows, perturbed)
        )
        return output if same else None

    def _values_of(self, output: Tensor, units: int, rows_example: Tensor | None) -> Tensor:
        if self._flat_target is None and self.target is not None:
            self._flat_target = output_flat_index(self.target, output.shape[1:])
        return self._select(output, self._flat_target, units, rows_example)

    def _check_finite(
        self,
        totals: Tensor,
        coalitions: _RowSource,
        example_index: Tensor | None,
        refs: int,
        per_reference: bool,
    ) -> None:
        """Refuse non-finite model outputs, naming the coalitions and examples (one sync)."""
        finite = torch.isfinite(totals)
        if bool(finite.all()):  # the usual case: one reduction, one sync
            return
        bad = ~finite
        if self.outputs > 1:
            bad = bad.any(dim=-1)
        if example_index is None:
            slots, examples = bad.nonzero(as_tuple=True)
        else:
            slots = bad.nonzero()[:, 0]
            examples = example_index[slots // refs if per_reference else slots]
        coalition = slots // refs if per_reference else slots
        first = coalitions.take(coalition[:1])[0].nonzero()[:, 0].tolist()
        shown = first if len(first) <= 12 else [*first[:12], "..."]
        raise ValueError(
            f"forward_func returned NaN or infinite values for {int(coalition.unique().numel())} "
            f"of {len(coalitions)} coalitions, in examples "
            f"{sorted(set(examples.tolist()))[:20]}; the first has features {shown} present "
            "(the rest at the baseline). Check the model on such inputs, or pass "
            "on_nan='propagate' to return the non-finite attributions."
        )

    def _perturb_shared(
        self, coalitions: Tensor, reference_id: Tensor, buffers: _RowBuffers
    ) -> tuple[Tensor, ...]:
        """``(P, d)`` coalitions x whole batch -> tensors of ``P * N`` rows."""
        count = coalitions.shape[0]
        weights = _Weights(coalitions)
        out = []
        for position, (tensor, mask, background) in enumerate(
            zip(self.inputs, self.features.masks, self.backgrounds)
        ):
            source = weights.as_type(tensor.dtype if self.blend[position] else torch.bool)
            keep = _keep(source, mask, self.features.id_ranges[position]).view(count, *mask.shape)
            base = background[reference_id] if background.shape[0] > 1 else background
            rows = buffers.take(position, count * tensor.shape[0])
            _fill(rows.view(count, *tensor.shape), keep, tensor.unsqueeze(0), base)
            out.append(rows)
        return tuple(out)

    def _perturb_rows(
        self, coalitions: Tensor, example: Tensor, reference_id: Tensor, buffers: _RowBuffers
    ) -> tuple[Tensor, ...]:
        """One row per (coalition, example) pair."""
        weights = _Weights(coalitions)
        out = []
        for position, (tensor, mask, background) in enumerate(
            zip(self.inputs, self.features.masks, self.backgrounds)
        ):
            source = weights.as_type(tensor.dtype if self.blend[position] else torch.bool)
            if mask.shape[0] == 1:
                keep = _keep(source, mask, self.features.id_ranges[position]).view(
                    len(example), *mask.shape[1:]
                )
            else:
                flat_mask = mask.reshape(mask.shape[0], -1)[example]
                keep = source.gather(1, flat_mask).view(len(example), *mask.shape[1:])
            ref = background[reference_id]  # (R, 1 or N, *S)
            if ref.shape[1] == 1:
                base = ref[:, 0]
            else:
                base = ref[torch.arange(len(example), device=example.device), example]
            rows = buffers.take(position, len(example))
            _fill(rows, keep, tensor[example], base)
            out.append(rows)
        return tuple(out)

    def _expand_args_repeat(self, repeats: int) -> tuple[Any, ...]:
        return tuple(
            torch.cat([arg] * repeats, dim=0) if self._is_batched(arg) else arg
            for arg in self.additional_args
        )

    def _expand_args_index(self, example: Tensor) -> tuple[Any, ...]:
        return tuple(arg[example] if self._is_batched(arg) else arg for arg in self.additional_args)

    def _is_batched(self, arg: Any) -> bool:
        # Captum repeats every non-scalar tensor; we also leave alone tensors
        # whose first dimension is not the batch (shared weights, lookup tables).
        return isinstance(arg, Tensor) and arg.dim() > 0 and arg.shape[0] == self.batch_size

    def _call_model(self, perturbed: tuple[Tensor, ...], args: tuple[Any, ...]) -> Tensor:
        output = self.forward_func(*perturbed, *args)
        if isinstance(output, torch.futures.Future):
            output = output.wait()
        if isinstance(output, (int, float)) and not isinstance(output, bool):
            output = torch.tensor([output], device=self.device)
        rows = perturbed[0].shape[0]
        if not isinstance(output, Tensor):
            raise TypeError(
                f"forward_func returned {type(output).__name__}; it must return a tensor "
                "(one output per example, or one for the whole batch), an int or a float."
            )
        if output.dim() == 0:
            output = output.reshape(1)
        if output.shape[0] != rows:
            # Captum's aggregated mode: one output for the whole batch
            raise AggregatedOutput(tuple(output.shape))
        return output

    def _select(
        self, output: Tensor, flat_target: Tensor | None, units: int, rows_example: Tensor | None
    ) -> Tensor:
        rows = output.shape[0]
        flat = output.reshape(rows, -1)
        if self.value == "log_prob":
            if output.dim() != 2:
                raise ValueError(
                    f'value="log_prob" needs a model output of shape (batch, classes), got '
                    f"{tuple(output.shape)}."
                )
            flat = torch.log_softmax(flat.to(self.value_dtype()), dim=1)
        if flat_target is None:
            if flat.shape[1] != self.outputs:
                if self.outputs == 1:
                    raise MultipleOutputs(tuple(output.shape[1:]))
                raise ValueError(
                    f"the model output per example changed shape between calls: "
                    f"{tuple(output.shape[1:])} after {self.outputs} values."
                )
            values = flat if self.outputs > 1 else flat[:, 0]
            return values.to(self.value_dtype())
        if rows_example is None:
            index = flat_target.repeat(units)
        else:
            index = flat_target[rows_example]
        return flat.gather(1, index[:, None])[:, 0].to(self.value_dtype())


class AggregatedOutput(Exception):
    """The model returned one output for the whole batch (Captum's aggregated mode)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(f"forward_func returned shape {shape} for the whole batch")
        self.shape = shape


class MultipleOutputs(Exception):
    """Without ``target``, the model has several outputs per example (Captum's multi-output)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(f"the model has outputs of shape {shape} per example")
        self.shape = shape


def _tape_key(
    coalitions: _RowSource,
    example_index: Tensor | None,
    reference_index: Tensor | None,
    per_reference: bool,
) -> tuple[Any, ...]:
    """What identifies one evaluation across the runs of the outputs: sizes and checksums."""
    keys = coalition_keys(coalitions.store)
    if coalitions.representative is not None:
        keys = keys[coalitions.representative]
    position = torch.arange(1, keys.shape[0] + 1, device=keys.device)[:, None]
    checks: list[Any] = [int((keys * position).sum()), len(coalitions), per_reference]
    for index in (example_index, reference_index):
        checks.append(None if index is None else int((index * position[:, 0]).sum()))
    return tuple(checks)


def _out_of_memory(error: BaseException) -> bool:
    """CUDA's ``OutOfMemoryError`` and CPU allocation failures; no other error."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "out of memory" in text or "DefaultCPUAllocator: can't allocate memory" in text
    )


def _warn_halved(rows: int) -> None:
    warnings.warn(
        f"out of memory in a forward call; retrying with {rows} rows per call (halved). "
        "Pass a smaller perturbations_per_eval to avoid the retries.",
        RuntimeWarning,
        stacklevel=5,
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


def _warn_one_per_call(error: str, rows: int) -> None:
    warnings.warn(
        f"forward_func raised {error} on a batch of {rows} rows; evaluating one coalition "
        "per call instead (a model that takes one example at a time?). Pass "
        "perturbations_per_eval=1 to start that way.",
        RuntimeWarning,
        stacklevel=5,
    )


def _keep(coalitions: Tensor, mask: Tensor, id_range: tuple[int, int] | None) -> Tensor:
    """``keep[p, e] = coalitions[p, mask[e]]`` for a shared mask.

    A mask numbering its elements in order is a slice (a view, no copy).
    Otherwise ``gather`` with an expanded index, several times faster than
    advanced indexing ``coalitions[:, mask]``, which dominated the
    perturbation cost of image inputs.
    """
    if id_range is not None:
        return coalitions[:, id_range[0] : id_range[1]]
    flat = mask.reshape(-1)
    return coalitions.gather(1, flat.expand(coalitions.shape[0], -1))


class _Weights:
    """The chunk's coalitions as bool or as a 0/1 float of an input's dtype.

    Converting the small ``(P, d)`` block once, before it is expanded to
    every element, is cheaper than converting the expanded mask per input.
    """

    def __init__(self, coalitions: Tensor) -> None:
        self.by_dtype: dict[torch.dtype, Tensor] = {torch.bool: coalitions}

    def as_type(self, dtype: torch.dtype) -> Tensor:
        if dtype not in self.by_dtype:
            self.by_dtype[dtype] = self.by_dtype[torch.bool].to(dtype)
        return self.by_dtype[dtype]


def _fill(out: Tensor, keep: Tensor, present: Tensor, absent: Tensor) -> None:
    """``out = where(keep, present, absent)``, broadcasting.

    A floating ``keep`` (0/1 of the input's dtype) selects ``lerp(absent,
    present, keep)``: the same bits (ATen evaluates weight 1 as
    ``end - diff * 0`` and weight 0 as ``start + 0 * diff``, exact whenever
    ``diff`` is finite, which :func:`prepare_game` checks) at about twice the
    speed of ``where`` with a broadcast condition on CPU.
    """
    if keep.dtype == torch.bool:
        torch.where(keep, present, absent, out=out)
    else:
        torch.lerp(absent, present, keep, out=out)


class _RowBuffers:
    """One reusable input buffer per input tensor.

    A fresh multi-megabyte tensor per model call costs page faults comparable
    to a small model's forward pass; writing every chunk into the same
    buffer (``torch.where(..., out=)``) keeps it warm. Each chunk's output is
    reduced to values before the next chunk overwrites the buffer.
    """

    def __init__(self, inputs: tuple[Tensor, ...], reuse: bool) -> None:
        self.inputs = inputs
        self.reuse = reuse
        self.buffers: list[Tensor | None] = [None] * len(inputs)

    def release(self) -> None:
        self.buffers = [None] * len(self.inputs)

    def take(self, position: int, rows: int) -> Tensor:
        buffer = self.buffers[position]
        if not self.reuse or buffer is None or buffer.shape[0] < rows:
            template = self.inputs[position]
            buffer = template.new_empty((rows, *template.shape[1:]))
            self.buffers[position] = buffer
        return buffer[:rows]


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
    if not callable(forward_func):
        raise TypeError(f"forward_func must be callable, got {type(forward_func).__name__}.")
    tensors, is_tuple = format_inputs(inputs)
    if value not in VALUE_KINDS:
        raise ValueError(f"value must be one of {VALUE_KINDS}, got {value!r}.")
    if on_nan not in NAN_POLICIES:
        raise ValueError(f"on_nan must be one of {NAN_POLICIES}, got {on_nan!r}.")
    if not isinstance(reuse_buffers, bool):
        raise TypeError(f"reuse_buffers must be True or False, got {reuse_buffers!r}.")
    if perturbations_per_eval is not None:
        if isinstance(perturbations_per_eval, bool) or not isinstance(perturbations_per_eval, int):
            raise TypeError(
                f"perturbations_per_eval must be a positive int or None, got "
                f"{type(perturbations_per_eval).__name__}."
            )
        if perturbations_per_eval < 1:
            raise ValueError(f"perturbations_per_eval must be >= 1, got {perturbations_per_eval}.")
    if references is not None:
        if baselines is not None:
            raise ValueError(
                "pass either baselines (one reference point) or references (a background "
                "set to average over), not both."
            )
        backgrounds = tuple(r.unsqueeze(1) for r in format_references(references, tensors))
    else:
        backgrounds = tuple(b.unsqueeze(0) for b in format_baselines(baselines, tensors))
    features = format_feature_mask(feature_mask, tensors)
    if features.num_features == 0:
        raise ValueError(
            "inputs have no elements to attribute (d = 0 features); pass inputs with at "
            "least one element per example."
        )
    device = tensors[0].device
    flat_target = format_target(target, tensors[0].shape[0], device)
    args = format_additional_forward_args(additional_forward_args)
    game = CoalitionGame(
        forward_func=forward_func,
        inputs=tensors,
        backgrounds=backgrounds,
        features=features,
        additional_args=args,
        target=flat_target,
        value=value,  # type: ignore[arg-type]
        perturbations_per_eval=perturbations_per_eval,
        reuse_buffers=reuse_buffers,
        on_nan=on_nan,
        blend=tuple(_can_blend(tensor, back) for tensor, back in zip(tensors, backgrounds)),
    )
    return game, is_tuple


def _can_blend(tensor: Tensor, background: Tensor) -> bool:
    """Whether ``lerp`` reproduces ``where`` exactly: floating values whose
    differences cannot overflow (``max|x| + max|b|`` below the dtype's max)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return False
    largest = float(tensor.detach().abs().max()) + float(background.detach().abs().max())
    return largest < torch.finfo(tensor.dtype).max


class _RowSource:
    """The distinct coalitions of a plan, expanded to bool rows one chunk at a time."""

    def __init__(self, store: CoalitionSet, representative: Tensor | None) -> None:
        self.store = store
        self.representative = representative

    def __len__(self) -> int:
        return len(self.store) if self.representative is None else self.representative.shape[0]

    def take(self, index: Tensor) -> Tensor:
        if self.representative is not None:
            index = self.representative[index]
        return self.store.take(index)


def _distinct(keys: Tensor) -> tuple[Tensor, Tensor]:
    """The first row of each distinct key and, per row, its distinct key's position.

    ``keys`` is ``(M, L)`` int64: a 1-D sort when ``L = 1``, lexicographic
    otherwise; memory is a few words per row, never ``d`` bits.
    """
    if keys.shape[1] == 1:
        unique, inverse = torch.unique(keys[:, 0], return_inverse=True)
    else:
        unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    count = keys.shape[0]
    representative = torch.full((unique.shape[0],), count, dtype=torch.long, device=keys.device)
    representative.scatter_reduce_(
        0, inverse, torch.arange(count, device=keys.device), reduce="amin"
    )
    return representative, inverse


def _row_keys(
    store: CoalitionSet, example_index: Tensor, reference_index: Tensor | None, batch: int
) -> Tensor:
    """Keys of (example, coalition, reference) rows: one packed int64 when it fits."""
    example_bits = max(1, (batch - 1).bit_length())
    reference_bits = 0
    if reference_index is not None:
        reference_bits = max(1, int(reference_index.max().item()).bit_length())
    keys = coalition_keys(store, extra_bits=example_bits + reference_bits)
    d = store.num_features
    if keys.shape[1] == 1:
        packed = keys[:, 0] | (example_index << d)
        if reference_index is not None:
            packed = packed | (reference_index << (d + example_bits))
        return packed[:, None]
    columns = [keys, example_index[:, None]]
    if reference_index is not None:
        columns.append(reference_index[:, None])
    return torch.cat(columns, dim=1)


def unique_coalitions(coalitions: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct rows of a ``(M, d)`` bool matrix and the inverse index."""
    representative, inverse = _distinct(coalition_keys(DenseCoalitions(coalitions)))
    return coalitions[representative], inverse
