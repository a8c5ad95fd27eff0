"""L-Shapley: Shapley values within each feature's graph neighbourhood."""

from __future__ import annotations

import dataclasses
import functools

import captum.attr as captum_attr

from ..plans.l_c_shapley import L_CONTEXTS, l_shapley_plan
from ..plans.limits import check_choice
from .graph_family import GraphAttribution, GraphOptions, PlanBuilder, check_order


@dataclasses.dataclass(frozen=True)
class LShapleyOptions(GraphOptions):
    """Options of :class:`LShapley`.

    Args:
        k: neighbourhood radius in graph hops (default 1).
        context: ``"baseline"`` (the paper: features outside :math:`N_k(i)`
            take the baseline) or ``"input"`` (they keep their input values,
            as in the authors' released code).
    """

    k: int = 1
    context: str = "baseline"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.k)
        check_choice(self.context, L_CONTEXTS, "context")


class LShapley(GraphAttribution, captum_attr.ShapleyValueSampling):
    r"""L-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 5).

    Each feature's exact Shapley value in the game restricted to its
    neighbourhood :math:`N_k(i)` (graph distance at most ``k``):

    .. math::
        \hat\phi_i = \frac{1}{|N_k(i)|} \sum_{i \in T \subseteq N_k(i)}
        \binom{|N_k(i)| - 1}{|T| - 1}^{-1} \big(v(T) - v(T \setminus i)\big)

    It is exact when features interact only within distance ``k``, and costs
    a number of model rows linear in ``d``: at most :math:`2^{2k} d` distinct
    coalitions on a line, shared across features and deduplicated. Refuses
    plans above :math:`2^{22}` coalitions per example on grids and lines,
    above :math:`2^{20}` on other graphs, or above ``budget``, giving the count.

    Example:
        Neighbours interact, features farther apart do not, so ``k=1`` is exact:

        >>> import torch
        >>> from captum_graphshap import ExactShapley, LShapley
        >>> def chain(x):
        ...     return (x[:, 1:] * x[:, :-1]).sum(dim=1)
        >>> x = torch.linspace(-1, 1, 16, dtype=torch.float64).view(2, 8)
        >>> phi = LShapley(chain).attribute(x, k=1)  # 3 features a neighbourhood
        >>> phi.shape, torch.allclose(phi, ExactShapley(chain).attribute(x))
        (torch.Size([2, 8]), True)
    """

    Options = LShapleyOptions

    def graph_plan(self, options: LShapleyOptions) -> PlanBuilder:
        return functools.partial(l_shapley_plan, k=options.k, context=options.context)
