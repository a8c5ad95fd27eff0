"""The fit's steps: check the arguments, label, train, calibrate, report."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from .._compat import format_target
from .._warnings import warn_caller
from ..engine import batching
from ..engine.coalition_game import CoalitionGame, prepare_game
from .coalition_rows import CoalitionRows, sampled_rows
from .conformal import conformal_quantile, example_scale, example_scores, residual_scores
from .data import as_tensors, check_same_batch, rows
from .labels import exact_values, labels_and_metric
from .networks import default_explainer, default_potential
from .objective import KernelMetric
from .potential import ShapleyPotential
from .potential_training import PotentialData, default_steps, steps_per_epoch, train_potential
from .report import FitReport, break_even, coverage, no_exact, relative_error, rmse
from .settings import FitSettings
from .training import (
    TrainingData,
    active_features,
    default_epochs,
    network_values,
    predict,
    train,
)

T = TypeVar("T")

#: examples labelled per engine call (bounds the rows built at once)
LABEL_CHUNK = 512
#: exact values are only computed up to this many features (2^16 rows each)
EXACT_FEATURES = 16


@dataclasses.dataclass
class FitPlan:
    """The checked arguments of a fit, before any model call."""

    train: tuple[Tensor, ...]
    held: tuple[Tensor, ...]
    #: per split: the target to give the engine per chunk (a fixed one, or per example)
    train_target: Any
    held_target: Any
    baselines: Any
    feature_mask: Any
    num_features: int
    target_mode: str
    fixed_target: Any
    masks: list[Tensor]
    backgrounds: list[Tensor]
    #: rows of ``train`` (the argument) trained on and held out (None: ``validation``
    #: given): where ``fit(labels=...)``'s rows go
    train_index: Tensor
    held_index: Tensor | None


def prepare_fit(
    model: Callable[..., Any],
    feature_mask: Any,
    train_data: Any,
    baselines: Any,
    target: Any,
    validation: Any,
    generator: torch.Generator | None,
) -> FitPlan:
    """Check every argument of ``fit`` (no model call) and split off the held-out examples."""
    tensors = as_tensors(train_data, "train")
    count = check_same_batch(tensors, "train")
    mode = target_mode(target, count)
    if validation is not None and mode == "per_example":
        raise ValueError(
            "a per-example target cannot cover validation examples: pass validation=None "
            "(a tenth of train is held out with its targets), or a fixed target."
        )
    held_index, train_index = split(count, validation is None, generator)
    if validation is None:
        held, train_part = rows(tensors, held_index), rows(tensors, train_index)
    else:
        held, train_part = as_tensors(validation, "validation"), tensors
        check_same_batch(held, "validation")
    per_example = per_example_target(target, count) if mode == "per_example" else None
    train_target: Any = (
        target
        if per_example is None
        else per_example[train_index.to(per_example.device)]
        if validation is None
        else per_example
    )
    held_target: Any = (
        target if per_example is None else per_example[held_index.to(per_example.device)]
    )
    # the engine's checks of inputs, baselines, mask and target, without a model call
    probe, _ = prepare_game(
        model, rows(tensors, slice(0, 2)), baselines, probe_target(target, mode), None, feature_mask
    )
    if probe.features.per_example:
        raise ValueError(
            "feature_mask must be shared by every example (batch dimension 1) to amortize."
        )
    if probe.num_references != 1 or any(b.shape[1] != 1 for b in probe.backgrounds):
        raise ValueError(
            "baselines must be shared by every example (a number, or a tensor of one "
            "example's shape): the explainer learns the game of one baseline."
        )
    prepare_game(
        model, rows(held, slice(0, 2)), baselines, probe_target(target, mode), None, feature_mask
    )
    backgrounds = [
        b.cpu().expand(1, 1, *t.shape[1:]).contiguous() for b, t in zip(probe.backgrounds, tensors)
    ]
    return FitPlan(
        train_part, held, train_target, held_target, baselines, feature_mask,
        probe.num_features, mode, target if mode == "fixed" else None,
        [m.cpu() for m in probe.features.masks], backgrounds,
        train_index, held_index if validation is None else None,
    )  # fmt: skip


def checked_labels(labels: Any, plan: FitPlan) -> Tensor | None:
    """``fit(labels=...)`` as ``(N, d, K)`` float64 on the training inputs' device, checked
    against the plan (no model call); None when none were given.

    Taken as :class:`~.label_attribution.ShapleyLabels` gives them with
    ``return_input_shape=False``: ``(N, d)``, or ``(N, K, d)`` for every output.
    """
    if labels is None:
        return None
    if not isinstance(labels, Tensor) or not labels.is_floating_point():
        raise TypeError(
            "labels must be a floating tensor of per-feature values, (N, d) or (N, outputs, "
            "d), as ShapleyLabels(model).attribute(train, ..., return_input_shape=False) "
            f"gives them; got {type(labels).__name__}."
        )
    count = len(plan.train_index) + (0 if plan.held_index is None else len(plan.held_index))
    d = plan.num_features
    if labels.dim() not in (2, 3) or labels.shape[0] != count or labels.shape[-1] != d:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)}, but train has {count} examples of "
            f"d = {d} features: pass ({count}, {d}), or ({count}, outputs, {d}) for every "
            "output (ShapleyLabels(...).attribute(train, ..., return_input_shape=False))."
        )
    if not bool(torch.isfinite(labels).all()):
        raise ValueError("labels hold NaN or infinite values; make them again.")
    per_output = labels[:, None] if labels.dim() == 2 else labels
    return per_output.transpose(1, 2).to(plan.train[0].device, torch.float64)


def target_mode(target: Any, count: int) -> str:
    """``"all"`` (None), ``"per_example"`` (a tensor or list of one per example), or ``"fixed"``."""
    if target is None:
        return "all"
    if (isinstance(target, Tensor) and target.numel() > 1) or isinstance(target, list):
        return "per_example"
    return "fixed"


def per_example_target(target: Any, count: int) -> Tensor:
    """The per-example targets as a ``(N,)`` long tensor (one column each)."""
    formatted = format_target(target, count, torch.device("cpu"))
    if formatted is None or (formatted.shape != (count, 1) and formatted.shape != (count,)):
        raise ValueError(
            f"a per-example target must hold one output index per training example ({count}), "
            f"as a 1-D tensor or list of ints; got {target!r:.80}."
        )
    return formatted.reshape(count).long()


def probe_target(target: Any, mode: str) -> Any:
    """The target of a two-example probe game."""
    if mode != "per_example":
        return target
    return per_example_target(target, len(target))[:2]


def split(count: int, hold_out: bool, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Held-out and training indices: a tenth held out (20 to 1,000), or none."""
    everything = torch.arange(count)
    if not hold_out:
        return everything[:0], everything
    if count < 40:
        raise ValueError(
            f"train has {count} examples; fit holds out a tenth (at least 20) for its report "
            "and intervals, so give at least 40, or pass validation=."
        )
    held = min(1000, max(20, count // 10))
    order = torch.randperm(count, generator=generator)
    return order[:held].sort().values, order[held:].sort().values


def network_seed(generator: torch.Generator | None) -> int:
    """A seed for the network's initialisation and shuffles, drawn from ``generator``."""
    return int(torch.randint(2**62, (1,), generator=generator))


def make_network(
    explainer: nn.Module | None, plan: FitPlan, columns: int, seed: int, potential: bool = False
) -> nn.Module:
    """The given explainer, or the default one for the inputs' kind (a
    :class:`~.potential.ShapleyPotential` for ``potential``), initialised from ``seed``."""
    if explainer is None:
        build = default_potential if potential else default_explainer
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            explainer = build(
                plan.train, tuple(plan.masks), tuple(plan.backgrounds), plan.num_features, columns
            )
        explainer.standardise(plan.train)  # type: ignore[operator]
    elif isinstance(explainer, ShapleyPotential):  # a custom body: bound to this fit
        shapes = [tuple(t.shape[1:]) for t in plan.train]
        explainer.bind(plan.masks, plan.backgrounds, shapes, plan.num_features)
    device = plan.train[0].device
    explainer = explainer.to(device)
    with torch.no_grad():  # the network's shape, before any model call
        network_values(explainer.eval(), rows(plan.train, slice(0, 2)), plan.num_features)
    return explainer


def output_shape(model: Callable[..., Any], plan: FitPlan) -> tuple[int, ...]:
    """The model's output shape per example, from one forward on one training example."""
    with torch.no_grad():
        output = model(*(t[:1].clone() for t in plan.train))
    shape = tuple(torch.as_tensor(output).shape[1:])
    return () if shape in ((), (1,)) else shape


def network_columns(plan: FitPlan, shape: tuple[int, ...]) -> int:
    """Outputs the network gives per feature: 1 for a fixed target, else the model's."""
    outputs = int(torch.Size(shape).numel())
    if plan.target_mode == "per_example" and len(shape) != 1:
        raise ValueError(
            f"a per-example target needs a model output of shape (batch, classes), got per "
            f"example {shape}; pass a fixed target or None."
        )
    return 1 if plan.target_mode == "fixed" else outputs


def chunk_games(
    model: Callable[..., Any],
    plan: FitPlan,
    tensors: tuple[Tensor, ...],
    target: Any,
    budget: int,
    draw: Callable[[CoalitionGame], T],
    description: str,
    show_progress: bool,
) -> tuple[list[T], int]:
    """``draw`` on the game of each chunk of :data:`LABEL_CHUNK` examples, with one
    forecast for them all; the draws and the model evaluations they cost."""
    draws, evaluations = [], 0
    count = tensors[0].shape[0]
    starts: Any = range(0, count, LABEL_CHUNK)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=description, unit="chunk")
    clock = time.perf_counter()
    for start in starts:
        chunk = rows(tensors, slice(start, start + LABEL_CHUNK))
        per_example = plan.target_mode == "per_example"
        chunk_target = target[start : start + LABEL_CHUNK] if per_example else target
        game, _ = prepare_game(model, chunk, plan.baselines, chunk_target, None, plan.feature_mask)
        with warnings.catch_warnings():
            # one forecast for the whole labelling (below), not one per chunk
            warnings.simplefilter("ignore", batching.CostForecast)
            draws.append(draw(game))
        if start == 0 and not show_progress:
            forecast_labelling(time.perf_counter() - clock, game.batch_size, count, budget)
        evaluations += int(game.evaluations.sum())
    return draws, evaluations


def label_split(
    model: Callable[..., Any],
    plan: FitPlan,
    tensors: tuple[Tensor, ...],
    target: Any,
    budget: int,
    estimator: str,
    generator: torch.Generator | None,
    show_progress: bool = False,
) -> tuple[Tensor, KernelMetric | None, int]:
    """``(N, d, K)`` labels of one split, in chunks, each example's FastSHAP matrix
    (``"fastshap"``; else None) and the model evaluations they cost."""
    draws, evaluations = chunk_games(
        model, plan, tensors, target, budget,
        lambda game: labels_and_metric(game, estimator, budget, generator),
        "AmortizedShapley labels", show_progress,
    )  # fmt: skip
    metrics = [metric for _, metric in draws if metric is not None]
    labels = torch.cat([label for label, _ in draws])
    return labels, KernelMetric.concatenate(metrics) if metrics else None, evaluations


def rows_split(
    model: Callable[..., Any],
    plan: FitPlan,
    tensors: tuple[Tensor, ...],
    target: Any,
    budget: int,
    generator: torch.Generator | None,
    show_progress: bool = False,
) -> tuple[CoalitionRows, int]:
    """Each example's sampled coalitions and values (:func:`~.coalition_rows.sampled_rows`),
    in chunks, and the model evaluations they cost."""
    parts, evaluations = chunk_games(
        model, plan, tensors, target, budget,
        lambda game: sampled_rows(game, budget, generator),
        "AmortizedShapley coalitions", show_progress,
    )  # fmt: skip
    weights = [p.weights for p in parts]
    shared = all(w.dim() == 1 for w in weights)
    return CoalitionRows(
        torch.cat([p.coalitions for p in parts]),
        torch.cat([p.values for p in parts]),
        weights[0]
        if shared
        else torch.cat([w.expand(len(p.coalitions), -1) for w, p in zip(weights, parts)]),
    ), evaluations


def forecast_labelling(seconds: float, done: int, count: int, budget: int) -> None:
    """A :class:`~captum_graphshap.engine.batching.CostForecast` for the labelling of
    ``count`` examples, timed on its first ``done``, where the rest is long work."""
    left = seconds / max(done, 1) * (count - done)
    if done >= count or left < batching.AUTO_PROGRESS_SECONDS:
        return
    if count * budget < batching.FORECAST_ROWS:
        return
    warn_caller(
        f"AmortizedShapley.fit: labels for {count:,} examples at budget={budget} = "
        f"{count * budget:,} model rows, about {batching.format_seconds(left)} more (timed "
        f"on the first {done:,}). Pass show_progress=True to follow it, or a smaller budget "
        "or fewer examples to shorten it.",
        batching.CostForecast,
    )


def training_data(
    tensors: tuple[Tensor, ...],
    labels: Tensor,
    target: Any,
    plan: FitPlan,
    metric: KernelMetric | None = None,
) -> TrainingData:
    """Labels with their gaps (efficient labels: the sums), per-example columns, the
    features off the baseline and the FastSHAP matrices (``"fastshap"``)."""
    columns = target.to(labels.device) if plan.target_mode == "per_example" else None
    active = active_features(tensors, plan.backgrounds, plan.masks, plan.num_features)
    return TrainingData(
        tensors, labels, labels.sum(dim=1), columns, active.to(labels.device), metric
    )


def fit(
    model: Callable[..., Any],
    plan: FitPlan,
    explainer: nn.Module | None,
    budget: int,
    epochs: int | None,
    generator: torch.Generator | None,
    show_progress: bool,
    estimator: str,
    confidence: float,
    exact_examples: int,
    labels: Tensor | None = None,
) -> tuple[nn.Module, FitSettings, FitReport]:
    """Label (or take ``labels``, :func:`checked_labels`), train, calibrate and report
    (``AmortizedShapley.fit``'s work)."""
    seed = network_seed(generator)
    potential = estimator == "potential"
    if explainer is not None:  # a custom network's shape, before any model call
        make_network(explainer, plan, 1, seed)
    shape = output_shape(model, plan)
    columns = network_columns(plan, shape)
    network = make_network(explainer, plan, columns, seed, potential)
    check_columns(network, plan, columns)
    if labels is not None and labels.shape[2] != columns:
        raise ValueError(
            f"labels hold {labels.shape[2]} output(s) per feature, but the fit explains "
            f"{columns} (target {'fixed' if columns == 1 else 'None: every output'})."
        )
    fit_potential = isinstance(network, ShapleyPotential) and potential
    train_rows, train_labels, train_metric, train_cost = training_split(
        model, plan, labels, budget, estimator, fit_potential, generator, show_progress
    )
    # the potential fit checks and calibrates on FastSHAP's labels of held-out examples
    held_estimator = "fastshap" if fit_potential else estimator
    held_labels, held_metric, held_cost = held_split(
        model, plan, labels, budget, held_estimator, generator, show_progress
    )
    held_data = training_data(plan.held, held_labels, plan.held_target, plan, held_metric)
    shuffles = torch.Generator().manual_seed(seed)
    if train_rows is not None:
        assert isinstance(network, ShapleyPotential)  # fit_potential above
        scale, examples, epochs = fit_potential_network(
            network, plan, train_rows, held_data, epochs, shuffles, show_progress
        )
    else:
        assert train_labels is not None  # labelled above
        train_data = training_data(plan.train, train_labels, plan.train_target, plan, train_metric)
        epochs = default_epochs(len(train_data)) if epochs is None else epochs
        scale, _ = train(network, train_data, held_data, epochs, shuffles, show_progress)
        examples = len(train_data)
    predictions = predict(network, held_data, scale)
    checked = exact_count(plan, exact_examples, budget)
    calibration = slice(0, len(held_data) - checked)
    scores = residual_scores(predictions[calibration], held_labels[calibration])
    largest = example_scores(predictions[calibration], held_labels[calibration]).max()
    settings = FitSettings(
        shapes=[tuple(t.shape[1:]) for t in plan.train],
        floating=[t.is_floating_point() for t in plan.train],
        masks=plan.masks, num_features=plan.num_features, baselines=plan.backgrounds,
        target_mode=plan.target_mode, fixed_target=plan.fixed_target, output_shape=shape,
        columns=columns, budget=budget, label_estimator=estimator, confidence=confidence,
        quantile=conformal_quantile(scores, confidence),
        largest_score=float(largest),
        scale=scale, vocabulary=vocabulary_of(network),
    )  # fmt: skip
    report = make_report(model, plan, settings, held_data, predictions, checked, generator)
    report = report._replace(
        examples=examples, epochs=epochs, evaluations=train_cost + held_cost + 1,
        label_rmse=rmse(predictions, held_labels),
        break_even_examples=break_even(train_cost + held_cost + 1, budget),
    )  # fmt: skip
    return network, settings, report


def training_split(
    model: Callable[..., Any],
    plan: FitPlan,
    labels: Tensor | None,
    budget: int,
    estimator: str,
    potential: bool,
    generator: torch.Generator | None,
    show_progress: bool,
) -> tuple[CoalitionRows | None, Tensor | None, KernelMetric | None, int]:
    """What the training split is trained on: its coalition rows (a potential, no
    labels: ``potential.py``) or its labels with their FastSHAP matrices, and the
    model evaluations they cost."""
    if potential:
        train_rows, cost = rows_split(
            model, plan, plan.train, plan.train_target, budget, generator, show_progress
        )
        return train_rows, None, None, cost
    if labels is not None:  # made elsewhere (ShapleyLabels): budget evaluations each
        train_labels = labels[plan.train_index.to(labels.device)]
        return None, train_labels, None, budget * len(train_labels)
    train_labels, metric, cost = label_split(
        model, plan, plan.train, plan.train_target, budget, estimator, generator, show_progress
    )
    return None, train_labels, metric, cost


def held_split(
    model: Callable[..., Any],
    plan: FitPlan,
    labels: Tensor | None,
    budget: int,
    estimator: str,
    generator: torch.Generator | None,
    show_progress: bool,
) -> tuple[Tensor, KernelMetric | None, int]:
    """The held-out examples' labels (``labels``' rows where they were held out of
    ``train``, else made here), FastSHAP matrices and cost."""
    if labels is not None and plan.held_index is not None:
        held_labels = labels[plan.held_index.to(labels.device)]
        return held_labels, None, budget * len(held_labels)
    return label_split(
        model, plan, plan.held, plan.held_target, budget, estimator, generator, show_progress
    )


def fit_potential_network(
    network: ShapleyPotential,
    plan: FitPlan,
    train_rows: CoalitionRows,
    held_data: TrainingData,
    epochs: int | None,
    shuffles: torch.Generator,
    show_progress: bool,
) -> tuple[float, int, int]:
    """Train the potential on the training rows: its value scale, the examples and
    the passes over their rows (``epochs``; None: :func:`default_steps`)."""
    data = potential_data(plan, train_rows)
    per_epoch = steps_per_epoch(data)
    steps = default_steps(data) if epochs is None else epochs * per_epoch
    scale = train_potential(network, data, held_data, steps, shuffles, show_progress)
    return scale, len(data.active), max(1, round(steps / per_epoch))


def vocabulary_of(network: nn.Module) -> int | None:
    """The token vocabulary a default network embeds (None: not a token network)."""
    body = network.body if isinstance(network, ShapleyPotential) else network
    vocabulary = getattr(body, "vocabulary", None)
    return vocabulary if isinstance(vocabulary, int) else None


def potential_data(plan: FitPlan, train_rows: CoalitionRows) -> PotentialData:
    """The training split's inputs and coalition rows, with what the potential fit reads."""
    device = plan.train[0].device
    active = active_features(plan.train, plan.backgrounds, plan.masks, plan.num_features)
    columns = plan.train_target.to(device) if plan.target_mode == "per_example" else None
    return PotentialData(plan.train, train_rows, active.to(device), columns)


def check_columns(network: nn.Module, plan: FitPlan, columns: int) -> None:
    """The network gives ``columns`` values per feature (a ValueError naming the count)."""
    with torch.no_grad():
        raw = network_values(network, rows(plan.train, slice(0, 2)), plan.num_features)
    if raw.shape[2] != columns:
        raise ValueError(
            f"the explainer network gives {raw.shape[2]} values per feature, but the fit's "
            f"target needs {columns} (1 for a fixed target, the model's outputs otherwise)."
        )


def exact_count(plan: FitPlan, exact_examples: int, budget: int) -> int:
    """Held-out examples compared with exact values (``d <= 16``): at most half of
    them, and no more than the labels' evaluations buy (``2^d`` each), so the
    check never costs more than the fit."""
    if plan.num_features > EXACT_FEATURES:
        return 0
    labelled = plan.train[0].shape[0] + plan.held[0].shape[0]
    affordable = budget * labelled // 2**plan.num_features
    return min(exact_examples, plan.held[0].shape[0] // 2, affordable)


def make_report(
    model: Callable[..., Any],
    plan: FitPlan,
    settings: FitSettings,
    held_data: TrainingData,
    predictions: Tensor,
    checked: int,
    generator: torch.Generator | None,
) -> FitReport:
    """The report's held-out comparisons (the caller fills in the cost and training counts)."""
    fields: dict[str, Any] = no_exact()
    cost = 0
    if checked:
        part = slice(len(held_data) - checked, len(held_data))
        tensors = rows(plan.held, part)
        target = held_data.columns[part] if held_data.columns is not None else plan.held_target
        game, _ = prepare_game(model, tensors, plan.baselines, target, None, plan.feature_mask)
        exact = exact_values(game)
        cost += int(game.evaluations.sum())
        half = settings.quantile * example_scale(predictions[part])
        fields.update(
            exact_error=relative_error(predictions[part], exact),
            exact_rmse=rmse(predictions[part], exact),
            label_exact_error=relative_error(held_data.labels[part], exact),
            coverage=coverage(predictions[part] - half, predictions[part] + half, exact),
        )
        if exact.shape[2] == 1:
            default, default_cost = default_estimates(
                model, plan, tensors, target, settings.budget, generator
            )
            cost += default_cost
            fields["default_exact_error"] = relative_error(default, exact)
            fields["beats_default"] = fields["exact_error"] <= fields["default_exact_error"]
    return FitReport(
        examples=0, held_out=len(held_data), budget=settings.budget,
        label_estimator=settings.label_estimator, epochs=0, evaluations=0, label_rmse=0.0,
        exact_examples=checked, check_evaluations=cost, break_even_examples=0, **fields,
    )  # fmt: skip


def default_estimates(
    model: Callable[..., Any],
    plan: FitPlan,
    tensors: tuple[Tensor, ...],
    target: Any,
    budget: int,
    generator: torch.Generator | None,
) -> tuple[Tensor, int]:
    """The per-example default, ``PairedKernelShap(budget=budget)``: ``(N, d, 1)`` and its cost."""
    from ..attr import PairedKernelShap

    inputs = tensors if len(tensors) > 1 else tensors[0]
    phi, evaluations = PairedKernelShap(model).attribute(
        inputs, plan.baselines, target, None, plan.feature_mask, return_input_shape=False,
        budget=budget, generator=generator, return_evaluations=True,
    )  # fmt: skip
    return phi.to(torch.float64).reshape(phi.shape[0], -1, 1), int(evaluations.sum())


def baselines_argument(settings: FitSettings, tensors: tuple[Tensor, ...]) -> Any:
    """The fit's baselines, shaped as one example of each input, on the inputs' device."""
    baselines = tuple(
        b[0].expand(1, *t.shape[1:]).to(t.device) for b, t in zip(settings.baselines, tensors)
    )
    return baselines if len(baselines) > 1 else baselines[0]


def mask_argument(settings: FitSettings, tensors: tuple[Tensor, ...]) -> Any:
    """The fit's feature masks (kept on the host), on the inputs' device, as
    ``feature_mask=`` takes them."""
    masks = tuple(m.to(t.device) for m, t in zip(settings.masks, tensors))
    return masks if len(masks) > 1 else masks[0]


def target_argument(settings: FitSettings, target: Any, count: int) -> tuple[Any, Tensor | None]:
    """The engine's target for a call, and the network columns to read (None: all)."""
    if settings.target_mode == "fixed":
        if target is not None and not same_target(target, settings.fixed_target, count):
            raise ValueError(
                f"target={target!r:.60} differs from the fit's fixed target "
                f"{settings.fixed_target!r}; the explainer learnt that output only."
            )
        return settings.fixed_target, None
    if target is None:
        if settings.target_mode == "per_example":
            raise ValueError(
                "target is required: the explainer was fitted with per-example targets; pass "
                "one output index per example (or one for all)."
            )
        return None, None
    formatted = format_target(target, count, torch.device("cpu"))
    if (
        formatted is None
        or formatted.numel() != count
        or not bool(((formatted >= 0) & (formatted < settings.columns)).all())
    ):
        raise ValueError(
            f"target must give one output index in 0..{settings.columns - 1} per example "
            f"(an int, or {count} of them), got {target!r:.60}."
        )
    return target, formatted.reshape(count).long()


def same_target(target: Any, fixed: Any, count: int) -> bool:
    """Whether ``target`` names the fit's fixed target for every example."""
    mine = format_target(target, count, torch.device("cpu"))
    theirs = format_target(fixed, count, torch.device("cpu"))
    return mine is not None and theirs is not None and torch.equal(mine, theirs)
