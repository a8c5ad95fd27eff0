"""Training a :class:`~.potential.ShapleyPotential` on the sampled coalitions' values.

Two terms, both free of label noise:

* the *recursion* of ``potential.py`` on random coalition rows of random
  examples: ``sum_{i in A} (P(A) - P(A - i)) = v(A) - v(empty)``, the network at
  each row and its ``|A|`` children (:func:`~.potential.recursion_residuals`);
* FastSHAP's objective at the examples themselves: the weighted squared error
  of their (normalised, so efficient) values over their coalitions. On the ReLU
  MLP of benchmarks/amortized.py it took the held-out error from 0.097 to 0.092
  (3,000 examples, 6,000 steps).

The first :data:`PRETRAIN_SHARE` of the steps fit ``P(A)`` to ``v(A)`` instead
(the potential of an additive game is the game itself), one network row per
coalition: on that MLP 0.084 after 6,000 steps more against 0.092 without.
The kept state is, as in ``training.py``, the network or its moving average,
whichever has the lower FastSHAP loss on the held-out examples' labels.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .coalition_rows import CoalitionRows
from .potential import ShapleyPotential, children, recursion_residuals
from .training import CHECKPOINTS, AdamW, TrainingData, held_out_loss, moving_average, normalised
from .training_clock import TrainingClock

#: optimiser steps of a fit with ``epochs=None`` (after the pretraining) on
#: :data:`REFERENCE_ROWS` coalition rows; other fits scale them with the square
#: root of their rows (:func:`default_steps`). On the MLPs of
#: benchmarks/amortized.py (3,000 examples, 128 wide) the held-out error kept
#: falling with the steps: ReLU 0.083 after 12,000 and 0.081 after 24,000;
#: softplus 0.0036 and 0.0025 (the per-example default at the same budget:
#: 0.0030)
POTENTIAL_STEPS = 24_000
#: the rows of a 3,000-example fit at ``budget=64``: 2,700 examples trained on (a
#: tenth held out), 63 non-empty rows each; 20,000 examples get 2.65 times the steps
REFERENCE_ROWS = 170_100
#: the fewest and the most steps ``epochs=None`` takes: a small data set still
#: gets a fit, and 48,000 (about 11 minutes on one thread of a busy 2-core
#: machine at d = 12) is the most measured
MIN_POTENTIAL_STEPS = 2_000
MAX_POTENTIAL_STEPS = 48_000
#: the share of pretraining steps (``P`` regressed on the values) before them
PRETRAIN_SHARE = 1 / 6
#: coalition rows per step of the recursion (each costs its ``|A| + 1`` network rows)
ROW_BATCH = 256
#: examples per step of the FastSHAP term (``d + 1`` network rows each)
EXAMPLE_BATCH = 32
#: the most input elements a step's network rows hold: the batches above shrink
#: for large inputs (a 224 x 224 RGB image at d = 196: one example, one row a
#: step), which keeps a step's memory bounded at the cost of noisier steps
STEP_ELEMENTS = 2**24
#: Adam's peak learning rate, reached over the first tenth of the steps, then a
#: cosine decay to zero; gradients clipped to this norm (a 16 x 16 image body
#: diverged at 4e-3 without)
LEARNING_RATE = 3e-3
WARMUP_SHARE = 0.1
GRADIENT_NORM = 1.0


@dataclass
class PotentialData:
    """The training examples, their coalition rows and what the loss reads of them."""

    inputs: tuple[Tensor, ...]
    rows: CoalitionRows
    #: ``(N, d)`` bool: features off their baseline (the others are null players)
    active: Tensor
    #: ``(N,)`` each example's network output (per-example targets), or None: all
    columns: Tensor | None

    @property
    def gaps(self) -> Tensor:
        """``(N, K)``: ``v(D) - v(empty)``, the full coalition's centred value."""
        return self.rows.values[:, 1]


def steps_per_epoch(data: PotentialData) -> int:
    """Steps for one pass over the training rows (the empty ones aside)."""
    rows = data.rows.coalitions.shape[0] * (data.rows.coalitions.shape[1] - 1)
    return max(1, math.ceil(rows / batch_sizes(data)[1]))


