"""The Myerson value: Shapley values of a game restricted to a graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..graphs import FeatureGraph
from ..plans.exact import myerson_plan
from ._common import attribute_on_graphs


class MyersonValue(PerturbationAttribution):
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
        graph: FeatureGraph | Sequence[FeatureGraph] | None = None,
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
    ) -> Tensor | tuple[Tensor, ...]:
        """Myerson values of each feature, in the inputs' shapes.

        Arguments shared with Captum mean what they mean in
        :meth:`ExactShapley.attribute`; without ``feature_mask``, an image's
        channels are grouped per pixel.

        Args:
            graph: a :class:`~captum_graphshap.graphs.FeatureGraph` whose
                nodes are the feature ids, or a list with one graph per
                example. None infers a line for ``(N, L)`` inputs, a pixel
                grid for images, or the adjacency of the regions of
                ``feature_mask``.

        Returns:
            Attributions with the shape, dtype and type of ``inputs``.
        """
        return attribute_on_graphs(
            self.forward_func,
            myerson_plan,
            "MyersonValue",
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
        )
