"""Derivatives of a coalition game's explained output, run through the model and counted.

The methods that use derivatives (SHEAR's cross-contributions, the Taylor
control variate of permutation sampling) get them here, so that the plans
stay pure tensor maths and one function charges their cost to
``game.evaluations`` (``_charge``), in forward equivalents:
:data:`GRADIENT_COST` per gradient row and :data:`HVP_COST` per
Hessian-vector product row.

Two layers:

* functions of a game (:func:`cross_contributions`, :func:`taylor_expansion`)
  check the inputs and the model, compute, and count;
* functions of a differentiable per-example scalar function
  ``value_fn(*inputs) -> (N,)`` (:func:`hessian_feature_matrix`,
  :func:`hessian_cross_contributions`, :func:`gradient_cross_contributions`,
  :func:`taylor_terms`) compute only: they count nothing, having no game.

With ``H`` the Hessian of the explained output at a point and ``delta_i``
the input difference ``x - baseline`` restricted to the elements of feature
``i``, SHEAR's cross-contribution (Wang et al., ICML 2023) is::

    eta_ij = | delta_i^T (H + H^T) delta_j |

(docs/definitions.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .chunk_runner import is_out_of_memory
from .coalition_game import CoalitionGame
from .features import feature_sums

ValueFn = Callable[..., Tensor]

#: Forward equivalents of one Hessian-vector product row and of one gradient
#: row. An HVP here is reverse over reverse (:func:`hessian_feature_matrix`):
#: a forward pass, a backward pass that keeps its graph, and a second backward
#: through both. Measured on the benchmark's MLPs and CNN
#: (``benchmarks/estimators.py``, column "derivatives / forward"), one HVP row
#: costs 2-4 forward rows on CPU; the count keeps the upper end.
HVP_COST = 4
GRADIENT_COST = 3

#: Cross-contribution kinds: second derivatives, first-derivative
#: differences, or the first with a fallback to the second where it vanishes.
CROSS_CONTRIBUTIONS: tuple[str, ...] = ("auto", "hessian", "gradient")

#: Elements (directions x examples x input elements) held by one chunk of
#: stacked copies of the batch: bounds the memory of the copies, their
#: tangents and the model's activations in one double backward.
ELEMENTS_PER_CHUNK = 2**22
#: ... and on an accelerator, where calls of a few rows leave it idle: at
#: 2^22, 16 resnet18 images at 224 x 224 went one direction per call and SHEAR's
#: derivatives ran at a fifth of the bare forward's rows per second (H200).
#: Out of memory halves a chunk; finished chunks are kept.
ACCELERATOR_ELEMENTS_PER_CHUNK = 2**25


@dataclass(frozen=True)
class TaylorTerms:
    """A second-order expansion of the game in its features at ``b + t (x - b)``.

    Attributes:
        value: ``(N,)`` the explained output at the point.
        gradient: ``(N, d)`` ``g_i = delta_i . grad``.
        hessian: ``(N, d, d)`` ``H_ij = delta_i^T H delta_j`` (not symmetrised).
    """

    value: Tensor
    gradient: Tensor
    hessian: Tensor


# ------------------------------------------------------------ costs and checks


def cross_contribution_cost(kind: str, d: int) -> int:
    """Forward equivalents of :func:`cross_contributions`, at most (``"auto"``: both forms).

    The leading 1 is the forward that checks the output is differentiable.
    """
    return (
        1
        + {
            "hessian": HVP_COST * d,
            "gradient": GRADIENT_COST * (d + 1),
            # the probe, the d products, and the fallback where they all vanish
            "auto": HVP_COST * (d + 1) + GRADIENT_COST * (d + 1),
        }[kind]
    )


def taylor_cost(num_features: int) -> int:
    """Forward equivalents of :func:`taylor_expansion`: a checking forward, a gradient,
    ``d`` HVPs."""
    return 1 + GRADIENT_COST + HVP_COST * num_features


def check_floating(game: CoalitionGame, who: str = "Shear") -> None:
    """Refuse integer inputs (token ids): they have no gradients. No model call."""
    integer = [i for i, t in enumerate(game.inputs) if not t.is_floating_point()]
    if integer:
        raise TypeError(
            f"{who} needs gradients, but inputs[{integer[0]}] has dtype "
            f"{game.inputs[integer[0]].dtype} (token ids?). Explain the embeddings "
            "(floating inputs) instead, or use ShapleySampling (without control_variate), "
            "ExactShapley or LShapley, which need no gradients."
        )


def derivative_setup(game: CoalitionGame, who: str = "Shear") -> tuple[ValueFn, tuple[Tensor, ...]]:
    """The value function, checked differentiable (one counted forward), and the
    baselines expanded to the inputs: what derivatives at the game's points need."""
    game.resolve_target()
    value_fn = game.value_function()
    baselines = tuple(
        background[0].expand_as(x) for background, x in zip(game.backgrounds, game.inputs)
    )
    _check_differentiable(game, value_fn, who)
    return value_fn, baselines


