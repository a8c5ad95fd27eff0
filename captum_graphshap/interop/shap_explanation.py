"""Our attributions as a ``shap.Explanation``, for SHAP's plots.

A Captum-style attribution has the inputs' shape, and a feature of several
elements (a patch, a superpixel, a word's sub-word tokens) carries its value
on each of them. SHAP's tabular and text plots want one value per feature and
its image plot wants channels-last arrays; :func:`to_shap_explanation` does
the conversion, and computes ``base_values`` (the model's value with every
feature absent, ``v(∅)``) with the same engine the methods use, so that
``base_values + values.sum() == f(x)`` for every efficient method.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._compat import BaselineType, TargetType, float64_array, format_inputs
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..engine.features import FeatureMasks, feature_sums, format_feature_mask

#: What :func:`to_shap_explanation` builds: one value per feature (waterfall,
#: bar, beeswarm), channels-last images (``shap.plots.image``), or words
#: (``shap.plots.text``).
KINDS = ("features", "image", "text")

#: How element attributions become feature values: a feature's elements carry
#: the same value (every perturbation method here and in Captum), or the
#: elements' values are summed (gradient methods).
REDUCTIONS = ("repeated", "sum")


def require(module: str, extra: str, caller: str) -> Any:
    """Import an optional dependency, or raise an ImportError naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{caller} needs the optional package {module!r}; install it with: "
            f'pip install "captum-graphshap[{extra}]"'
        ) from error


def per_feature_values(
    attributions: Tensor | tuple[Tensor, ...],
    inputs: Tensor | tuple[Tensor, ...],
    feature_mask: Tensor | tuple[Tensor, ...] | None = None,
    *,
    reduce: str = "repeated",
) -> tuple[Tensor, Tensor]:
    """One attribution per feature from attributions in the inputs' shapes.

    Args:
        attributions:
            A tensor or tuple shaped like ``inputs`` (Captum's convention), or an
            ``(N, d)`` tensor that already holds one value per feature (such as
            ``BivariateShapley(...).attribute(..., return_shapley=True).shapley``).
        inputs:
            The explained inputs, a tensor or a tuple of tensors.
        feature_mask:
            The mask the attributions were computed with (Captum's forms:
            shared or per example); None is one feature per element.
        reduce:
            ``"repeated"`` (each feature's elements hold its value, as every
            perturbation method returns; checked) or ``"sum"`` (element
            attributions summed per feature, for gradient methods).

    Returns:
        values, present:
            ``(N, d)`` float64 tensor, and ``(N, d)`` bool, False where an
            example's mask does not use that id (its value is then 0).

    Raises:
        ValueError:
            If the shapes do not match, or with ``reduce="repeated"`` the
            elements of a feature hold different values.

    Example:
        >>> import torch
        >>> from captum_graphshap.interop import per_feature_values
        >>> x = torch.ones(1, 4)
        >>> mask = torch.tensor([[0, 0, 1, 1]])
        >>> values, present = per_feature_values(torch.tensor([[2.0, 2.0, -1.0, -1.0]]), x, mask)
        >>> values.tolist(), present.tolist()
        ([[2.0, -1.0]], [[True, True]])
    """
    tensors, _ = format_inputs(inputs)
    features = format_feature_mask(feature_mask, tensors)
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}.")
    return _per_feature(attributions, tensors, features, reduce)


