"""Checks of the options of the sampling methods, before any model call."""

from __future__ import annotations

from typing import Any

import torch

from .._compat import is_int


def check_count(value: Any, name: str, minimum: int, advice: str = "") -> int:
    """An int option (a sample count) of at least ``minimum``."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}.")
    count = int(value)
    if count < minimum:
        raise ValueError(
            f"{name} must be >= {minimum}, got {count}.{' ' + advice if advice else ''}"
        )
    return count


def check_flag(value: Any, name: str) -> bool:
    """A bool option (``antithetic``, ``return_uncertainty``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
    return value


def check_generator(generator: Any) -> torch.Generator | None:
    """``generator`` is None (the global RNG) or a ``torch.Generator``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}; "
            "for a seed, pass torch.Generator().manual_seed(seed)."
        )
    return generator