def _check_differentiable(game: CoalitionGame, value_fn: ValueFn, who: str) -> None:
    """One gradient-tracked forward: the explained output must depend on the inputs.

    A detached or integer output has no derivatives; without this check the
    Hessian form would read as zero and the gradient form fail deep in autograd.
    """
    rows = tuple(x.detach().clone().requires_grad_(True) for x in game.inputs)
    with torch.enable_grad():
        output = value_fn(*rows)
    _charge(game, 1)
    if not output.requires_grad:
        raise TypeError(
            f"{who} needs a differentiable model, but the explained output does not depend on "
            "the inputs through autograd (detached, integer-valued, or computed under "
            "torch.no_grad()). Use ShapleySampling (without control_variate) or "
            "PairedKernelShap, which need no gradients, or return the output without "
            "detaching it."
        )


def _charge(game: CoalitionGame, forward_equivalents: int) -> None:
    """The one place derivatives are counted: per example, in forward equivalents."""
    game.evaluations += forward_equivalents


# ------------------------------------------------------------ functions of a game


def cross_contributions(game: CoalitionGame, kind: str, who: str = "Shear") -> Tensor:
    """``(N, d, d)`` cross-contributions ``eta`` of the game at its inputs, counted.

    ``kind``: ``"hessian"`` (:func:`hessian_cross_contributions`, ``d`` HVPs),
    ``"gradient"`` (:func:`gradient_cross_contributions`, ``d + 1``
    gradients), or ``"auto"``: one product first (:func:`hessian_vanishes`),
    the gradient form alone where it vanishes for every example; otherwise
    the Hessian form, and the gradient form for the examples where that
    vanishes (:func:`vanishing`). A warning says when the gradient form served.
    Warnings name the caller's caller (a method's ``cross_contributions`` or
    ``explain``).
    """
    check_floating(game, who)
    value_fn, baselines = derivative_setup(game, who)
    masks = game.features.masks
    d = game.num_features

    def gradient_form() -> Tensor:
        _charge(game, GRADIENT_COST * (d + 1))
        return gradient_cross_contributions(value_fn, game.inputs, baselines, masks, d)

    if kind == "gradient":
        return gradient_form()
    deltas = tuple(x - b for x, b in zip(game.inputs, baselines))
    try:
        if kind == "auto":
            # one product first: on a piecewise-linear model (a ReLU network) it
            # is 0 and the d products the Hessian form needs would all be 0 too
            _charge(game, HVP_COST)
            if bool(hessian_vanishes(value_fn, game.inputs, deltas, masks, d).all()):
                warnings.warn(
                    f"the Hessian cross-contributions are all zero for {game.batch_size} of "
                    f"{game.batch_size} examples (a piecewise-linear model such as a ReLU "
                    "network, or a model without interactions); their cooperators come from "
                    "gradient differences (cross_contribution='gradient', d + 1 gradient "
                    "rows per example).",
                    stacklevel=3,
                )
                return gradient_form()
        eta = hessian_cross_contributions(value_fn, game.inputs, deltas, masks, d)
    except RuntimeError as error:
        # a layer without a second derivative (torch's fused attention kernels on the
        # CPU, say): the Hessian form cannot be had at all
        if "not implemented" not in str(error) or kind == "hessian":
            raise
        warnings.warn(
            f"the model has no second derivative ({str(error).splitlines()[0]}): the "
            "cooperators come from gradient differences (cross_contribution='gradient', "
            "d + 1 gradient rows per example).",
            stacklevel=3,
        )
        return gradient_form()
    _charge(game, HVP_COST * d)
    flat = vanishing(eta)
    if not bool(flat.any()):
        return eta
    if kind == "hessian":
        warnings.warn(
            f"the Hessian cross-contributions are all zero for {int(flat.sum())} of "
            f"{game.batch_size} examples (a piecewise-linear model such as a ReLU network?): "
            "their cooperators are arbitrary. Use cross_contribution='gradient' or 'auto'.",
            stacklevel=3,
        )
        return eta
    warnings.warn(
        f"the Hessian cross-contributions are all zero for {int(flat.sum())} of "
        f"{game.batch_size} examples (a piecewise-linear model such as a ReLU network, or a "
        "model without interactions); their cooperators come from gradient differences "
        "(cross_contribution='gradient', d + 1 gradient rows per example).",
        stacklevel=3,
    )
    # Whole-batch gradients keep the value function's batch layout; in the
    # usual case (a ReLU network) every example needs them anyway.
    return torch.where(flat[:, None, None], gradient_form().to(eta.dtype), eta)


