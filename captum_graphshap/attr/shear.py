"""SHEAR: Shapley values over each feature's contributive cooperators."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from captum.attr import Attribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..plans.cross_contributions import (
    CROSS_CONTRIBUTIONS,
    gradient_cross_contributions,
    hessian_cross_contributions,
    select_cooperators,
    vanishing,
)
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.sampling import shear_coalitions, shear_estimates
from ._common import pack_attributions
from ._options import check_count, check_flag, check_generator


class Shear(Attribution):
    r"""SHEAR (Wang et al., ICML 2023): exact Shapley sums over a few cooperators.

    For each feature :math:`i`, the :math:`m = \log_2(N/2)` features with the
    largest cross-contribution :math:`\eta_{ij} = |\delta_i^\top (H + H^\top)
    \delta_j|` (see :meth:`cross_contributions`) are its cooperators
    :math:`S_i`; the others are present at random, each with probability
    1/2, antithetically paired (Eq. 14):

    .. math::
        \phi_i = \frac{1}{m+1} \sum_{S \subseteq S_i} \binom{m}{|S|}^{-1}
        \big(v(S \cup i \cup V_S) - v(S \cup V_S)\big)

    The estimate is exact whenever the features outside :math:`S_i` do not
    interact with :math:`i`, and for :math:`N \ge 2^d`. It costs :math:`N`
    evaluations per feature plus :math:`d` Hessian-vector products per
    example, needs a differentiable model of floating inputs, and refuses
    more than :math:`2^{20}` coalitions per example.
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: a differentiable model, or any differentiable
                function of the inputs returning one row per example.
        """
        super().__init__(forward_func)

    def cross_contributions(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        *,
        kind: str = "hessian",
        value: str = "output",
    ) -> Tensor:
        """Pairwise cross-contributions ``eta``, a ``(batch, d, d)`` tensor.

        Args:
            inputs, baselines, target, additional_forward_args, feature_mask:
                as in :meth:`attribute`.
            kind: ``"hessian"``: ``eta_ij = |delta_i^T (H + H^T) delta_j|``
                with ``H`` the Hessian of the explained output at the input and
                ``delta_i`` the input difference to the baseline on feature
                ``i``'s elements, from ``d`` batched Hessian-vector products;
                ``"gradient"``: the same form with ``H delta_j`` replaced by the
                change of the gradient when feature ``j`` takes its baseline
                (for piecewise-linear models, whose Hessian is zero);
                ``"auto"``: the Hessian, and the gradient form for examples
                where the Hessian form vanishes (with a warning).
            value: ``"output"`` or ``"log_prob"``, as in :meth:`attribute`.

        Returns:
            ``eta[n, i, j]``, symmetric, in float64 for float64 inputs and the
            inputs' dtype otherwise. The diagonal is not used by SHEAR.
        """
        check_choice(kind, CROSS_CONTRIBUTIONS, "kind")
        game, _ = self._game(
            inputs, baselines, target, additional_forward_args, feature_mask, None, value
        )
        return _cross_contributions(game, kind)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int = 16,
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        generator: torch.Generator | None = None,
        antithetic: bool = True,
        cross_contribution: str = "auto",
        value: str = "output",
    ) -> Tensor | tuple[Tensor, ...]:
        """SHEAR attributions, in the inputs' shapes.

        Args:
            inputs: a floating tensor or tuple of tensors, batch first
                (token ids have no gradient: explain embeddings, or use
                :class:`ShapleySampling`).
            baselines: reference values of absent features, as in Captum.
            target: output index per example, as in Captum.
            additional_forward_args: further arguments of ``forward_func``.
            feature_mask: integer ids grouping elements into features, as in
                Captum; a grouped feature's ``delta_i`` is a vector.
            n_samples: ``N``, model evaluations per feature: a power of two
                >= 4. ``log2(N/2)`` cooperators per feature; ``N >= 2^d``
                is exact Shapley.
            perturbations_per_eval: rows per forward call are at most this
                times the batch size; None sizes calls from the input size.
            show_progress: show a tqdm progress bar over the evaluations.
            generator: ``torch.Generator`` for the random non-cooperators;
                the same seed gives the same attributions.
            antithetic: pair each subset of cooperators with its complement
                and give the pair complementary non-cooperators (the paper's
                antithetical sampling).
            cross_contribution: ``"auto"`` (default), ``"hessian"`` or
                ``"gradient"``; see :meth:`cross_contributions`.
            value: ``"output"`` or ``"log_prob"`` (log-softmax of the target).

        Returns:
            Attributions with the shape, dtype and type of ``inputs``.
        """
        n_samples = _check_budget(n_samples)
        check_flag(antithetic, "antithetic")
        check_choice(cross_contribution, CROSS_CONTRIBUTIONS, "cross_contribution")
        generator = check_generator(generator)
        game, is_tuple = self._game(
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            value,
        )
        d = game.num_features
        count = min(int(math.log2(n_samples)) - 1, d - 1)
        check_plan_size(
            d * 2 ** (count + 1),
            MAX_COALITIONS,
            "Shear",
            "lower n_samples or group features with feature_mask",
        )
        cooperators = self._cooperators(game, count, cross_contribution)
        coalitions = shear_coalitions(cooperators, antithetic, generator)
        rows_per_example = coalitions[0].numel() // d
        example_index = torch.arange(game.batch_size, device=game.device).repeat_interleave(
            rows_per_example
        )
        values = game.evaluate_rows(
            example_index,
            coalitions.reshape(-1, d),
            show_progress=show_progress,
            desc="Shear",
        ).view(*coalitions.shape[:-1])
        return pack_attributions(game, shear_estimates(values), is_tuple)

    # ------------------------------------------------------------ internals

    def _game(
        self,
        inputs: Any,
        baselines: Any,
        target: Any,
        additional_forward_args: Any,
        feature_mask: Any,
        perturbations_per_eval: int | None,
        value: str,
    ) -> tuple[CoalitionGame, bool]:
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            value=value,
        )
        integer = [i for i, t in enumerate(game.inputs) if not t.is_floating_point()]
        if integer:
            raise TypeError(
                f"Shear needs gradients, but inputs[{integer[0]}] has dtype "
                f"{game.inputs[integer[0]].dtype} (token ids?). Explain the embeddings "
                "(floating inputs) instead, or use ShapleySampling, ExactShapley or LShapley, "
                "which need no gradients."
            )
        return game, is_tuple

    def _cooperators(self, game: CoalitionGame, count: int, kind: str) -> Tensor:
        d = game.num_features
        if count >= d - 1:
            # every other feature cooperates: Eq. (14) is exact Shapley, no eta needed
            others = torch.arange(d, device=game.device).expand(d, d)
            keep = ~torch.eye(d, dtype=torch.bool, device=game.device)
            return others[keep].view(d, d - 1).expand(game.batch_size, d, d - 1)
        return select_cooperators(_cross_contributions(game, kind), count)


def _check_budget(n_samples: Any) -> int:
    n = check_count(n_samples, "n_samples", 4, "SHEAR needs at least one cooperator (N = 4).")
    if n & (n - 1):
        lower = 1 << (n.bit_length() - 1)
        raise ValueError(
            f"n_samples must be a power of two (evaluations per feature = 2^(cooperators + 1)), "
            f"got {n}; use {lower} or {lower * 2}."
        )
    return n


def _cross_contributions(game: CoalitionGame, kind: str) -> Tensor:
    game.resolve_target()
    value_fn = game.value_function()
    baselines = tuple(
        background[0].expand_as(x) for background, x in zip(game.backgrounds, game.inputs)
    )
    masks = game.features.masks
    d = game.num_features
    if kind == "gradient":
        return gradient_cross_contributions(value_fn, game.inputs, baselines, masks, d)
    deltas = tuple(x - b for x, b in zip(game.inputs, baselines))
    eta = hessian_cross_contributions(value_fn, game.inputs, deltas, masks, d)
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
    fallback = gradient_cross_contributions(value_fn, game.inputs, baselines, masks, d)
    return torch.where(flat[:, None, None], fallback.to(eta.dtype), eta)
