"""Optional dependencies in tests."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def optional(module: str) -> ModuleType:
    """Import an optional dependency: skip locally when missing, fail in CI.

    CI installs every extra (``.ci/run``), so a missing one there is a broken
    install, not a reason to skip.
    """
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return importlib.import_module(module)
    return pytest.importorskip(module)
