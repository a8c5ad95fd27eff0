"""The coalition engine (stage 2): validated games and their batched evaluation."""

from .coalition_game import CoalitionGame, prepare_game
from .features import FeatureMasks, format_feature_mask

__all__ = ["CoalitionGame", "FeatureMasks", "format_feature_mask", "prepare_game"]
