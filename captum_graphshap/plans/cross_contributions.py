"""Cross-contributions between features and SHEAR's cooperator choice.

SHEAR (Wang et al., ICML 2023) gives each feature ``i`` the few features it
interacts with most, its *contributive cooperators*, ranked by the
second-order cross-contribution at the input ``x``::

    eta_ij = | delta_i^T (H + H^T) delta_j |

with ``H`` the Hessian of the explained scalar output with respect to the
input and ``delta_i`` the input difference ``x - baseline`` restricted to the
elements of feature ``i`` (docs/definitions.md).

Everything here is a pure function of a differentiable per-example scalar
function ``value_fn(*inputs) -> (N,)``; the adapter (``attr/shear.py``)
builds it from the model, the target and the value kind.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..engine.features import feature_sums

ValueFn = Callable[..., Tensor]

#: Cross-contribution kinds: second derivatives, first-derivative
#: differences, or the first with a fallback to the second where it vanishes.
CROSS_CONTRIBUTIONS: tuple[str, ...] = ("auto", "hessian", "gradient")

#: Elements (features x examples x input elements) held by one vmapped chunk
#: of Hessian-vector products: bounds the memory of the tangents and of the
#: model's activations under ``vmap``.
ELEMENTS_PER_CHUNK = 2**22


def hessian_cross_contributions(
    value_fn: ValueFn,
    inputs: tuple[Tensor, ...],
    deltas: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    num_features: int,
) -> Tensor:
    """``(N, d, d)`` tensor of ``eta_ij = |delta_i^T (H + H^T) delta_j|`` at ``inputs``.

    The absolute symmetrised :func:`hessian_feature_matrix`.
    """
    s = hessian_feature_matrix(value_fn, inputs, deltas, masks, num_features)
    return (s + s.transpose(1, 2)).abs()


def hessian_feature_matrix(
    value_fn: ValueFn,
    inputs: tuple[Tensor, ...],
    deltas: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    num_features: int,
) -> Tensor:
    """``(N, d, d)`` ``s[n, i, j] = delta_i^T H delta_j``, ``H`` the Hessian at ``inputs``.

    One Hessian-vector product per feature ``j`` (reverse over reverse: the
    gradient of ``grad f . delta_j``), with a chunk of directions stacked
    along the batch: each example's output depends on its own row only, so
    the Hessian of the sum over ``c`` stacked copies of the batch is block
    diagonal and one double backward gives every copy's product. No dense
    Hessian of the inputs is ever formed: O(d) products, a ``d x d`` result.
    Plain ``torch.autograd`` on purpose: the first ``torch.func.jvp`` of a
    process spends seconds scripting decompositions with the deprecated
    ``torch.jit.script`` (and warns), and the first ``torch.func`` transform
    imports ``torch._dynamo``.
    """
    batch = inputs[0].shape[0]
    elements = sum(t.numel() for t in inputs)
    chunk = max(1, ELEMENTS_PER_CHUNK // max(1, elements))
    features = torch.arange(num_features, device=inputs[0].device)
    per_direction: list[Tensor] = []
    for start in range(0, num_features, chunk):
        ids = features[start : start + chunk]
        copies = ids.numel()
        rows = tuple(
            x.detach()
            .unsqueeze(0)
            .expand(copies, *x.shape)
            .reshape(copies * batch, *x.shape[1:])
            .requires_grad_(True)
            for x in inputs
        )
        # delta_j: delta restricted to feature j, one direction per stacked copy
        tangents = tuple(
            (delta.unsqueeze(0) * (mask.unsqueeze(0) == ids.view(-1, *([1] * mask.dim()))))
            .to(delta.dtype)
            .reshape(copies * batch, *delta.shape[1:])
            for delta, mask in zip(deltas, masks)
        )
        with torch.enable_grad():
            grads = torch.autograd.grad(
                value_fn(*rows).sum(), rows, create_graph=True, allow_unused=True
            )
            directional = sum(
                ((g * t).sum() for g, t in zip(grads, tangents) if g is not None),
                rows[0].new_zeros(()),
            )
            hvp = (  # H^T delta_j
                torch.autograd.grad(directional, rows, allow_unused=True)
                if directional.requires_grad
                else (None,) * len(rows)
            )
        products = tuple(
            (torch.zeros_like(r) if h is None else h.detach()).view(copies, *x.shape)
            * delta.unsqueeze(0)
            for h, r, x, delta in zip(hvp, rows, inputs, deltas)
        )
        per_direction.append(
            feature_sums(  # (copies, N, i): delta_i^T H^T delta_j = s[n, j, i]
                tuple(p.reshape(copies * batch, *p.shape[2:]) for p in products),
                tuple(_repeat_mask(m, copies, batch) for m in masks),
                num_features,
            ).view(copies, batch, num_features)
        )
    return torch.cat(per_direction).permute(1, 0, 2)  # (N, i, j) = (N, j, i) transposed


def gradient_cross_contributions(
    value_fn: ValueFn,
    inputs: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    num_features: int,
) -> Tensor:
    """``(N, d, d)`` cross-contributions from gradient differences.

    For models whose Hessian vanishes almost everywhere (ReLU, max-pooling:
    piecewise linear), the change of feature ``i``'s gradient when feature
    ``j`` is set to its baseline replaces ``H delta_j``::

        c_ij = delta_i^T (grad f(x) - grad f(x with j at its baseline))
        eta_ij = |c_ij + c_ji|

    a finite difference of the Hessian form above (equal to it for quadratic
    models). Costs ``d + 1`` gradient rows per example, batched in chunks.
    """
    batch = inputs[0].shape[0]
    deltas = tuple(x - b for x, b in zip(inputs, baselines))
    elements = sum(t[0].numel() for t in inputs) * batch
    chunk = max(1, ELEMENTS_PER_CHUNK // max(1, elements))
    # position 0 is the input itself, position 1 + j the input without j
    variants = torch.arange(-1, num_features, device=inputs[0].device)
    gradients: list[Tensor] = []
    for start in range(0, variants.numel(), chunk):
        ids = variants[start : start + chunk]
        rows = []
        for x, base, mask in zip(inputs, baselines, masks):
            drop = mask.unsqueeze(0) == ids.view(-1, *([1] * mask.dim()))
            rows.append(
                torch.where(drop, base.unsqueeze(0), x.unsqueeze(0))
                .reshape(ids.numel() * x.shape[0], *x.shape[1:])
                .detach()
                .requires_grad_(True)
            )
        with torch.enable_grad():
            grads = torch.autograd.grad(value_fn(*rows).sum(), rows, allow_unused=True)
        products = tuple(
            (torch.zeros_like(r) if g is None else g).view(ids.numel(), *x.shape)
            * delta.unsqueeze(0)
            for g, r, x, delta in zip(grads, rows, inputs, deltas)
        )
        gradients.append(
            feature_sums(  # (variants, N, i)
                tuple(p.reshape(p.shape[0] * p.shape[1], *p.shape[2:]) for p in products),
                tuple(_repeat_mask(m, ids.numel(), batch) for m in masks),
                num_features,
            )
            .view(ids.numel(), batch, num_features)
            .detach()
        )
    sums = torch.cat(gradients)  # (1 + d, N, i): delta_i^T grad at each variant
    c = (sums[:1] - sums[1:]).permute(1, 2, 0)  # (N, i, j)
    return (c + c.transpose(1, 2)).abs()


def _repeat_mask(mask: Tensor, times: int, batch: int) -> Tensor:
    """A mask for ``times`` stacked copies of the batch (rows variant-major)."""
    expanded = mask.expand(batch, *mask.shape[1:]) if mask.shape[0] == 1 else mask
    return expanded.repeat(times, *([1] * (mask.dim() - 1)))


def vanishing(eta: Tensor) -> Tensor:
    """``(N,)`` bool: examples whose off-diagonal cross-contributions are all 0.

    Piecewise-linear models give exactly zero second derivatives under
    autograd, so the test is exact equality, not a tolerance.
    """
    off_diagonal = eta.clone()
    off_diagonal.diagonal(dim1=1, dim2=2).zero_()
    return off_diagonal.flatten(1).eq(0).all(dim=1)


def select_cooperators(eta: Tensor, count: int) -> Tensor:
    """``(N, d, count)`` long: for each feature, the ``count`` others with largest ``eta``.

    A feature is never its own cooperator. Ties go to the lower index (a
    stable sort), so the choice is deterministic.
    """
    scores = eta.clone()
    scores.diagonal(dim1=1, dim2=2).fill_(-torch.inf)
    order = torch.sort(scores, dim=2, descending=True, stable=True).indices
    return order[..., :count]
