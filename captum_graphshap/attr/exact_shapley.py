"""Exact Shapley values by enumerating every coalition."""

from __future__ import annotations

import captum.attr as captum_attr

from ..engine.coalition_game import CoalitionGame
from ..plans.exact import exact_shapley_plan
from .base import GameAttribution, Options, Outcome, evaluate_plan


class ExactShapley(GameAttribution, captum_attr.ShapleyValues):
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

    Example:
        >>> import torch
        >>> from captum_graphshap import ExactShapley
        >>> model = torch.nn.Linear(3, 1)
        >>> x = torch.ones(2, 3)
        >>> phi = ExactShapley(model).attribute(x, baselines=0.0, target=0)
        >>> torch.allclose(phi.sum(1), (model(x) - model(torch.zeros(2, 3)))[:, 0])
        True
    """

    progress_desc = "Shapley Values attribution"
    exact_for_dummies = True
    drops_null_players = True

    def explain(self, game: CoalitionGame, options: Options, show_progress: bool) -> Outcome:
        plan = exact_shapley_plan(game.num_features, game.device)
        return Outcome(plan.estimator(evaluate_plan(game, plan, show_progress, self.progress_desc)))
