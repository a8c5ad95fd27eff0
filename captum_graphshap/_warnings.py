"""Warnings that point at the caller's line, not at this package's internals."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parent)


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` with the stack level of the first frame outside the package.

    A fixed ``stacklevel`` breaks whenever the call path inside the package
    changes (a wrapper, the multi-output replay); this counts the frames.
    """
    level = 2  # 1 is this function; 2 its caller, the first frame examined
    frame = sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)