def batch_sizes(data: PotentialData) -> tuple[int, int, int]:
    """Rows of a pretraining step, coalition rows of a recursion step, examples of a
    FastSHAP step.

    ``4 ROW_BATCH``, :data:`ROW_BATCH` and :data:`EXAMPLE_BATCH`, fewer where
    their network rows (one per pretraining row, about ``1 + d / 2`` per
    coalition row, ``d + 1`` per example) would hold more than
    :data:`STEP_ELEMENTS` input elements.
    """
    d = data.active.shape[1]
    network_rows = max(1, STEP_ELEMENTS // max(1, sum(t[0].numel() for t in data.inputs)))
    return (
        min(4 * ROW_BATCH, network_rows),
        min(ROW_BATCH, max(1, network_rows // (1 + d // 2))),
        min(EXAMPLE_BATCH, max(1, network_rows // (d + 1))),
    )


def default_steps(data: PotentialData) -> int:
    """The steps of a fit with ``epochs=None``: more for more coalition rows.

    :data:`POTENTIAL_STEPS` times ``sqrt(rows / REFERENCE_ROWS)``, clipped to
    :data:`MIN_POTENTIAL_STEPS`-:data:`MAX_POTENTIAL_STEPS`. A fixed count
    leaves a larger set under-read: on the ReLU MLP at 20,000 examples the
    held-out error was 0.059 after 32,000 steps and 0.054 after 48,000 (the
    cap, which that fit reaches). A fixed number of passes (36 at 3,000
    examples) would take 170,000 steps at 20,000.
    """
    rows = data.rows.coalitions.shape[0] * (data.rows.coalitions.shape[1] - 1)
    steps = round(POTENTIAL_STEPS * math.sqrt(rows / REFERENCE_ROWS))
    return min(MAX_POTENTIAL_STEPS, max(MIN_POTENTIAL_STEPS, steps))


def pick(values: Tensor, columns: Tensor | None) -> Tensor:
    """``(R, K)`` network outputs, or each row's one column ``(R, 1)``."""
    return values if columns is None else values.gather(1, columns[:, None])


def value_scale(rows: CoalitionRows) -> float:
    """The root mean square of the centred values (the empty rows aside)."""
    return float(rows.values[:, 1:].pow(2).mean().sqrt().clamp_min(1e-12))


def sampled(data: PotentialData, count: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``count`` random (example, row) pairs, the empty row excluded."""
    examples, per_example = data.rows.coalitions.shape[:2]
    flat = torch.randint(examples * (per_example - 1), (count,), generator=generator)
    device = data.active.device
    return (flat // (per_example - 1)).to(device), (flat % (per_example - 1) + 1).to(device)


def presence(data: PotentialData, example: Tensor, row: Tensor) -> Tensor:
    """``(R, d)``: the rows' coalitions less the features at their baseline."""
    return data.rows.coalitions[example, row] & data.active[example]


def pretraining_loss(
    network: ShapleyPotential, data: PotentialData, scale: float, generator: torch.Generator
) -> Tensor:
    """The mean squared error of ``P(A)`` to ``v(A)`` on random rows (scaled)."""
    example, row = sampled(data, batch_sizes(data)[0], generator)
    columns = None if data.columns is None else data.columns[example]
    potentials = pick(
        network.potentials(data.inputs, example, presence(data, example, row)), columns
    )
    target = data.rows.values[example, row].to(potentials.dtype) / scale
    return (potentials - target).pow(2).mean()


def recursion_loss(
    network: ShapleyPotential, data: PotentialData, scale: float, generator: torch.Generator
) -> Tensor:
    """The mean squared recursion residual on random rows, in units of ``scale``."""
    example, row = sampled(data, batch_sizes(data)[1], generator)
    present = presence(data, example, row)
    parent, child = children(present)
    both = network.potentials(
        data.inputs, torch.cat([example, example[parent]]), torch.cat([present, child])
    )
    if data.columns is not None:
        both = pick(both, torch.cat([data.columns[example], data.columns[example[parent]]]))
    values = data.rows.values[example, row].to(both.dtype) / scale
    residuals = recursion_residuals(both[: len(example)], both[len(example) :], parent, values)
    return residuals.pow(2).mean()


def example_loss(
    network: ShapleyPotential, data: PotentialData, scale: float, generator: torch.Generator
) -> Tensor:
    """FastSHAP's objective at random examples: their normalised values against their rows."""
    device = data.active.device
    count = batch_sizes(data)[2]
    example = torch.randint(len(data.active), (count,), generator=generator).to(device)
    raw = network(*(t[example] for t in data.inputs))  # (E, d, K_net)
    if data.columns is not None:
        raw = raw.gather(2, data.columns[example][:, None, None].expand(-1, raw.shape[1], 1))
    gaps = data.gaps[example].to(raw.dtype) / scale
    phi = normalised(raw, gaps, data.active[example])
    coalitions = data.rows.coalitions[example].to(raw.dtype)  # (E, M, d)
    predicted = torch.einsum("emd,edk->emk", coalitions, phi)
    residual = data.rows.values[example].to(raw.dtype) / scale - predicted
    weights = data.rows.weights
    weights = (weights[example] if weights.dim() == 2 else weights[None]).to(raw.dtype)
    return (weights[..., None] * residual.pow(2)).mean()


def train_potential(
    network: ShapleyPotential,
    data: PotentialData,
    held_out: TrainingData,
    steps: int,
    generator: torch.Generator,
    show_progress: bool,
) -> float:
    """Fit ``network`` in place (pretraining, then both terms); returns the values' scale.

    ``held_out`` holds the held-out examples' kernel labels and FastSHAP
    matrices: the state kept is the network's or its moving average's, whichever
    has the lower held-out FastSHAP loss at :data:`CHECKPOINTS` checks. A
    :class:`~.networks.BodyEnsemble` body's members are trained one after the
    other, each as a potential of its own (different initialisations, the
    next draws of ``generator``); one clock and one bar cover them all.
    """
    scale = value_scale(data.rows)
    members = member_potentials(network)
    pretraining = max(1, round(steps * PRETRAIN_SHARE))
    total = pretraining + steps
    bar = None
    if show_progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(members) * total, desc="AmortizedShapley training")
    work = repeated(step_work(data, pretraining), total)
    clock = TrainingClock(work, len(members) * total, "AmortizedShapley.fit", bar)
    for index, member in enumerate(members):
        schedule = _Schedule(pretraining, steps, index * total)
        _train_member(member, data, held_out, scale, schedule, generator, clock, bar)
    if bar is not None:
        bar.close()
    network.eval()
    return scale


@dataclass(frozen=True)
class _Schedule:
    """A member's steps: ``pretraining`` then ``steps``, from global step ``offset``."""

    pretraining: int
    steps: int
    offset: int


def _train_member(
    network: ShapleyPotential,
    data: PotentialData,
    held_out: TrainingData,
    scale: float,
    schedule: _Schedule,
    generator: torch.Generator,
    clock: TrainingClock,
    bar: Any,
) -> None:
    """One potential's fit (:func:`train_potential`), in place."""
    pretraining, steps = schedule.pretraining, schedule.steps
    optimiser = AdamW(list(network.parameters()))
    averaged = copy.deepcopy(network)
    total = pretraining + steps
    check_every = max(1, steps // CHECKPOINTS)
    best, best_state = math.inf, copy.deepcopy(network.state_dict())
    network.train()
    for step in range(total):
        if step < pretraining:
            loss = pretraining_loss(network, data, scale, generator)
            rate = LEARNING_RATE * _schedule(step, pretraining)
        else:
            loss = recursion_loss(network, data, scale, generator)
            loss = loss + example_loss(network, data, scale, generator)
            rate = LEARNING_RATE * _schedule(step - pretraining, steps)
        optimiser.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(network.parameters(), GRADIENT_NORM)
        optimiser.step(rate)
        if step == pretraining - 1:  # the average starts from the pretrained network
            averaged.load_state_dict(network.state_dict())
        moving_average(averaged, network, max(0, step - pretraining))
        done = step + 1 - pretraining
        if done > 0 and (done % check_every == 0 or step + 1 == total):
            for candidate in (averaged, network):
                candidate.eval()
                loss_held = held_out_loss(candidate, held_out, scale)
                if loss_held < best:
                    best, best_state = loss_held, copy.deepcopy(candidate.state_dict())
            network.train()
        clock.step_done(schedule.offset + step)
        if bar is not None:
            bar.update(1)
    network.load_state_dict(best_state)
    network.eval()


def member_potentials(network: ShapleyPotential) -> list[ShapleyPotential]:
    """The potentials trained apart: one per member of a
    :class:`~.networks.BodyEnsemble` body (sharing ``network``'s masks and
    baselines), else ``network`` itself."""
    from .networks import BodyEnsemble  # networks.py builds on potential.py

    if not isinstance(network.body, BodyEnsemble):
        return [network]
    views = []
    for body in network.body.members:
        view = ShapleyPotential(body)
        view.num_features, view.inputs = network.num_features, network.inputs
        for name, buffer in network.named_buffers(recurse=False):
            view.register_buffer(name, buffer, False)
        views.append(view)
    return views


def repeated(work: Callable[[int, int], float], period: int) -> Callable[[int, int], float]:
    """``work`` over global steps of members of ``period`` steps each, one after another."""

    def before(step: int) -> float:
        return (step // period) * work(0, period) + work(0, step % period)

    return lambda start, stop: before(stop) - before(start)


def step_work(data: PotentialData, pretraining: int) -> Callable[[int, int], float]:
    """The network rows of steps ``[start, stop)`` (the training clock's unit): a
    pretraining step's rows, then a recursion step's (each coalition row and its
    ``|A|`` children, about ``d / 2``) and a FastSHAP step's ``d + 1`` per example."""
    d = data.active.shape[1]
    rows, coalitions, examples = batch_sizes(data)
    recursion = coalitions * (1 + d / 2) + examples * (d + 1)

    def work(start: int, stop: int) -> float:
        early = max(0, min(stop, pretraining) - start)
        return early * rows + (stop - start - early) * recursion

    return work


def _schedule(step: int, total: int) -> float:
    """A linear warm-up over :data:`WARMUP_SHARE` of ``total`` steps, then a cosine to 0."""
    warmup = max(1, round(total * WARMUP_SHARE))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
