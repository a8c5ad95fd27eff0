"""Every entry of the xfail table in conftest.py names a ported case that exists.

A renamed or removed case would otherwise leave a stale entry that marks nothing.
"""

from __future__ import annotations

import importlib

import pytest

from .conftest import XFAIL


@pytest.mark.parametrize("key", sorted(XFAIL))
def test_xfail_entry_names_an_existing_case(key: str) -> None:
    file, cls, case = key.split("::")
    module = importlib.import_module(f"{__package__}.{file.removesuffix('.py')}")
    assert callable(getattr(getattr(module, cls), case, None)), key
