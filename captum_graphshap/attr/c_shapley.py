"""C-Shapley: marginal contributions to the connected sets around each feature."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..graphs import FeatureGraph
from ..plans.l_c_shapley import C_WEIGHTS, L_CONTEXTS, c_shapley_plan, c_shapley_regression_plan
from ..plans.limits import check_choice
from ._common import attribute_on_graphs, check_order

C_METHODS = ("exact", "regression")


class CShapley(PerturbationAttribution):
    r"""C-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 6).

    Only connected sets of features cooperate: for the connected sets
    :math:`U` within distance ``k`` of feature i that contain it,

    .. math::
        \tilde\phi_i = \sum_{U \in C_k(i)} w(U) \big(v(U) - v(U \setminus i)\big).

    With ``weights="myerson"`` (default), :math:`w(U) = (|U|-1)!\,b!/(|U|+b)!`
    where b counts the nodes adjacent to U outside it: Eq. (6)'s
    :math:`2/((|U|+2)(|U|+1)|U|)` for interior sets of a line, and, once
    ``k`` reaches the graph's diameter, exactly the Myerson value for models
    that decompose over connected components (Eq. (6)'s constant is off at
    sequence ends and on grids; ``weights="paper"`` applies it anyway).
    :math:`O(k^2 d)` coalitions on a line. ``method="regression"`` is the
    paper's Sec. 4.3.2 variant: a KernelSHAP-weighted least-squares fit over
    the connected sets of size at most ``k`` (n-grams; k x k squares on a
    grid) with efficiency enforced.
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
        weights: str = ...,
        method: str = ...,
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
        weights: str = ...,
        method: str = ...,
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
        k: int = 2,
        context: str = "baseline",
        weights: str = "myerson",
        method: str = "exact",
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
        return_uncertainty: bool = False,
        confidence: float = 0.95,
    ) -> Tensor | tuple[Tensor, ...] | tuple[Tensor | tuple[Tensor, ...], ...]:
        """C-Shapley values of each feature, in the inputs' shapes.

        Arguments shared with Captum mean what they mean in
        :meth:`~captum_graphshap.ExactShapley.attribute`; ``graph`` (and its
        inference from the input shape or the mask) as in
        :meth:`~captum_graphshap.MyersonValue.attribute`.

        Args:
            k: neighbourhood radius in graph hops (``method="exact"``), or the
                largest set size / square side (``"regression"``).
            context: ``"baseline"`` or ``"input"``, as in
                :class:`~captum_graphshap.LShapley` (``"exact"`` only).
            weights: ``"myerson"`` or ``"paper"`` (``"exact"`` only).
            method: ``"exact"`` (Eq. 6) or ``"regression"`` (Sec. 4.3.2).

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
        check_choice(method, C_METHODS, "method")
        check_choice(context, L_CONTEXTS, "context")
        check_choice(weights, C_WEIGHTS, "weights")
        return attribute_on_graphs(
            self.forward_func,
            (
                functools.partial(c_shapley_regression_plan, k=k)
                if method == "regression"
                else functools.partial(c_shapley_plan, k=k, context=context, weights=weights)
            ),
            "CShapley",
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