def taylor_expansion(game: CoalitionGame, point: float, who: str) -> TaylorTerms:
    """The game's second-order expansion at ``b + point (x - b)`` (:func:`taylor_terms`).

    Counts :func:`taylor_cost` in ``game.evaluations``; refuses integer inputs
    before any model call and a model without gradients after one.
    """
    check_floating(game, who)
    value_fn, baselines = derivative_setup(game, who)
    terms = taylor_terms(
        value_fn, game.inputs, baselines, game.features.masks, game.num_features, point
    )
    _charge(game, GRADIENT_COST + HVP_COST * game.num_features)
    return terms


def vanishing(eta: Tensor) -> Tensor:
    """``(N,)`` bool: examples whose off-diagonal cross-contributions are all 0.

    Piecewise-linear models give exactly zero second derivatives under
    autograd, so the test is exact equality, not a tolerance.
    """
    off_diagonal = eta.clone()
    off_diagonal.diagonal(dim1=1, dim2=2).zero_()
    return off_diagonal.flatten(1).eq(0).all(dim=1)


# ------------------------------------------------------------ functions of value_fn


def taylor_terms(
    value_fn: ValueFn,
    inputs: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    num_features: int,
    point: float = 0.5,
) -> TaylorTerms:
    """Value, feature gradient and feature Hessian of ``value_fn`` at ``b + point (x - b)``.

    One gradient and ``d`` Hessian-vector products per batch
    (:func:`hessian_feature_matrix`): no dense Hessian of the inputs, only
    the ``d x d`` feature matrix. All three in the output's dtype, detached.
    """
    deltas = tuple(x - b for x, b in zip(inputs, baselines))
    anchor = tuple((b + point * delta).detach() for b, delta in zip(baselines, deltas))
    rows = tuple(a.clone().requires_grad_(True) for a in anchor)
    with torch.enable_grad():
        out = value_fn(*rows)
        grads = torch.autograd.grad(out.sum(), rows, allow_unused=True)
    grads = tuple(torch.zeros_like(r) if g is None else g for g, r in zip(grads, rows))
    gradient = feature_sums(
        tuple(g * delta for g, delta in zip(grads, deltas)), masks, num_features
    ).detach()
    hessian = hessian_feature_matrix(value_fn, anchor, deltas, masks, num_features)
    dtype = out.dtype
    return TaylorTerms(out.detach().to(dtype), gradient.to(dtype), hessian.to(dtype))


def hessian_vanishes(
    value_fn: ValueFn,
    inputs: tuple[Tensor, ...],
    deltas: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    num_features: int,
) -> Tensor:
    """``(N,)`` bool: where ``S r = 0``, ``S`` :func:`hessian_feature_matrix`'s result
    and ``r`` fixed Gaussian weights of the features: one Hessian-vector product
    (along ``sum_j r_j delta_j``) instead of ``d``.

    ``S r = 0`` for every ``S`` that is 0, and, for random ``r``, for no other
    ``S`` but with probability zero; piecewise-linear models give an exact 0
    under autograd, so the test is exact equality.
    """
    weights = torch.randn(
        num_features, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    ).to(inputs[0].device, non_blocking=True)
    rows = tuple(x.detach().clone().requires_grad_(True) for x in inputs)
    tangents = tuple(delta * weights[mask].to(delta.dtype) for delta, mask in zip(deltas, masks))
    products = tuple(
        torch.zeros_like(r) if h is None else h * delta
        for h, r, delta in zip(_hessian_products(value_fn, rows, tangents), rows, deltas)
    )
    return feature_sums(products, masks, num_features).eq(0).all(dim=1)


