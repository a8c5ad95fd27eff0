"""The project's promises about itself: README commands, CI, packaging, lint."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)


def test_ci_runs_the_readme_test_command():
    demo, tests = _readme_commands()[:2]
    assert "graphshap demo" in demo
    assert "pytest" in tests
    ci_lines = [
        line
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert tests in ci_lines


def test_pyproject_declares_the_promised_dependencies():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the package supports 3.10
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "captum-graphshap"
    names = {re.split(r"[<>=!~ ]", dep)[0] for dep in meta["dependencies"]}
    assert names == {"torch", "captum", "numpy", "networkx", "tqdm", "matplotlib"}
    assert "captum>=0.9,<0.10" in meta["dependencies"]
    extras = meta["optional-dependencies"]
    assert set(extras) >= {"image", "text", "bench", "dev"}
    assert meta["scripts"]["graphshap"] == "captum_graphshap.apps.cli:main"
    assert (ROOT / "captum_graphshap" / "py.typed").exists()


def test_library_does_not_import_captum_private_helpers():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "captum_graphshap").rglob("*.py")
        if re.search(r"^\s*(from|import)\s+captum\._utils", path.read_text(), re.MULTILINE)
    ]
    assert offenders == []


def test_ruff_is_clean():
    optional("ruff")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "captum_graphshap", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    optional("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "captum_graphshap"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
