"""Checks of the options of the sampling methods, before any model call."""

from __future__ import annotations

import difflib
from typing import Any

import torch

from .._compat import is_int
from .docs import CAPTUM_ARGUMENTS


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


def unknown_options_error(owner: str, unknown: list[str], known: list[str]) -> TypeError:
    """The error for keyword arguments ``attribute`` does not take, with the closest names.

    A near miss is matched against Captum's arguments as well as the class's
    options, so ``baseline=`` suggests ``baselines``.
    """
    accepted = [*CAPTUM_ARGUMENTS, *known]
    hints = [
        f"{name!r}: did you mean {close[0]!r}?"
        for name in unknown
        if (close := difflib.get_close_matches(name, accepted, n=1, cutoff=0.6))
    ]
    return TypeError(
        f"{owner}.attribute got unknown option(s) {unknown}"
        + (f" ({'; '.join(hints)})" if hints else "")
        + f"; its keyword-only options are {known}."
    )