def _per_feature(
    attributions: Any, tensors: tuple[Tensor, ...], features: FeatureMasks, reduce: str
) -> tuple[Tensor, Tensor]:
    batch, d = tensors[0].shape[0], features.num_features
    present = features.present().expand(batch, d)
    given = attributions if isinstance(attributions, tuple) else (attributions,)
    if not all(isinstance(a, Tensor) for a in given):
        raise TypeError(
            "attributions must be a tensor or a tuple of tensors (what attribute returns), "
            f"got {type(attributions).__name__}."
        )
    if (
        len(given) == 1
        and given[0].shape == (batch, d)
        and (len(tensors) > 1 or tensors[0].shape != given[0].shape)
    ):
        values = given[0].detach().to(torch.float64)
        return torch.where(present, values, torch.zeros_like(values)), present
    if len(given) != len(tensors) or any(a.shape != t.shape for a, t in zip(given, tensors)):
        raise ValueError(
            f"attributions have shapes {[tuple(a.shape) for a in given]} but inputs have "
            f"{[tuple(t.shape) for t in tensors]}; pass what attribute returned for these "
            f"inputs, or an ({batch}, {d}) tensor of one value per feature."
        )
    parts = tuple(a.detach().to(torch.float64) for a in given)
    if reduce == "sum":
        return feature_sums(parts, features.masks, d), present
    low = parts[0].new_full((batch, d), float("inf"))
    high = parts[0].new_full((batch, d), float("-inf"))
    for part, mask in zip(parts, features.masks):
        index = mask.expand_as(part).reshape(batch, -1)
        flat = part.reshape(batch, -1)
        low = low.scatter_reduce(1, index, flat, reduce="amin")
        high = high.scatter_reduce(1, index, flat, reduce="amax")
    spread = torch.where(present, high - low, torch.zeros_like(high))
    scale = torch.where(present, high.abs(), torch.zeros_like(high)).amax().clamp_min(1e-30)
    if bool((spread > 1e-6 * scale).any()):
        n, j = (int(i) for i in torch.nonzero(spread > 1e-6 * scale)[0])
        raise ValueError(
            f"the elements of feature {j} of example {n} hold different attributions "
            f"({float(low[n, j]):.4g} to {float(high[n, j]):.4g}): they are not one value "
            "per feature. Pass the feature_mask the attributions were computed with, or "
            "reduce='sum' for element-wise (gradient) attributions."
        )
    return torch.where(present, high, torch.zeros_like(high)), present


def _feature_means(tensors: tuple[Tensor, ...], features: FeatureMasks) -> Tensor:
    """``(N, d)`` mean input value of each feature's elements (NaN where absent)."""
    batch, d = tensors[0].shape[0], features.num_features
    parts = tuple(t.detach().to(torch.float64) for t in tensors)
    ones = tuple(torch.ones_like(p) for p in parts)
    totals = feature_sums(parts, features.masks, d)
    counts = feature_sums(ones, features.masks, d)
    return torch.where(
        counts > 0, totals / counts.clamp_min(1), totals.new_full((batch, d), np.nan)
    )


def _base_values(game: CoalitionGame) -> np.ndarray:
    """``(N,)`` value of the empty coalition, computed as the methods compute it."""
    empty = torch.zeros(1, game.num_features, dtype=torch.bool, device=game.device)
    values = game.evaluate(empty)
    if values.dim() != 2 or values.shape[1] != 1:
        raise ValueError(
            "the model gives several outputs per example; pass target= to choose the one "
            f"the attributions explain (values of shape {tuple(values.shape)})."
        )
    return values[:, 0].detach().cpu().numpy()


def _check_words(words: Any, batch: int, present: Tensor) -> list[list[str]]:
    if isinstance(words, str) or not isinstance(words, Sequence) or len(words) != batch:
        raise ValueError(
            f"words must be a list of {batch} lists of strings, one per example (the second "
            "result of text.word_feature_mask), got "
            f"{type(words).__name__} of length {len(words) if hasattr(words, '__len__') else '?'}."
        )
    checked = []
    for n, row in enumerate(words):
        if isinstance(row, str) or not all(isinstance(w, str) for w in row):
            raise TypeError(f"words[{n}] must be a list of strings, got {row!r:.60}.")
        used = int(present[n].sum())
        if len(row) != used or not bool(present[n, : len(row)].all()):
            raise ValueError(
                f"words[{n}] has {len(row)} words but the feature mask gives example {n} "
                f"{used} features; pass the words that go with the mask (ids 0..n_words-1)."
            )
        checked.append(list(row))
    return checked


