r"""Shapley residuals (Kumar, Scheidegger, Venkatasubramanian and Friedler, 2021).

A game on ``d`` players is a function on the vertices of the hypercube
``{0, 1}^d``; its gradient lives on the ``d * 2^(d-1)`` edges
``(S, S + j)``: ``(grad v)(S, S + j) = v(S + j) - v(S)``. The partial gradient
``grad_i v`` keeps the edges of direction ``i`` and is zero elsewhere. The
*inessential game* ``v_i`` (Stern and Tettenhorst's component game) is the
least-squares fit of a gradient to it,

.. math::
    v_i = \arg\min_{u,\; u(\emptyset) = 0} \lVert \nabla_i v - \nabla u \rVert^2,

whose value at the grand coalition is the Shapley value: ``v_i(D) = phi_i``.
The residual ``r_i = grad_i v - grad v_i`` is what the Shapley value of
feature i cannot express; we report its Euclidean norm over all edges, each
edge counted once with weight 1 (no normalisation), which gives
``(0, sqrt 2, sqrt 2)`` for ``f = x1 + 2 x2 x3`` at ``x = 1``, ``b = 0``.

The normal equations ``L v_i = grad^T grad_i v`` involve the hypercube
Laplacian ``L``, which the Walsh-Hadamard basis ``chi_T(S) = (-1)^|T & S|``
diagonalises (eigenvalue ``2|T|``). Writing ``v = sum_T c_T chi_T``, the
right-hand side has coefficients ``2 c_T [i in T]``, hence

.. math::
    v_i = \sum_{T \ni i} \frac{c_T}{|T|} \chi_T - \text{(the same at } \emptyset),
    \qquad
    \lVert r_i \rVert^2 = 2^{d+1} \sum_{T \ni i} c_T^2 \Big(1 - \frac{1}{|T|}\Big).

One transform (``O(d 2^d)``) gives every norm; each inessential game costs
one inverse transform (``O(d 2^d)`` per feature). No dense solve anywhere.
Additive games have ``c_T = 0`` for ``|T| >= 2``, hence zero residuals.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..plans.walsh_kernel import walsh_hadamard

#: Largest number of features the residuals accept: the game needs all 2^d
#: coalitions, the same limit as exact Shapley values.
RESIDUALS_MAX_FEATURES = 20

#: ``return_residuals=True`` materialises ``d * d * 2^(d-1)`` edge values per
#: example (67 MB in float64 at d = 16); above this d it is refused.
RESIDUAL_VECTORS_MAX_FEATURES = 16


def coalition_sizes(d: int, device: torch.device | str = "cpu") -> Tensor:
    """``|S|`` of every coalition code ``S`` in ``0 .. 2^d - 1``."""
    codes = torch.arange(1 << d, device=device)
    sizes = torch.zeros_like(codes)
    for bit in range(d):
        sizes += (codes >> bit) & 1
    return sizes


def walsh_coefficients(values: Tensor) -> Tensor:
    """``c_T`` with ``v(S) = sum_T c_T (-1)^|T & S|``: the transform divided by ``2^d``."""
    return walsh_hadamard(values) / values.shape[-1]


def _residual_energy(values: Tensor) -> Tensor:
    """``(N, 2^d)`` values -> each Walsh coefficient's share of the squared residual
    norms, summed over the coalitions containing a feature by the callers (Parseval)."""
    d = values.shape[-1].bit_length() - 1
    coefficients = walsh_coefficients(values)
    sizes = coalition_sizes(d, values.device).to(values.dtype)
    # 1 - 1/|T|, zero at T = empty (which contains no feature anyway).
    shrink = torch.where(sizes > 0, 1 - 1 / sizes.clamp(min=1), torch.zeros_like(sizes))
    return coefficients.square() * shrink * 2.0 ** (d + 1)


def residual_norms(values: Tensor) -> Tensor:
    """``||r_i||`` of every feature from the values of all ``2^d`` coalitions.

    Args:
        values:
            ``(N, 2^d)``, column m the value of the coalition whose members are
            the set bits of m (the order of :func:`~captum_graphshap.plans.exact.all_coalitions`).

    Returns:
        ``(N, d)``: the Euclidean norm of each feature's residual over the
        hypercube's ``d 2^(d-1)`` edges. ``O(d 2^d)`` for all features together.
    """
    batch, count = values.shape
    d = count.bit_length() - 1
    energy = _residual_energy(values)
    squared = values.new_empty(batch, d)
    for i in range(d):
        with_i = energy.view(batch, count >> (i + 1), 2, 1 << i)[:, :, 1, :]
        squared[:, i] = with_i.sum(dim=(1, 2))
    return squared.clamp(min=0).sqrt()


def inessential_games(values: Tensor) -> Tensor:
    """Every feature's least-squares inessential game ``v_i`` on all coalitions.

    Returns:
        ``(N, d, 2^d)`` with ``v_i(empty) = 0``; ``v_i(D)`` is the Shapley value
        of feature i and ``sum_i v_i = v - v(empty)``. One inverse transform per
        feature, ``O(d 2^d)`` each.
    """
    batch, count = values.shape
    d = count.bit_length() - 1
    coefficients = walsh_coefficients(values)
    sizes = coalition_sizes(d, values.device)
    scaled = coefficients / sizes.clamp(min=1).to(values.dtype)
    codes = torch.arange(count, device=values.device)
    games = values.new_empty(batch, d, count)
    for i in range(d):
        selected = torch.where((codes >> i) & 1 == 1, scaled, torch.zeros_like(scaled))
        game = walsh_hadamard(selected)  # inverse transform of unnormalised coefficients
        games[:, i] = game - game[:, :1]
    return games


def hypercube_gradient(values: Tensor) -> Tensor:
    """``(..., 2^d)`` vertex values -> ``(..., d, 2^(d-1))`` edge differences.

    Entry ``[j, e]`` is ``v(S + j) - v(S)`` for the ``e``-th coalition ``S``
    without ``j``, in increasing order of its code (the code with bit ``j``
    removed is ``e``); :func:`hypercube_edges` lists the same edges.
    """
    count = values.shape[-1]
    d = count.bit_length() - 1
    lead = values.shape[:-1]
    flat = values.reshape(-1, count)
    out = flat.new_empty(flat.shape[0], d, count // 2)
    for j in range(d):
        pairs = flat.view(-1, count >> (j + 1), 2, 1 << j)
        out[:, j] = (pairs[:, :, 1, :] - pairs[:, :, 0, :]).reshape(flat.shape[0], -1)
    return out.view(*lead, d, count // 2)


def hypercube_edges(d: int, device: torch.device | str = "cpu") -> Tensor:
    """``(d, 2^(d-1), 2)`` coalition codes ``(S, S + j)`` of each edge, in the
    layout of :func:`hypercube_gradient` and :func:`residual_vectors`."""
    half = torch.arange(1 << max(d - 1, 0), device=device)
    edges = torch.empty(d, half.numel(), 2, dtype=torch.long, device=device)
    for j in range(d):
        low_bits = half & ((1 << j) - 1)
        lower = ((half >> j) << (j + 1)) | low_bits
        edges[j, :, 0] = lower
        edges[j, :, 1] = lower | (1 << j)
    return edges


def residual_vectors(values: Tensor, games: Tensor | None = None) -> Tensor:
    """Every feature's residual ``r_i = grad_i v - grad v_i`` on every edge.

    Args:
        values:
            ``(N, 2^d)``.
        games:
            The inessential games of :func:`inessential_games`, if already computed.

    Returns:
        ``(N, d, d, 2^(d-1))``: ``[n, i, j, e]`` is ``r_i`` on the ``e``-th edge of
        direction ``j`` (see :func:`hypercube_edges`).
    """
    if games is None:
        games = inessential_games(values)
    d = games.shape[1]
    residuals = -hypercube_gradient(games)  # (N, d, d, 2^(d-1))
    gradient = hypercube_gradient(values)  # (N, d, 2^(d-1))
    index = torch.arange(d, device=values.device)
    residuals[:, index, index] += gradient
    return residuals


def single_residual_norm(values: Tensor, player: int) -> Tensor:
    """``||r_player||`` of a batch of games: ``(R, 2^m)`` -> ``(R,)``.

    The same Parseval sum as :func:`residual_norms`, for one player only
    (local residuals need one player per neighbourhood game).
    """
    rows, count = values.shape
    energy = _residual_energy(values)
    with_player = energy.view(rows, count >> (player + 1), 2, 1 << player)[:, :, 1, :]
    return with_player.sum(dim=(1, 2)).clamp(min=0).sqrt()
