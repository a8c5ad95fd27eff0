"""Exact Shapley values by enumerating every coalition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import prepare_game
from ..plans.exact import all_coalitions
from ..plans.linear import shapley_from_all_coalitions
from ._common import pack_attributions


class ExactShapley(PerturbationAttribution):
    r"""Exact Shapley values from all :math:`2^d` coalitions.

    .. math::
        \phi_i = \sum_{S \subseteq D \setminus i} \frac{|S|!\,(d-|S|-1)!}{d!}
        \big(v(S \cup i) - v(S)\big)

    A drop-in replacement for :class:`captum.attr.ShapleyValues` (same
    arguments, same output) that evaluates each of the :math:`2^d` coalitions
    once, batched, instead of walking :math:`d!` orderings: it is the ground
    truth the approximate methods of this package are tested against.
    Refuses more than 20 features (:math:`2^{20}` coalitions) before any
    model call; group features with ``feature_mask``.
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
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
    ) -> Tensor | tuple[Tensor, ...]:
        """Exact Shapley values of each feature, in the inputs' shapes.

        Args:
            inputs: a tensor or a tuple of tensors, batch first; float, or
                integer token ids.
            baselines: reference values of absent features, as in Captum:
                None (zero), a number, a tensor with batch size 1 or N, or a
                tuple of these. For token ids, an integer id (pad or mask).
            target: output index per example, as in Captum: an int, a tuple,
                a tensor or a list.
            additional_forward_args: further arguments of ``forward_func``;
                tensors with batch size N are expanded per perturbation.
            feature_mask: integer ids grouping elements into features, as in
                Captum; batch size 1 (shared) or N (per example). Default:
                one feature per element.
            perturbations_per_eval: coalitions per forward call, each call
                holding ``perturbations_per_eval * N`` rows (Captum's
                meaning). None picks a size from the input size.
            show_progress: show a tqdm progress bar.
            references: a background set ``(B, ...)`` replacing ``baselines``;
                a coalition's value is the mean output over the references.
            value: ``"output"`` (the model output at ``target``) or
                ``"log_prob"`` (its log-softmax; without a target, of the class
                predicted on the full input).

        Returns:
            Attributions with the shape, dtype and type (tensor or tuple) of
            ``inputs``; integer inputs get the default float dtype. Elements of
            one feature share its value.
        """
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
        coalitions = all_coalitions(game.num_features, game.device)
        values = game.evaluate(
            coalitions, distinct=True, show_progress=show_progress, desc="ExactShapley"
        )
        return pack_attributions(game, shapley_from_all_coalitions(values), is_tuple)
