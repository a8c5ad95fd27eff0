"""Applications live behind one boundary: the library never imports ``captum_graphshap.apps``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import captum_graphshap

PACKAGE = Path(captum_graphshap.__file__).parent


def _library_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "apps" not in p.relative_to(PACKAGE).parts)


def _imports_apps(path: Path) -> list[str]:
    """The import statements of ``path`` that reach into ``captum_graphshap.apps``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if module.split(".")[-1] == "apps" or ".apps." in f".{module}." or "apps" in names:
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import ...")
        elif isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name.startswith("captum_graphshap.apps")
            ]
    return found


def test_no_library_module_imports_the_apps():
    offenders = {
        str(path.relative_to(PACKAGE)): lines
        for path in _library_files()
        if (lines := _imports_apps(path))
    }
    assert not offenders, f"library modules import captum_graphshap.apps: {offenders}"


def test_the_check_finds_an_import_of_the_apps(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from ..apps.demo import run_demo\nimport captum_graphshap.apps.minilm\n")
    assert len(_imports_apps(sample)) == 2


def test_importing_every_library_subpackage_loads_no_app():
    code = (
        "import sys, captum_graphshap, captum_graphshap.attr, captum_graphshap.text, "
        "captum_graphshap.llm, captum_graphshap.engine, captum_graphshap.plans, "
        "captum_graphshap.graphs, captum_graphshap.metrics, captum_graphshap.viz; "
        "captum_graphshap.ShapleySampling; "
        "print(sorted(m for m in sys.modules if m.startswith('captum_graphshap.apps')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_task_model_lives_in_the_apps_only():
    """``captum_graphshap.llm.toy_task``'s deprecation shim is gone: the library no
    longer reaches up into the apps."""
    import captum_graphshap.llm as llm
    from captum_graphshap.apps import toy_task

    assert not hasattr(llm, "toy_task") and callable(toy_task.trained_model)


@pytest.mark.parametrize("name", ["minilm_path", "explain_sentiment", "load_minilm"])
def test_a_name_moved_from_text_to_the_apps_says_where_it_went(name):
    import captum_graphshap.text as text

    with pytest.raises(AttributeError, match=f"from captum_graphshap.apps.minilm import {name}"):
        getattr(text, name)
    assert name not in text.__all__
