"""Monte Carlo Shapley estimators: permutation sampling and paired KernelSHAP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.sampling import (
    kernel_coalitions,
    kernel_shapley,
    mean_and_half_width,
    pair_antithetic,
    permutation_contributions,
    permutation_ranks,
    prefix_coalitions,
    random_indices,
)
from ..uncertainty.intervals import check_confidence
from ._common import pack_attributions
from ._options import check_count, check_flag, check_generator

INTERVALS: tuple[str, ...] = ("normal", "bootstrap")

Attributions = Tensor | tuple[Tensor, ...]


class ShapleySampling(PerturbationAttribution):
    r"""Shapley values by permutation sampling, with intervals.

    Each sampled ordering of the features adds them one at a time; a
    feature's marginal contribution along it is an unbiased sample of its
    Shapley value, and the estimate is the mean over ``n_samples`` orderings
    (the estimator of :class:`captum.attr.ShapleyValueSampling`, with the
    same arguments). Each example gets its own orderings; their :math:`d + 1`
    prefixes are deduplicated and evaluated in few batched model calls.

    Beyond Captum:

    * ``antithetic=True`` pairs each ordering with its reverse, which cancels
      much of the variance of features whose contribution grows or shrinks
      with the coalition;
    * ``references`` (a background set) samples one reference per ordering
      and averages these single-reference games (Merrick & Taly, "The
      Explanation Game"), the expectation over the background;
    * ``return_uncertainty=True`` returns the half-width of a confidence
      interval, ``z * SSD / sqrt(M)`` over the ``M`` independent samples, or a
      bootstrap percentile interval.
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        super().__init__(forward_func)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int = 25,
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        references: Tensor | tuple[Tensor, ...] | None = None,
        antithetic: bool = False,
        generator: torch.Generator | None = None,
        return_uncertainty: bool = False,
        confidence: float = 0.95,
        interval: str = "normal",
        value: str = "output",
    ) -> Attributions | tuple[Attributions, Attributions]:
        """Sampled Shapley values, and optionally their interval half-widths.

        Args:
            inputs: a tensor or a tuple of tensors, batch first; float, or
                integer token ids.
            baselines: reference values of absent features, as in Captum.
            target: output index per example, as in Captum.
            additional_forward_args: further arguments of ``forward_func``.
            feature_mask: integer ids grouping elements into features, as in
                Captum.
            n_samples: number of orderings (Captum's meaning); each costs
                ``d + 1`` evaluations, fewer after deduplication. Even when
                ``antithetic``.
            perturbations_per_eval: coalitions per forward call, each call
                holding this times the batch size rows; None sizes calls from
                the input size.
            show_progress: show a tqdm progress bar.
            references: a background set ``(B, ...)`` replacing
                ``baselines``: each ordering takes one reference drawn
                uniformly, so the estimate and its interval cover both the
                orderings and the references.
            antithetic: pair each ordering with its reverse.
            generator: ``torch.Generator`` for orderings, references and the
                bootstrap; the same seed gives the same result.
            return_uncertainty: also return interval half-widths.
            confidence: the interval's confidence level, in (0, 1).
            interval: ``"normal"`` (``z * SSD / sqrt(M)``) or ``"bootstrap"``
                (percentile interval of 1000 resampled means, halved).
            value: ``"output"`` or ``"log_prob"``.

        Returns:
            Attributions with the shape, dtype and type of ``inputs``; with
            ``return_uncertainty``, the pair ``(attributions, half_width)``,
            the second in the same form.
        """
        check_flag(antithetic, "antithetic")
        check_flag(return_uncertainty, "return_uncertainty")
        minimum = (4 if antithetic else 2) if return_uncertainty else (2 if antithetic else 1)
        n_samples = check_count(
            n_samples,
            "n_samples",
            minimum,
            "An interval needs at least two independent samples (pairs when antithetic)."
            if return_uncertainty
            else "",
        )
        if antithetic and n_samples % 2:
            raise ValueError(
                f"n_samples must be even with antithetic=True (orderings come with their "
                f"reverses), got {n_samples}; use {n_samples + 1}."
            )
        confidence = check_confidence(confidence)
        check_choice(interval, INTERVALS, "interval")
        generator = check_generator(generator)
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            references=references,
            value=value,
        )
        d = game.num_features
        check_plan_size(
            n_samples * (d + 1),
            MAX_COALITIONS,
            "ShapleySampling",
            "lower n_samples or group features with feature_mask",
        )
        ranks = permutation_ranks(game.batch_size, d, n_samples, antithetic, generator, game.device)
        values = _prefix_values(
            game, ranks, references is not None, antithetic, generator, show_progress
        )
        samples = permutation_contributions(values, ranks)
        if antithetic:
            samples = pair_antithetic(samples)
        if not return_uncertainty:
            return pack_attributions(game, samples.mean(dim=1), is_tuple)
        mean, half_width = mean_and_half_width(samples, confidence, interval, generator)
        return (
            pack_attributions(game, mean, is_tuple),
            pack_attributions(game, half_width, is_tuple),
        )


