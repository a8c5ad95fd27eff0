"""C-Shapley: marginal contributions to the connected sets around each feature."""

from __future__ import annotations

import dataclasses
import functools

import captum.attr as captum_attr

from ..plans.l_c_shapley import (
    C_WEIGHTS,
    L_CONTEXTS,
    c_shapley_plan,
    c_shapley_regression_plan,
)
from ..plans.limits import check_choice
from .graph_family import GraphAttribution, GraphOptions, PlanBuilder, check_order

C_METHODS = ("exact", "regression")


@dataclasses.dataclass(frozen=True)
class CShapleyOptions(GraphOptions):
    """Options of :class:`CShapley`.

    Args:
        k: neighbourhood radius in graph hops (``method="exact"``, default 2),
            or the largest set size / square side (``"regression"``).
        context: ``"baseline"`` or ``"input"``, as in
            :class:`~captum_graphshap.LShapley` (``"exact"`` only).
        weights: ``"myerson"`` or ``"paper"`` (``"exact"`` only).
        method: ``"exact"`` (Eq. 6) or ``"regression"`` (Sec. 4.3.2).
    """

    k: int = 2
    context: str = "baseline"
    weights: str = "myerson"
    method: str = "exact"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.k)
        check_choice(self.method, C_METHODS, "method")
        check_choice(self.context, L_CONTEXTS, "context")
        check_choice(self.weights, C_WEIGHTS, "weights")


class CShapley(GraphAttribution, captum_attr.ShapleyValueSampling):
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

    Example:
        >>> import torch
        >>> from captum_graphshap import CShapley
        >>> model = torch.nn.Linear(8, 1)
        >>> CShapley(model).attribute(torch.ones(2, 8), target=0, k=2).shape
        torch.Size([2, 8])
    """

    progress_desc = "C Shapley attribution"
    Options = CShapleyOptions

    def graph_plan(self, options: CShapleyOptions) -> PlanBuilder:
        if options.method == "regression":
            return functools.partial(c_shapley_regression_plan, k=options.k)
        return functools.partial(
            c_shapley_plan, k=options.k, context=options.context, weights=options.weights
        )
