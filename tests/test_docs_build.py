"""The documentation site builds with warnings as errors, and documents every public name.

The build is the README's (``sphinx-build -W -b html docs docs/_build/html``)
with notebook execution off (``tests/test_notebooks.py`` executes them) and
its output in a temporary folder. ``-W`` with ``nitpicky`` makes a reference
to a name of this package that does not exist, or malformed reStructuredText
in a docstring, fail the test.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The public subpackages and their API pages: each name in their __all__ is listed there.
API_PAGES = {
    "captum_graphshap": "captum_graphshap.rst",
    "captum_graphshap.attr": "attr.rst",
    "captum_graphshap.amortized": "amortized.rst",
    "captum_graphshap.graphs": "graphs.rst",
    "captum_graphshap.analysis": "analysis.rst",
    "captum_graphshap.metrics": "metrics.rst",
    "captum_graphshap.uncertainty": "uncertainty.rst",
    "captum_graphshap.viz": "viz.rst",
    "captum_graphshap.engine": "engine.rst",
    "captum_graphshap.text": "text.rst",
    "captum_graphshap.llm": "llm.rst",
    "captum_graphshap.wrappers": "wrappers.rst",
    "captum_graphshap.apps.demo": "apps.rst",
    "captum_graphshap.interop": "interop.rst",
    "captum_graphshap.distributed": "distributed.rst",
}


def _listed(page: Path) -> set[str]:
    """Names in the page's autosummary lists and in its :class:`name <path>` links."""
    text = page.read_text()
    module = re.search(r"^\.\. automodule:: ([\w.]+)\n   :members:", text, re.MULTILINE)
    if module:  # autodoc documents the module's whole __all__
        return set(importlib.import_module(module.group(1)).__all__)
    names = set(re.findall(r"^   ~?(?:[\w.]+\.)?(\w+)\s*$", text, re.MULTILINE))
    names |= set(re.findall(r":\w+:`(\w+) <", text))
    return names


@pytest.mark.parametrize("package", sorted(API_PAGES))
def test_every_public_name_has_an_api_entry(package):
    module = importlib.import_module(package)
    page = DOCS / "api" / API_PAGES[package]
    missing = sorted(set(module.__all__) - _listed(page))
    assert not missing, f"{page.relative_to(ROOT)} does not list {missing} from {package}.__all__"


def test_every_public_subpackage_has_an_api_page():
    import captum_graphshap

    subpackages = {
        f"captum_graphshap.{path.name}"
        for path in Path(captum_graphshap.__file__).parent.iterdir()
        if (path / "__init__.py").exists()
    }
    public = {name for name in subpackages if hasattr(importlib.import_module(name), "__all__")}
    undocumented = sorted(public - set(API_PAGES))
    assert not undocumented, f"public subpackages without an API page in docs/api: {undocumented}"
    index = (DOCS / "api" / "index.rst").read_text()
    for page in API_PAGES.values():
        assert page.removesuffix(".rst") in index, f"docs/api/index.rst misses {page}"


def test_site_builds_with_warnings_as_errors(tmp_path):
    optional("sphinx")
    optional("myst_nb")
    optional("furo")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-D",
            "nb_execution_mode=off",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(tmp_path / "html"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-10000:]
    html = tmp_path / "html"
    # The pages a reader starts from, one generated API page, and a tutorial, exist.
    for page in ["index.html", "guide/index.html", "api/index.html", "tutorials/index.html"]:
        assert (html / page).exists(), page
    lshapley = (html / "api/generated/captum_graphshap.attr.LShapley.html").read_text()
    assert "Chen" in lshapley and "attribute" in lshapley
    notebooks = sorted((ROOT / "tutorials").glob("*.ipynb"))
    for notebook in notebooks:
        assert (html / "tutorials" / f"{notebook.stem}.html").exists(), notebook.name


GUIDE_PAGES = [*sorted((DOCS / "guide").glob("*.md")), DOCS / "index.md"]


@pytest.mark.parametrize("page", GUIDE_PAGES, ids=[p.name for p in GUIDE_PAGES])
def test_guide_code_runs(page, tmp_path, monkeypatch):
    """Each page's ``python`` blocks run, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    if "SuperpixelGraph.slic" in "".join(blocks):
        optional("skimage")
    if re.search(r"^\s*import ray\b|captum_graphshap\.distributed\b", "".join(blocks), re.M):
        optional("ray")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__guide__"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)


def test_api_summaries_are_whole_sentences():
    """autosummary's table cut "(Chen et al., ICLR 2019, Eq. 5)." at "Eq."; conf.py keeps it."""
    optional("sphinx")
    import importlib.util
    import inspect

    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from sphinx.ext import autosummary

    from captum_graphshap.attr import BivariateShapley, CShapley, LShapley, ShapleySampling

    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # patches extract_summary
    settings = get_default_settings(Parser)
    for cls, summary in [
        (LShapley, "L-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 5)."),
        (CShapley, "C-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 6)."),
        (BivariateShapley, "Bivariate Shapley values (Masoomi et al., ICLR 2022, Eq. 6)."),
    ]:
        lines = inspect.getdoc(cls).splitlines()
        assert autosummary.extract_summary(lines, settings) == summary
    # a summary with no abbreviation is still its first sentence only
    first = inspect.getdoc(ShapleySampling).split("\n\n")[0]
    got = autosummary.extract_summary(inspect.getdoc(ShapleySampling).splitlines(), settings)
    assert first.replace("\n", " ").startswith(got)