def _prefix_values(
    game: CoalitionGame,
    ranks: Tensor,
    sampled_references: bool,
    antithetic: bool,
    generator: torch.Generator | None,
    show_progress: bool,
) -> Tensor:
    """``(N, M, d + 1)`` values of every ordering's prefixes.

    With references each ordering's rows use its own reference, drawn
    uniformly (an antithetic pair shares one).
    """
    batch, orderings, d = ranks.shape
    coalitions = prefix_coalitions(ranks).reshape(-1, d)
    reference_index = None
    if sampled_references:
        drawn = orderings // 2 if antithetic else orderings
        reference = random_indices(game.num_references, (batch, drawn), generator, game.device)
        if antithetic:
            reference = torch.cat([reference, reference], dim=1)
        reference_index = reference.repeat_interleave(d + 1, dim=1).reshape(-1)
    values = game.evaluate_rows(
        torch.arange(batch, device=game.device).repeat_interleave(orderings * (d + 1)),
        coalitions,
        reference_index=reference_index,
        show_progress=show_progress,
        desc="ShapleySampling",
    )
    return values.view(batch, orderings, d + 1)


class PairedKernelShap(PerturbationAttribution):
    r"""KernelSHAP with paired sampling and the endpoints enforced.

    Coalitions are drawn from the Shapley kernel (size :math:`s` with
    probability :math:`\propto 1/(s(d-s))`, then a uniform subset), each with
    its complement (Covert & Lee, 2021), and the attributions solve the
    efficiency-constrained least squares in closed form, so
    :math:`\sum_i \phi_i = v(D) - v(\emptyset)` exactly. The draws are shared
    by the batch: one ``d x d`` solve serves every example.
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        super().__init__(forward_func)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        generator: torch.Generator | None = None,
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
    ) -> Attributions:
        """KernelSHAP attributions, in the inputs' shapes.

        Args:
            inputs: a tensor or a tuple of tensors, batch first; float, or
                integer token ids.
            baselines: reference values of absent features, as in Captum.
            target: output index per example, as in Captum.
            additional_forward_args: further arguments of ``forward_func``.
            feature_mask: integer ids grouping elements into features, as in
                Captum.
            n_samples: sampled coalitions besides the empty and full ones, in
                complementary pairs (an odd count is rounded up); at least
                ``2 d``: a pair and its complement pin one direction of the
                fit. None: ``2 d + 2048``, the rule of SHAP's
                ``KernelExplainer``.
            perturbations_per_eval: coalitions per forward call, each call
                holding this times the batch size rows.
            show_progress: show a tqdm progress bar.
            generator: ``torch.Generator`` for the draws (reproducible).
            references: a background set averaged over, replacing
                ``baselines``.
            value: ``"output"`` or ``"log_prob"``.

        Returns:
            Attributions with the shape, dtype and type of ``inputs``.
        """
        generator = check_generator(generator)
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            references=references,
            value=value,
        )
        d = game.num_features
        if n_samples is None:
            n_samples = 2 * d + 2048
        n_samples = check_count(
            n_samples,
            "n_samples",
            2 * d,
            "A complementary pair pins one direction of the fit, so d features need about "
            "d pairs (2 d coalitions).",
        )
        check_plan_size(
            n_samples, MAX_COALITIONS, "PairedKernelShap", "lower n_samples or group features"
        )
        endpoints = torch.stack(
            [
                torch.zeros(d, dtype=torch.bool, device=game.device),
                torch.ones(d, dtype=torch.bool, device=game.device),
            ]
        )
        if d == 1:
            values = game.evaluate(endpoints, distinct=True)
            return pack_attributions(game, values[:, 1:] - values[:, :1], is_tuple)
        sampled = kernel_coalitions(d, n_samples, generator, game.device)
        values = game.evaluate(
            torch.cat([endpoints, sampled]), show_progress=show_progress, desc="PairedKernelShap"
        )
        phi = kernel_shapley(sampled, values[:, 2:], values[:, 0], values[:, 1])
        return pack_attributions(game, phi, is_tuple)
