"""Tutorials are code: they must run."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "tutorials").glob("*.py"))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(path), run_name="__main__")
    # Each tutorial states its own claims; the first checks them against Captum.
    if "captum" in namespace and "ours" in namespace:
        assert float((namespace["ours"] - namespace["captum"]).abs().max()) < 1e-5
