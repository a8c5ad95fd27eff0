"""The explainer's training loop: mean squared error to noisy unbiased labels.

The network's raw values are made efficient by the additive normalisation
``phi_i = raw_i + (gap - sum_j raw_j) / d`` (``gap = v(D) - v(empty)``, per
example and output), inside the loss as at prediction (FastSHAP's
normalisation), so the network never spends capacity on the sum. Features at
their baseline (every element equal to it) have Shapley value 0 (a dummy: no
coalition's value changes with them), so they get exactly 0 and the residual
is spread over the others (:func:`active_features`): spread over all ``d``,
a 16 x 16 stroke image's blank patches took a share of every residual.

With ``label_estimator="fastshap"`` the squared error is FastSHAP's objective
on each example's coalitions instead, a quadratic in the residual to the
kernel label (``objective.py``); the loop is the same.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..engine.features import feature_sums
from .objective import KernelMetric, squared_errors
from .training_clock import TrainingClock

#: the default number of optimiser steps a fit aims for (``epochs=None``): the
#: label noise is averaged over many steps. 6,000 steps left the smooth MLPs of
#: benchmarks/amortized.py short of convergence: 12,000 took the held-out error
#: from 0.0268 / 0.0090 / 0.0044 to 0.0246 / 0.0073 / 0.0030 (GELU / SiLU /
#: softplus, 3,000 examples) and from 0.0136 / 0.0048 / 0.0024 / 0.0133 / 0.087
#: to 0.0125 / 0.0037 / 0.0015 / 0.0118 / 0.085 (and tanh, ReLU; 20,000, 300
#: epochs); 24,000 gained nothing more (SiLU, 3,000: 0.0072)
DEFAULT_STEPS = 12_000
#: examples per optimiser step below :data:`LARGE_FIT` training examples
BATCH_SIZE = 128
#: examples per optimiser step from :data:`LARGE_FIT` examples on: a step
#: then averages more examples' label noise (tanh MLP of benchmarks/amortized.py,
#: 20,000 examples: held-out error to exact values 0.0161 -> 0.0153; no gain at 3,000)
LARGE_BATCH_SIZE = 512
LARGE_FIT = 10_000
#: Adam's learning rate at :data:`BATCH_SIZE` (times sqrt(batch / 128) for larger
#: batches), decayed by a cosine to zero
LEARNING_RATE = 1e-3
#: the kept network is an exponential moving average of the trained one's
#: parameters: it averages over the last ~1,000 steps' fits of the label noise
#: (tanh MLP of benchmarks/amortized.py, 3,000 examples: 0.0282 -> 0.0268)
AVERAGE_DECAY = 0.999
#: evaluations of the held-out loss over the fit (for the best state kept)
CHECKPOINTS = 40


def normalised(raw: Tensor, gap: Tensor, active: Tensor | None = None) -> Tensor:
    """``(N, d, K)`` values summing over features to ``gap`` ``(N, K)`` exactly.

    ``active`` ``(N, d)`` bool: the features off their baseline; the others get
    0 and no share of the residual (None: every feature is active).
    """
    if active is None:
        return raw + ((gap - raw.sum(dim=1)) / raw.shape[1]).unsqueeze(1)
    weight = active.to(raw.dtype).unsqueeze(-1)  # (N, d, 1)
    kept = raw * weight
    count = weight.sum(dim=1).clamp_min(1.0)  # (N, 1)
    return kept + ((gap - kept.sum(dim=1)) / count).unsqueeze(1) * weight


def active_features(
    inputs: tuple[Tensor, ...],
    backgrounds: tuple[Tensor, ...] | list[Tensor],
    masks: tuple[Tensor, ...] | list[Tensor],
    d: int,
) -> Tensor:
    """``(N, d)`` bool: features with an element unlike the baseline (the engine's
    one-reference backgrounds, ``(1, 1 or N, *S)``, and ``(1, *S)`` masks, one per input)."""
    differing = tuple(
        (x != b[0].to(x.device, x.dtype)).to(torch.float32) for x, b in zip(inputs, backgrounds)
    )
    return feature_sums(differing, tuple(m.to(inputs[0].device) for m in masks), d) > 0


@dataclass
class TrainingData:
    """Inputs, labels ``(N, d, K)`` and gaps ``(N, K)`` of one split."""

    inputs: tuple[Tensor, ...]
    labels: Tensor
    gaps: Tensor
    #: ``(N,)`` the network output each example's labels are of (per-example
    #: targets), or None: the labels' K columns are the network's
    columns: Tensor | None = None
    #: ``(N, d)`` the features off their baseline (:func:`active_features`), or
    #: None: all
    active: Tensor | None = None
    #: each example's FastSHAP matrix (``label_estimator="fastshap"``), or None: the
    #: loss is the mean squared error to the labels
    metric: KernelMetric | None = None

    def __len__(self) -> int:
        return self.labels.shape[0]

    def rows(self, index: Tensor) -> TrainingData:
        columns = None if self.columns is None else self.columns[index]
        active = None if self.active is None else self.active[index]
        metric = None if self.metric is None else self.metric.rows(index)
        return TrainingData(
            tuple(t[index] for t in self.inputs), self.labels[index], self.gaps[index], columns,
            active, metric,
        )  # fmt: skip


def network_values(network: nn.Module, inputs: tuple[Tensor, ...], d: int) -> Tensor:
    """The network's raw ``(N, d, outputs)`` values (a ValueError for another shape)."""
    raw = network(*inputs)
    if not isinstance(raw, Tensor):
        raise TypeError(f"the explainer network must return a tensor, got {type(raw).__name__}.")
    if raw.dim() == 2:
        raw = raw.unsqueeze(-1)
    batch = inputs[0].shape[0]
    if raw.dim() != 3 or raw.shape[:2] != (batch, d):
        raise ValueError(
            f"the explainer network returned shape {tuple(raw.shape)} for {batch} examples; "
            f"it must return (N, d) or (N, d, outputs) with d = {d} features."
        )
    return raw


