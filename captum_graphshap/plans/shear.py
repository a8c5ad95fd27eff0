"""SHEAR's Eq. (14): an exact Shapley sum over a feature's cooperators.

For each feature, every subset of its cooperators with the other features
present at random (each with probability 1/2), antithetically paired; the
estimator weights the marginal contributions by ``1 / ((m + 1) C(m, |S|))``.
Pure tensor maths; ``attr/shear.py`` adapts it to Captum.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .draws import uniform


def subset_bits(count: int, device: torch.device) -> Tensor:
    """``(2^count, count)`` bool: row ``s`` is the bit pattern of ``s``."""
    codes = torch.arange(2**count, device=device)
    return (codes[:, None] >> torch.arange(count, device=device)) & 1 == 1


def shear_coalitions(
    cooperators: Tensor,
    antithetic: bool,
    generator: torch.Generator | None,
) -> Tensor:
    """SHEAR's plan: ``(N, d, 2^m, 2, d)`` bool, coalitions without and with each feature.

    For example ``n``, feature ``i`` with cooperators ``S_i`` (``m`` of them,
    ``cooperators[n, i]``) and every subset ``S`` of ``S_i``: the coalition
    ``S | V_S`` and ``S | V_S | {i}``, where ``V_S`` holds each other feature
    with probability 1/2. With ``antithetic`` the complementary subset
    ``S_i - S`` gets the complementary set of the other features.
    """
    _, d, m = cooperators.shape
    device = cooperators.device
    bits = subset_bits(m, device).to(torch.float64)  # (2^m, m)
    chosen = torch.nn.functional.one_hot(cooperators, d).to(torch.float64)  # (N, d, m, d)
    subsets = torch.einsum("sb,nibk->nisk", bits, chosen) > 0  # (N, d, 2^m, d)
    identity = torch.eye(d, dtype=torch.bool, device=device)
    others = ~(chosen.sum(dim=2) > 0) & ~identity  # (N, d, d): neither i nor a cooperator
    count = 2**m
    # one draw shared by the batch (each example's cooperators differ), so an
    # example's explanation does not depend on the others in its batch
    if antithetic and m > 0:
        # subset s and its complement 2^m - 1 - s share one draw, complemented
        half = uniform((1, d, count // 2, d), generator, device) < 0.5
        present = torch.cat([half, (~half).flip(2)], dim=2)
    else:
        present = uniform((1, d, count, d), generator, device) < 0.5
    without = subsets | (present & others[:, :, None, :])
    with_feature = without | identity[None, :, None, :]
    return torch.stack([without, with_feature], dim=3)


def shear_plan(cooperators: Tensor, antithetic: bool, generator: torch.Generator | None) -> Plan:
    """SHEAR's plan (:func:`shear_coalitions`), per example, with Eq. (14) as estimator."""
    coalitions = shear_coalitions(cooperators, antithetic, generator)
    batch, d = coalitions.shape[:2]
    example_index = torch.arange(batch, device=coalitions.device).repeat_interleave(
        coalitions[0].numel() // d
    )

    def estimate(values: Tensor) -> Tensor:
        return shear_estimates(values.view(*coalitions.shape[:-1]))

    return Plan(DenseCoalitions(coalitions.reshape(-1, d)), estimate, example_index)


def shear_weights(num_cooperators: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``(2^m,)`` Eq. (14) weights ``1 / ((m + 1) C(m, |S|))`` of the subsets."""
    m = num_cooperators
    sizes = subset_bits(m, device).sum(dim=1).tolist()
    return torch.tensor(
        [1.0 / ((m + 1) * math.comb(m, size)) for size in sizes], dtype=dtype, device=device
    )


def shear_estimates(values: Tensor) -> Tensor:
    """Eq. (14): ``(N, d)`` from the plan's values ``(N, d, 2^m, 2)``."""
    m = int(math.log2(values.shape[2]))
    weights = shear_weights(m, values.device, values.dtype)
    return ((values[..., 1] - values[..., 0]) * weights).sum(dim=2)
