"""The Myerson value: Shapley values of a game restricted to a graph."""

from __future__ import annotations

from typing import Any

import captum.attr as captum_attr

from ..plans.exact import myerson_plan
from .graph_family import GraphAttribution, PlanBuilder


class MyersonValue(GraphAttribution, captum_attr.ShapleyValueSampling):
    r"""The Myerson value of the model's game on a feature graph.

    The Shapley value of the graph-restricted game
    :math:`v^G(S) = \sum_{T \in \mathrm{components}(S)} v_0(T)`, with the
    centred game :math:`v_0(S) = v(S) - v(\emptyset)`: features cooperate
    only through paths of the graph. It needs the model only on connected
    coalitions, :math:`d(d+1)/2 + 1` of them on a line instead of
    :math:`2^d`, and equals the Shapley value whenever the model's output
    decomposes over the connected components of the present features. It is
    what C-Shapley converges to as its order grows. Efficiency holds on a
    connected graph: the values sum to :math:`f(x) - f(\text{baseline})`.

    Example:
        >>> import torch
        >>> from captum_graphshap import LineGraph, MyersonValue
        >>> model = torch.nn.Linear(6, 1)
        >>> phi = MyersonValue(model).attribute(torch.ones(1, 6), target=0, graph=LineGraph(6))
        >>> phi.shape
        torch.Size([1, 6])
    """

    def graph_plan(self, options: Any) -> PlanBuilder:
        return myerson_plan