def to_shap_explanation(
    attributions: Tensor | tuple[Tensor, ...],
    inputs: Tensor | tuple[Tensor, ...],
    baselines: BaselineType = None,
    *,
    forward_func: Callable[..., Any] | None = None,
    target: TargetType = None,
    additional_forward_args: Any = None,
    feature_mask: Tensor | tuple[Tensor, ...] | None = None,
    references: Any = None,
    value: str = "output",
    base_values: float | Sequence[float] | Tensor | None = None,
    feature_names: Sequence[str] | None = None,
    words: Sequence[Sequence[str]] | None = None,
    kind: str | None = None,
    reduce: str = "repeated",
) -> Any:
    """A ``shap.Explanation`` of our attributions, for SHAP's plots.

    Three kinds:

    - ``"features"``: ``values`` and ``data`` are ``(N, d)``, one column per
      feature of ``feature_mask`` (a patch, a superpixel, a column); ``data``
      is the mean input value of the feature's elements. For
      ``shap.plots.waterfall(e[n])``, ``bar`` and ``beeswarm``.
    - ``"image"``: ``(N, C, H, W)`` or ``(N, H, W)`` inputs; ``values`` and
      ``data`` are channels-last ``(N, H, W, C)`` arrays, each pixel with its
      feature's value. For ``shap.plots.image``.
    - ``"text"``: one value per word, ``data`` the words (followed by a space
      for display), ragged when examples differ in length. For
      ``shap.plots.text`` and ``waterfall``.

    ``base_values`` is ``v(∅)``, the explained value with every feature
    absent, computed like the methods compute it (same ``baselines`` or
    ``references``, ``target``, ``additional_forward_args`` and ``value``), so
    that ``base_values + values.sum(-1) == v(all features)`` for every efficient
    method (exact Shapley, Myerson on a connected graph, the samplers).

    Args:
        attributions:
            What ``attribute`` returned (inputs' shapes), or ``(N, d)`` feature
            values (Bivariate Shapley's ``shapley``).
        inputs:
            The explained inputs.
        baselines:
            The baselines the attributions used (Captum's forms).
        forward_func:
            The explained model; with it ``base_values`` is computed (one
            forward pass of the baselines). Needed by the waterfall and text
            plots, unless ``base_values`` is given.
        target, additional_forward_args, references, value:
            As passed to ``attribute`` (``value="log_prob"`` explains the
            log-probability of the predicted class or of ``target``).
        feature_mask:
            The mask the attributions used.
        base_values:
            ``v(∅)`` given directly instead (a number or one per example);
            exclusive with ``forward_func``.
        feature_names:
            ``d`` names for ``kind="features"``; default ``"feature 0"``, ...
        words:
            For ``kind="text"``: each example's words, as returned by
            :func:`captum_graphshap.text.word_feature_mask`.
        kind:
            ``"features"``, ``"image"`` or ``"text"``; default ``"text"`` when
            ``words`` is given, ``"image"`` for one 4-dim tensor, else
            ``"features"``.
        reduce:
            See :func:`per_feature_values`.

    Returns:
        shap.Explanation

    Raises:
        ImportError:
            Without the ``shap`` extra (``pip install "captum-graphshap[shap]"``).
        ValueError, TypeError:
            For inconsistent arguments, before the model is called.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import shap
        >>> import torch
        >>> from captum_graphshap import ExactShapley
        >>> from captum_graphshap.interop import to_shap_explanation
        >>> layers = torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        >>> model = torch.nn.Sequential(*layers)
        >>> x = torch.randn(3, 4)
        >>> phi = ExactShapley(model).attribute(x, baselines=0.0, target=1)
        >>> e = to_shap_explanation(phi, x, 0.0, forward_func=model, target=1)
        >>> e.values.shape, e.base_values.shape
        ((3, 4), (3,))
        >>> total = e.base_values + e.values.sum(1)  # efficiency: f(x) for target 1
        >>> bool(abs(total - model(x)[:, 1].detach().numpy()).max() < 1e-5)
        True
        >>> shap.plots.waterfall(e[0], show=False)  # doctest: +SKIP
    """
    tensors, _ = format_inputs(inputs)
    features = format_feature_mask(feature_mask, tensors)
    kind = _check_kind(kind, words, tensors, reduce, forward_func, base_values)
    values, present = _per_feature(attributions, tensors, features, reduce)
    checked_words = _check_kind_arguments(
        kind, tensors, words, feature_names, features.num_features, present
    )
    base = _as_base_values(base_values, tensors[0].shape[0])
    shap = require("shap", "shap", "to_shap_explanation")
    if forward_func is not None:
        game, _ = prepare_game(
            forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            references=references,
            value=value,
        )
        base = _base_values(game)
    if kind == "features":
        names = (
            list(feature_names)
            if feature_names is not None
            else [f"feature {j}" for j in range(features.num_features)]
        )
        return shap.Explanation(
            values=values.cpu().numpy(),
            base_values=base,
            data=_feature_means(tensors, features).cpu().numpy(),
            feature_names=names,
        )
    if kind == "image":
        return _image_explanation(shap, values, tensors, features, base)
    return _text_explanation(shap, values, checked_words, base)