def _hessian_products(
    value_fn: ValueFn, rows: tuple[Tensor, ...], tangents: tuple[Tensor, ...]
) -> tuple[Tensor | None, ...]:
    """``H^T t`` at ``rows`` (leaves that require grad), detached, per input: the
    gradient of ``grad f . t`` (reverse over reverse). None where an input has no
    second derivative (a constant gradient: a linear model)."""
    with torch.enable_grad():
        grads = torch.autograd.grad(
            value_fn(*rows).sum(), rows, create_graph=True, allow_unused=True
        )
        directional = sum(
            ((g * t).sum() for g, t in zip(grads, tangents) if g is not None),
            rows[0].new_zeros(()),
        )
        if not directional.requires_grad:
            return (None,) * len(rows)
        products = torch.autograd.grad(directional, rows, allow_unused=True)
    return tuple(None if h is None else h.detach() for h in products)


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
    chunk = max(1, _elements_per_chunk(inputs[0].device) // max(1, elements))

    def directions(ids: Tensor) -> Tensor:
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
        hvp = _hessian_products(value_fn, rows, tangents)  # H^T delta_j
        products = tuple(
            (torch.zeros_like(r) if h is None else h).view(copies, *x.shape) * delta.unsqueeze(0)
            for h, r, x, delta in zip(hvp, rows, inputs, deltas)
        )
        return feature_sums(  # (copies, N, i): delta_i^T H^T delta_j = s[n, j, i]
            tuple(p.reshape(copies * batch, *p.shape[2:]) for p in products),
            tuple(_repeat_mask(m, copies, batch) for m in masks),
            num_features,
        ).view(copies, batch, num_features)

    features = torch.arange(num_features, device=inputs[0].device)
    per_direction = in_chunks(features, chunk, directions)
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
    chunk = max(1, _elements_per_chunk(inputs[0].device) // max(1, elements))
    # position 0 is the input itself, position 1 + j the input without j
    variants = torch.arange(-1, num_features, device=inputs[0].device)

    def variant_gradients(ids: Tensor) -> Tensor:
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
        return (
            feature_sums(  # (variants, N, i)
                tuple(p.reshape(p.shape[0] * p.shape[1], *p.shape[2:]) for p in products),
                tuple(_repeat_mask(m, ids.numel(), batch) for m in masks),
                num_features,
            )
            .view(ids.numel(), batch, num_features)
            .detach()
        )

    # (1 + d, N, i): delta_i^T grad at each variant
    sums = torch.cat(in_chunks(variants, chunk, variant_gradients))
    c = (sums[:1] - sums[1:]).permute(1, 2, 0)  # (N, i, j)
    return (c + c.transpose(1, 2)).abs()


def in_chunks(ids: Tensor, chunk: int, step: Callable[[Tensor], Tensor]) -> list[Tensor]:
    """``step`` of consecutive slices of ``ids``, at most ``chunk`` long: out of memory
    halves the slice and retries it, keeping the finished ones."""
    parts: list[Tensor] = []
    start = 0
    while start < ids.numel():
        part = ids[start : start + chunk]
        try:
            parts.append(step(part))
        except (RuntimeError, torch.OutOfMemoryError) as error:
            if chunk == 1 or not is_out_of_memory(error):
                raise
            chunk = max(1, chunk // 2)
            if part.is_cuda:
                torch.cuda.empty_cache()
            continue
        start += part.numel()
    return parts


def _elements_per_chunk(device: torch.device) -> int:
    return ELEMENTS_PER_CHUNK if device.type == "cpu" else ACCELERATOR_ELEMENTS_PER_CHUNK


def _repeat_mask(mask: Tensor, times: int, batch: int) -> Tensor:
    """A mask for ``times`` stacked copies of the batch (rows variant-major)."""
    expanded = mask.expand(batch, *mask.shape[1:]) if mask.shape[0] == 1 else mask
    return expanded.repeat(times, *([1] * (mask.dim() - 1)))
