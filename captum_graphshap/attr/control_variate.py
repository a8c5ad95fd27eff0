"""The Taylor control variate of a coalition game, and the checks of its options."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..engine.coalition_game import CoalitionGame
from ..engine.derivatives import taylor_expansion
from ..plans.limits import check_choice
from ..plans.surrogates import QuadraticSurrogate, quadratic_from_taylor

#: ``control_variate=`` choices (None: no control variate)
CONTROL_VARIATES: tuple[str, ...] = ("taylor",)


def check_control_options(
    control_variate: Any, point: Any, coefficient: Any, references: Any
) -> None:
    """``control_variate`` is None or ``"taylor"``; ``control_point`` a number in [0, 1];
    ``control_coefficient`` ``"optimal"`` or a finite number (checked in any case)."""
    if coefficient != "optimal" and (
        isinstance(coefficient, bool)
        or not isinstance(coefficient, numbers.Real)
        or not math.isfinite(coefficient)
    ):
        raise ValueError(
            f"control_coefficient must be 'optimal' or a finite number (1.0 samples the "
            f"residual game), got {coefficient!r}."
        )
    if control_variate is None:
        return
    check_choice(control_variate, CONTROL_VARIATES, "control_variate")
    if isinstance(point, bool) or not isinstance(point, numbers.Real) or not 0 <= float(point) <= 1:
        raise ValueError(
            f"control_point must be a number in [0, 1] (the expansion point b + t (x - b) "
            f"of the Taylor surrogate; 0.5, the default, is the midpoint), got {point!r}."
        )
    if references is not None:
        raise ValueError(
            "control_variate='taylor' expands the model around one baseline and cannot "
            "take references; pass baselines, or drop control_variate."
        )


def taylor_control(game: CoalitionGame, point: float) -> QuadraticSurrogate:
    """The game's second-order Taylor surrogate at ``b + point (x - b)``.

    Its derivatives come from :func:`~captum_graphshap.engine.derivatives.taylor_expansion`,
    which counts their cost (``taylor_cost``: ``1 + 3 + 4 d`` forward
    equivalents) in ``game.evaluations``, refuses integer inputs before any
    model call and a model without gradients after its one checking forward.
    """
    terms = taylor_expansion(game, point, "control_variate='taylor'")
    return quadratic_from_taylor(terms.value, terms.gradient, terms.hessian, float(point))