def selected(raw: Tensor, columns: Tensor | None) -> Tensor:
    """The raw values of each example's column (per-example targets), or all of them."""
    if columns is None:
        return raw
    return raw.gather(2, columns[:, None, None].expand(-1, raw.shape[1], 1))


class AdamW:
    """Adam with decoupled weight decay, a few tensor operations per parameter.

    Not ``torch.optim.AdamW``: constructing a ``torch.optim`` optimiser
    imports ``torch._dynamo`` on first use, 6-15 s on a busy CPU, more than a
    small fit's whole training.
    """

    def __init__(self, parameters: list[nn.Parameter], weight_decay: float = 1e-4) -> None:
        self.parameters = [p for p in parameters if p.requires_grad]
        self.first = [torch.zeros_like(p) for p in self.parameters]
        self.second = [torch.zeros_like(p) for p in self.parameters]
        self.weight_decay, self.steps = weight_decay, 0

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self, learning_rate: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.steps += 1
        first_bias = 1 - betas[0] ** self.steps
        second_bias = 1 - betas[1] ** self.steps
        for parameter, first, second in zip(self.parameters, self.first, self.second):
            if parameter.grad is None:
                continue
            grad = parameter.grad
            first.mul_(betas[0]).add_(grad, alpha=1 - betas[0])
            second.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
            denominator = (second / second_bias).sqrt_().add_(1e-8)
            parameter.mul_(1 - learning_rate * self.weight_decay)
            parameter.addcdiv_(first, denominator, value=-learning_rate / first_bias)


def batch_size(examples: int) -> int:
    """Examples per optimiser step for a fit on ``examples`` training examples."""
    return LARGE_BATCH_SIZE if examples >= LARGE_FIT else BATCH_SIZE


