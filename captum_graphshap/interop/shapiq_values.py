r"""Shapley values and Bivariate Shapley's pair matrix as ``shapiq.InteractionValues``.

shapiq's network and SI-graph plots draw a node per feature (its first-order
value) and an edge per pair (its second-order value). Bivariate Shapley
(Masoomi et al.) gives a *directed* matrix, ``E2[i, j]`` = the importance of
``i`` given ``j`` present, which is not an interaction index; shapiq stores one
value per unordered pair. :func:`pair_dependence` turns the matrix into one
symmetric value per pair, and :func:`to_interaction_values` builds the object.

The pair value (``pairs="dependence"``)::

    D_ij = (2 E2[i, j] - phi_i) + (2 E2[j, i] - phi_j)

``2 E2[i, j] - phi_i = E2[i, j] - (phi_i - E2[i, j])`` is how much more ``i``
is worth with ``j`` present than with ``j`` absent (Shapley weights), so
``D_ij`` adds that over both directions: positive when the two features
reinforce each other, negative when each makes the other redundant, and 0 for
every pair of an additive model. With two features, or in a game whose only
interaction is between ``i`` and ``j``, ``D_ij`` equals their Shapley
interaction index ``v(S+ij) - v(S+i) - v(S+j) + v(S)``. With several
interacting pairs it also picks up a sixth of the other pairs' interactions
that involve ``i`` or ``j``; it is a summary of the bivariate matrix for
drawing, not an exact interaction index. ``pairs="mean"`` keeps the raw
matrix instead: ``(E2[i, j] + E2[j, i]) / 2``.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import Tensor

from .shap_explanation import require

#: The pair values :func:`to_interaction_values` can store.
PAIR_VALUES = ("dependence", "mean")


def pair_dependence(shapley: Tensor, bivariate: Tensor) -> Tensor:
    """``D_ij = (2 E2[i, j] - phi_i) + (2 E2[j, i] - phi_j)``, zero on the diagonal.

    Args:
        shapley:
            ``(..., d)`` Shapley values.
        bivariate:
            ``(..., d, d)`` Bivariate Shapley matrix, ``E2[i, j]`` = importance of
            ``i`` given ``j`` present.

    Returns:
        ``(..., d, d)`` symmetric tensor (see the module docstring).

    Example:
        >>> import torch
        >>> phi = torch.tensor([1.0, 2.0])
        >>> e2 = torch.tensor([[0.0, 0.75], [1.25, 0.0]])  # v(12)-v(2)=1.5, v(12)-v(1)=2.5
        >>> pair_dependence(phi, e2)
        tensor([[0., 1.],
                [1., 0.]])
    """
    gain = 2 * bivariate - shapley.unsqueeze(-1)  # gain[i, j] = 2 E2[i, j] - phi_i
    out = gain + gain.transpose(-1, -2)
    eye = torch.eye(out.shape[-1], dtype=torch.bool, device=out.device)
    return out.masked_fill(eye, 0.0)


def _pick(tensor: Tensor, name: str, example: int | None, rank: int) -> Tensor:
    """One example of a batched tensor (``rank`` = dims of one example)."""
    if tensor.dim() == rank:
        return tensor
    if tensor.dim() != rank + 1:
        raise ValueError(
            f"{name} must have {rank} dimensions (one example) or {rank + 1} (a batch), got "
            f"shape {tuple(tensor.shape)}."
        )
    size = tensor.shape[0]
    if example is None:
        if size != 1:
            raise ValueError(
                f"{name} holds a batch of {size} examples; InteractionValues describe one. "
                "Pass example=n to choose it."
            )
        return tensor[0]
    if not -size <= example < size:
        raise ValueError(f"example {example} is out of range for a batch of {size}.")
    return tensor[example]


def to_interaction_values(
    shapley: Tensor,
    bivariate: Tensor | None = None,
    *,
    baseline_value: float | Tensor = 0.0,
    example: int | None = None,
    pairs: str = "dependence",
    index: str = "SV",
) -> Any:
    """A ``shapiq.InteractionValues`` of one example's Shapley values and pair values.

    Order 0 holds ``baseline_value`` (``v(∅)``, the model's value at the
    baseline), order 1 the Shapley values, and, with ``bivariate``, order 2
    one value per pair from Bivariate Shapley's matrix (``pairs``, see
    :func:`pair_dependence`). Then ``shapiq.plot.network_plot`` and
    ``si_graph_plot`` draw the features and their dependence, and with
    ``bivariate=None`` the force and waterfall plots draw the Shapley values
    (``baseline_value`` + their sum = ``f(x)`` for efficient methods). The pair
    values are a summary for drawing, not an additive decomposition: sums over
    all orders do not give ``f(x)``.

    Args:
        shapley:
            ``(d,)`` or ``(N, d)`` Shapley values (``BivariateShapley(...)
            .attribute(..., return_shapley=True).shapley``, or any per-feature
            attribution, see :func:`~captum_graphshap.interop.per_feature_values`).
        bivariate:
            ``(d, d)`` or ``(N, d, d)`` Bivariate Shapley matrix, or None.
        baseline_value:
            ``v(∅)``: a number, or a tensor of one per example.
        example:
            Which example of a batch; needed when the batch holds more than one.
        pairs:
            ``"dependence"`` (default) or ``"mean"`` (``(E2[i, j] + E2[j, i]) / 2``).
        index:
            The index name shapiq records (its plots do not use it); shapiq
            accepts only its own names, and none describes the pair values, so
            the default ``"SV"`` states what the first order holds.

    Returns:
        shapiq.InteractionValues

    Raises:
        ImportError:
            Without the ``shapiq`` extra (``pip install "captum-graphshap[shapiq]"``).
        ValueError:
            For shapes that do not match, a batch without ``example``, or an
            unknown ``pairs``.

    Example:
        >>> import torch
        >>> from captum_graphshap.interop import to_interaction_values
        >>> phi, e2 = torch.tensor([1.0, 2.0]), torch.tensor([[0.0, 0.75], [1.25, 0.0]])
        >>> iv = to_interaction_values(phi, e2, baseline_value=0.5)
        >>> iv[(0,)], iv[(0, 1)], iv.baseline_value
        (1.0, 1.0, 0.5)
    """
    if not isinstance(shapley, Tensor):
        raise TypeError(f"shapley must be a tensor, got {type(shapley).__name__}.")
    if bivariate is not None and not isinstance(bivariate, Tensor):
        raise TypeError(f"bivariate must be a tensor or None, got {type(bivariate).__name__}.")
    if pairs not in PAIR_VALUES:
        raise ValueError(f"pairs must be one of {PAIR_VALUES}, got {pairs!r}.")
    if example is not None and (isinstance(example, bool) or not isinstance(example, int)):
        raise TypeError(f"example must be an int or None, got {type(example).__name__}.")
    phi = _pick(shapley.detach(), "shapley", example, 1).to("cpu", torch.float64)
    d = phi.shape[0]
    matrix = None
    if bivariate is not None:
        if bivariate.dim() == 3 and shapley.dim() == 2 and bivariate.shape[0] != shapley.shape[0]:
            raise ValueError(
                f"shapley has {shapley.shape[0]} examples but bivariate has {bivariate.shape[0]}."
            )
        matrix = _pick(bivariate.detach(), "bivariate", example, 2).to("cpu", torch.float64)
        if matrix.shape != (d, d):
            raise ValueError(
                f"bivariate must be ({d}, {d}) per example to go with {d} Shapley values, got "
                f"{tuple(matrix.shape)}."
            )
    base = baseline_value
    if isinstance(base, Tensor):
        base = _pick(
            base.detach().reshape(base.shape[0]) if base.dim() else base,
            "baseline_value",
            example,
            0,
        )
        base = float(base)
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"baseline_value must be a number or a tensor, got {type(base).__name__}.")

    shapiq = require("shapiq", "shapiq", "to_interaction_values")
    values: dict[tuple[int, ...], float] = {(): float(base)}
    values.update({(i,): float(phi[i]) for i in range(d)})
    if matrix is not None:
        pair = pair_dependence(phi, matrix) if pairs == "dependence" else (matrix + matrix.T) / 2
        values.update({(i, j): float(pair[i, j]) for i in range(d) for j in range(i + 1, d)})
    return shapiq.InteractionValues(
        values,
        index=index,
        max_order=1 if matrix is None else 2,
        n_players=d,
        min_order=0,
        estimated=False,
        baseline_value=float(base),
    )
