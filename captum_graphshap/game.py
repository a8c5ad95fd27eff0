"""Deprecated alias of :mod:`captum_graphshap.engine`, kept for one release."""

import warnings

from .engine.batching import AUTO_ELEMENTS_PER_CALL
from .engine.coalition_game import *  # noqa: F403
from .engine.coalition_game import CoalitionGame, prepare_game

warnings.warn(
    "captum_graphshap.game is deprecated; import from captum_graphshap.engine instead.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["AUTO_ELEMENTS_PER_CALL", "CoalitionGame", "prepare_game"]
