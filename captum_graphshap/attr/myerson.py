"""The Myerson value: Shapley values of a game restricted to a graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..coalitions import myerson_plan
from ..game import CoalitionGame, prepare_game
from ..graphs import FeatureGraph
from ._common import default_graph_mask, pack_attributions, resolve_graphs


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
        game, is_tuple = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            default_graph_mask(inputs, feature_mask),
            perturbations_per_eval,
            references=references,
            value=value,
        )
        graphs = resolve_graphs(graph, game)
        if isinstance(graphs, FeatureGraph):
            coalitions, linear = myerson_plan(graphs)
            values = game.evaluate(
                coalitions, distinct=True, show_progress=show_progress, desc="MyersonValue"
            )
            per_feature = linear.apply(values)
        else:
            per_feature = _per_example_myerson(game, graphs, show_progress)
        return pack_attributions(game, per_feature, is_tuple)


def _per_example_myerson(
    game: CoalitionGame, graphs: list[FeatureGraph], show_progress: bool
) -> Tensor:
    """Each example has its own graph (superpixels): one ragged batch of rows."""
    d = game.num_features
    plans = [myerson_plan(g) for g in graphs]  # all refusals before any model call
    blocks = []
    for coalitions, _ in plans:
        padded = torch.zeros(coalitions.shape[0], d, dtype=torch.bool)
        padded[:, : coalitions.shape[1]] = coalitions
        blocks.append(padded)
    sizes = [block.shape[0] for block in blocks]
    example_index = torch.repeat_interleave(torch.arange(len(blocks)), torch.tensor(sizes))
    values = game.evaluate_rows(
        example_index.to(game.device),
        torch.cat(blocks).to(game.device),
        distinct=True,
        show_progress=show_progress,
        desc="MyersonValue",
    )
    per_feature = values.new_zeros(game.batch_size, d)
    for example, (chunk, (_, linear)) in enumerate(zip(values.split(sizes), plans)):
        per_feature[example, : linear.num_outputs] = linear.apply(chunk[None])[0]
    return per_feature
