"""L-Shapley: Shapley values within each feature's graph neighbourhood."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..graphs import FeatureGraph
from ..plans.l_c_shapley import l_shapley_plan
from ._common import attribute_on_graphs, check_order


class LShapley(PerturbationAttribution):
    r"""L-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 5).

    Each feature's exact Shapley value in the game restricted to its
    neighbourhood :math:`N_k(i)` (graph distance at most ``k``):

    .. math::
        \hat\phi_i = \frac{1}{|N_k(i)|} \sum_{i \in T \subseteq N_k(i)}
        \binom{|N_k(i)| - 1}{|T| - 1}^{-1} \big(v(T) - v(T \setminus i)\big)

    It is exact when features interact only within distance ``k``, and costs
    a number of model rows linear in ``d``: at most :math:`2^{2k} d` distinct
    coalitions on a line, shared across features and deduplicated. Refuses
    plans above :math:`2^{20}` coalitions per example, giving the count.
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        super().__init__(forward_func)

    @overload
    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = ...,
        target: TargetType = ...,
        additional_forward_args: Any = ...,
        feature_mask: Tensor | tuple[Tensor, ...] | None = ...,
        perturbations_per_eval: int | None = ...,
        show_progress: bool = ...,
        *,
        graph: FeatureGraph | Sequence[FeatureGraph] | None = ...,
        k: int = ...,
        context: str = ...,
        references: Tensor | tuple[Tensor, ...] | None = ...,
        value: str = ...,
        return_uncertainty: Literal[False] = ...,
        confidence: float = ...,
    ) -> Tensor | tuple[Tensor, ...]: ...

    @overload
    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = ...,
        target: TargetType = ...,
        additional_forward_args: Any = ...,
        feature_mask: Tensor | tuple[Tensor, ...] | None = ...,
        perturbations_per_eval: int | None = ...,
        show_progress: bool = ...,
        *,
        graph: FeatureGraph | Sequence[FeatureGraph] | None = ...,
        k: int = ...,
        context: str = ...,
        references: Tensor | tuple[Tensor, ...] | None = ...,
        value: str = ...,
        return_uncertainty: Literal[True],
        confidence: float = ...,
    ) -> tuple[Tensor | tuple[Tensor, ...], Tensor | tuple[Tensor, ...]]: ...

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
        graph: FeatureGraph | Sequence[FeatureGraph] | None = None,
        k: int = 1,
        context: str = "baseline",
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
        return_uncertainty: bool = False,
        confidence: float = 0.95,
    ) -> Tensor | tuple[Tensor, ...] | tuple[Tensor | tuple[Tensor, ...], ...]:
        """L-Shapley values of each feature, in the inputs' shapes.

        Arguments shared with Captum mean what they mean in
        :meth:`~captum_graphshap.ExactShapley.attribute`; ``graph`` (and its
        inference from the input shape or the mask) as in
        :meth:`~captum_graphshap.MyersonValue.attribute`.

        Args:
            k: neighbourhood radius in graph hops.
            context: ``"baseline"`` (the paper: features outside
                :math:`N_k(i)` take the baseline) or ``"input"`` (they keep
                their input values, as in the authors' released code).
            references: a background set ``(B, ...)`` replacing
                ``baselines``; the game is the mean over the references.
            return_uncertainty: also return the half-width of the interval
                over ``references`` (needs ``B >= 2``). The estimator is
                linear in the game, so the attribution is the mean of the
                single-reference attributions; the half-width is
                ``z * SD / sqrt(B)`` over them (Merrick and Taly), which
                covers the sampling of the references, not of coalitions.
            confidence: the level of that interval, in (0, 1).

        Returns:
            Attributions with the shape, dtype and type of ``inputs``; with
            ``return_uncertainty=True`` the pair ``(attributions,
            half_width)``, both in that form.
        """
        k = check_order(k)
        return attribute_on_graphs(
            self.forward_func,
            functools.partial(l_shapley_plan, k=k, context=context),
            "LShapley",
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
            perturbations_per_eval,
            show_progress,
            graph,
            references,
            value,
            return_uncertainty,
            confidence,
        )