def _check_kind(
    kind: str | None,
    words: Any,
    tensors: tuple[Tensor, ...],
    reduce: str,
    forward_func: Any,
    base_values: Any,
) -> str:
    """The explanation's kind (inferred when None) and the options every kind checks."""
    if kind is None:
        kind = (
            "text"
            if words is not None
            else "image"
            if len(tensors) == 1 and tensors[0].dim() == 4
            else "features"
        )
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}.")
    if forward_func is not None and base_values is not None:
        raise ValueError(
            "pass forward_func (base values computed from the baselines) or base_values, not both."
        )
    if forward_func is not None and not callable(forward_func):
        raise TypeError(f"forward_func must be callable, got {type(forward_func).__name__}.")
    return kind


def _check_kind_arguments(
    kind: str,
    tensors: tuple[Tensor, ...],
    words: Any,
    feature_names: Any,
    d: int,
    present: Any,
) -> list[list[str]]:
    """The arguments that belong to one kind; the checked words for ``"text"``."""
    if kind == "image" and (len(tensors) != 1 or tensors[0].dim() not in (3, 4)):
        raise ValueError(
            'kind="image" needs one (N, C, H, W) or (N, H, W) tensor of inputs, got '
            f"shapes {[tuple(t.shape) for t in tensors]}."
        )
    checked_words: list[list[str]] = []
    if kind == "text":
        if words is None:
            raise ValueError('kind="text" needs words=, the words of each example.')
        checked_words = _check_words(words, tensors[0].shape[0], present)
    elif words is not None:
        raise ValueError(f'words= is for kind="text", not kind={kind!r}.')
    if feature_names is not None:
        if kind != "features":
            raise ValueError(f'feature_names= is for kind="features", not kind={kind!r}.')
        if isinstance(feature_names, str) or len(feature_names) != d:
            raise ValueError(
                f"feature_names must hold {d} names, one per feature, got {feature_names!r:.80}."
            )
    return checked_words


def _image_explanation(
    shap: Any, values: Tensor, tensors: tuple[Tensor, ...], features: Any, base: Any
) -> Any:
    """Channels-last ``(N, H, W, C)`` values and pixels, each pixel with its feature's value."""
    image = tensors[0]
    per_pixel = features.scatter(values, tensors, torch.float64)[0]
    if image.dim() == 3:
        image, per_pixel = image.unsqueeze(1), per_pixel.unsqueeze(1)
    return shap.Explanation(
        values=per_pixel.permute(0, 2, 3, 1).cpu().numpy(),
        base_values=base,
        data=image.detach().to(torch.float64).permute(0, 2, 3, 1).cpu().numpy(),
    )


def _text_explanation(shap: Any, values: Tensor, words: list[list[str]], base: Any) -> Any:
    """One value per word; ragged object arrays when the examples differ in length."""
    batch = len(words)
    rows = [values[n, : len(row)].cpu().numpy() for n, row in enumerate(words)]
    tokens = [np.array([w + " " for w in row[:-1]] + row[-1:]) for row in words]
    if len({len(row) for row in words}) == 1:
        return shap.Explanation(
            values=np.stack(rows), base_values=base, data=np.stack(tokens), feature_names=None
        )
    ragged_values, ragged_data = np.empty(batch, dtype=object), np.empty(batch, dtype=object)
    for n in range(batch):
        ragged_values[n], ragged_data[n] = rows[n], tokens[n]
    return shap.Explanation(values=ragged_values, base_values=base, data=ragged_data)


def _as_base_values(base_values: Any, batch: int) -> np.ndarray | None:
    if base_values is None:
        return None
    array = float64_array(base_values, "base_values", "a number or one number per example")
    if array.ndim == 0:
        return np.full(batch, float(array))
    if array.shape != (batch,):
        raise ValueError(
            f"base_values must be a number or hold {batch} values (one per example), got "
            f"shape {array.shape}."
        )
    return array
