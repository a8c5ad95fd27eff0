"""What a model's output means, and the multi-output tape that replays it.

A model answers a chunk of rows with one output per row (the usual case),
several outputs per row without a ``target`` (Captum's multi-output mode:
:class:`MultipleOutputs`, one explanation per output), or one output for the
whole batch (Captum's aggregated mode: :class:`AggregatedOutput`). The adapter
catches both exceptions and restarts the method in that mode.

In multi-output mode the run of the first output keeps every output of each
evaluation on the game's tape, keyed by :func:`tape_key`; the runs of the other
outputs replay it instead of calling the model again. :class:`Probe` keeps the
chunk that discovered the outputs, so that its rows are not evaluated twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .dedup import RowSource
from .plan import coalition_keys


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


def check_output(output: Any, rows: int, device: torch.device) -> Tensor:
    """A model's answer to ``rows`` rows as a tensor with one output per row.

    Waits for a ``torch.futures.Future``; a Python number becomes a one-element
    tensor on ``device``. Raises :class:`AggregatedOutput` when the output
    does not have one entry per row.
    """
    if isinstance(output, torch.futures.Future):
        output = output.wait()
    if isinstance(output, (int, float)) and not isinstance(output, bool):
        output = torch.tensor([output], device=device)
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


def select_values(
    output: Tensor,
    flat_target: Tensor | None,
    units: int,
    rows_example: Tensor | None,
    *,
    value: str,
    outputs: int,
    dtype: torch.dtype,
) -> Tensor:
    """The game's value of each row of a model output, in ``dtype``.

    ``value="log_prob"`` takes the log-softmax first. With a flat target index
    per example, the target's entry (``units`` stacked copies of the batch, or
    the examples ``rows_example``); without one, every output: ``(rows,
    outputs)`` in multi-output mode, and :class:`MultipleOutputs` the first
    time a model has several.
    """
    rows = output.shape[0]
    flat = output.reshape(rows, -1)
    if value == "log_prob":
        if output.dim() != 2:
            raise ValueError(
                f'value="log_prob" needs a model output of shape (batch, classes), got '
                f"{tuple(output.shape)}."
            )
        flat = torch.log_softmax(flat.to(dtype), dim=1)
    if flat_target is None:
        if flat.shape[1] != outputs:
            if outputs == 1:
                raise MultipleOutputs(tuple(output.shape[1:]))
            raise ValueError(
                f"the model output per example changed shape between calls: "
                f"{tuple(output.shape[1:])} after {outputs} values."
            )
        values = flat if outputs > 1 else flat[:, 0]
        return values.to(dtype)
    if rows_example is None:
        index = flat_target.repeat(units)
    else:
        index = flat_target[rows_example]
    return flat.gather(1, index[:, None])[:, 0].to(dtype)


class OutputTape:
    """Multi-output mode: the values of every evaluation of the first output's run, all
    outputs kept (``entries``, keyed by :func:`tape_key`), replayed in order by the
    runs of the other outputs (``position``: the next evaluation's place).

    One tape serves a game and its restricted copies (the groups of examples with
    features at their baseline): each output's run creates the groups anew, in the
    same order, so their evaluations replay too.
    """

    def __init__(self) -> None:
        #: (key, values, the evaluations per example it made)
        self.entries: list[tuple[tuple[Any, ...], Tensor, Tensor]] = []
        self.position = 0


def tape_key(
    coalitions: RowSource,
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


class Probe:
    """The rows and output of the call that found several outputs per example.

    Replayed once when the adapter restarts in multi-output mode, so that
    chunk is not evaluated (and counted) twice.
    """

    def __init__(self) -> None:
        self.saved: tuple[list[Tensor], Tensor] | None = None

    def keep(self, perturbed: Sequence[Tensor], output: Tensor) -> None:
        """Keep a copy of the rows (buffers may be reused) and the model's output."""
        self.saved = ([t.clone() for t in perturbed], output)

    def replay(self, perturbed: Sequence[Tensor]) -> Tensor | None:
        """The output of the chunk that found several outputs, if these are its rows."""
        if self.saved is None:
            return None
        rows, output = self.saved
        self.saved = None
        same = len(rows) == len(perturbed) and all(
            a.shape == b.shape and bool(torch.equal(a, b)) for a, b in zip(rows, perturbed)
        )
        return output if same else None