def default_epochs(examples: int) -> int:
    """Epochs giving about :data:`DEFAULT_STEPS` steps (at least 20, at most 2,000)."""
    steps_per_epoch = max(1, math.ceil(examples / batch_size(examples)))
    return min(2000, max(20, DEFAULT_STEPS // steps_per_epoch))


def predict(network: nn.Module, data: TrainingData, scale: float) -> Tensor:
    """Normalised values ``(N, d, K)`` in the labels' units, in chunks, without gradients."""
    out = []
    d = data.labels.shape[1]
    with torch.no_grad():
        for start in range(0, len(data), 1024):
            part = data.rows(torch.arange(start, min(start + 1024, len(data))))
            raw = selected(network_values(network, part.inputs, d), part.columns)
            out.append(normalised(raw.to(part.gaps.dtype) * scale, part.gaps, part.active))
    return torch.cat(out)


def held_out_loss(network: nn.Module, data: TrainingData, scale: float) -> float:
    """Held-out loss to the labels, as in training (:func:`~.objective.squared_errors`)."""
    return float(squared_errors(predict(network, data, scale) - data.labels, data.metric))


def training_loss(network: nn.Module, rows: TrainingData, d: int, scale: float) -> Tensor:
    """Mean squared error of the normalised values to the labels (in label-scale units),
    or with ``rows.metric`` FastSHAP's objective (:func:`~.objective.squared_errors`).

    A network with ``member_values`` (the default tabular ensemble) has each
    member fitted on its own: the loss is the members' mean loss, not the
    loss of their mean, so they stay independent fits whose mean averages
    their errors.
    """
    member_values = getattr(network, "member_values", None)
    if member_values is None:
        raw = selected(network_values(network, rows.inputs, d), rows.columns)[None]
    else:
        raw = torch.stack([selected(m, rows.columns) for m in member_values(*rows.inputs)])
    active = None if rows.active is None else rows.active.repeat(raw.shape[0], 1)
    phi = normalised(raw.double().flatten(0, 1), rows.gaps.repeat(raw.shape[0], 1) / scale, active)
    residual = phi.view(raw.shape[0], *rows.labels.shape) - rows.labels / scale
    return squared_errors(residual, rows.metric)


@torch.no_grad()
def moving_average(averaged: nn.Module, network: nn.Module, steps: int) -> None:
    """One step of the parameters' exponential moving average (short memory at first).

    Buffers are not averaged: :func:`train` copies them (a custom network's
    batch-norm statistics) when it reads the average, not at every step.
    """
    decay = min(AVERAGE_DECAY, (1 + steps) / (10 + steps))
    for mean, parameter in zip(averaged.parameters(), network.parameters()):
        mean.lerp_(parameter, 1 - decay)


def train(
    network: nn.Module,
    train_data: TrainingData,
    held_out: TrainingData,
    epochs: int,
    generator: torch.Generator,
    show_progress: bool,
) -> tuple[float, list[float]]:
    """Fit ``network`` in place; returns the label scale and the held-out losses.

    Labels are divided by one scale (their root mean square) so the default
    learning rate suits any model's units. The state with the smallest
    held-out loss, checked :data:`CHECKPOINTS` times, is the one kept; the
    states checked are the network's and the moving average of its parameters
    (:data:`AVERAGE_DECAY`), which lags the network in a short fit.
    """
    scale = float(train_data.labels.pow(2).mean().sqrt().clamp_min(1e-12))
    d = train_data.labels.shape[1]
    optimiser = AdamW(list(network.parameters()))
    averaged = copy.deepcopy(network)
    batch = batch_size(len(train_data))
    learning_rate = LEARNING_RATE * math.sqrt(batch / BATCH_SIZE)
    steps_per_epoch = max(1, math.ceil(len(train_data) / batch))
    total = epochs * steps_per_epoch
    check_every = max(1, epochs // CHECKPOINTS)
    best, best_state, history = math.inf, copy.deepcopy(network.state_dict()), []
    epoch_range = range(epochs)
    if show_progress:
        from tqdm.auto import tqdm

        epoch_range = tqdm(epoch_range, desc="AmortizedShapley training")
    bar = epoch_range if show_progress else None
    clock = TrainingClock(lambda start, stop: stop - start, total, "AmortizedShapley.fit", bar)
    for epoch in epoch_range:
        network.train()
        order = torch.randperm(len(train_data), generator=generator).to(train_data.gaps.device)
        for start in range(0, len(train_data), batch):
            rows = train_data.rows(order[start : start + batch])
            loss = training_loss(network, rows, d, scale)
            optimiser.zero_grad()
            loss.backward()
            # a cosine decay of the learning rate to zero over the fit
            progress = min(optimiser.steps, total) / total
            optimiser.step(learning_rate * 0.5 * (1 + math.cos(math.pi * progress)))
            moving_average(averaged, network, optimiser.steps)
            clock.step_done(optimiser.steps - 1)
        if (epoch + 1) % check_every == 0 or epoch + 1 == epochs:
            # the average lags the network in a short fit: keep whichever is better
            with torch.no_grad():
                for average_buffer, buffer in zip(averaged.buffers(), network.buffers()):
                    average_buffer.copy_(buffer)
            losses = []
            for candidate in (averaged, network):
                candidate.eval()
                losses.append((held_out_loss(candidate, held_out, scale), candidate))
            held_loss, kept = min(losses, key=lambda pair: pair[0])
            history.append(held_loss)
            if held_loss < best:
                best, best_state = held_loss, copy.deepcopy(kept.state_dict())
    network.load_state_dict(best_state)
    network.eval()
    return scale, history
