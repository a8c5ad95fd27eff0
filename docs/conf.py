"""Sphinx configuration of the captum-graphshap documentation site.

Build (from the repository root)::

    pip install -e ".[docs]"
    sphinx-build -W -b html docs docs/_build/html

The build never touches the network:

* **Intersphinx** links to torch, Captum, numpy, networkx and Python come from
  small inventories written at start-up from ``docs/_inventories/*.txt``
  (plain text, one ``name role url`` per line, kept in the repository) instead
  of the projects' ``objects.inv`` files, which would be downloaded at build
  time. They list the names our pages and signatures mention; a link to any
  other external name is plain text (see ``nitpick_ignore_regex``), while a
  broken reference to this package's own names is an error under ``-W``.
* **Notebooks** (``tutorials/*.ipynb``, shown through the ``docs/tutorials``
  link) are executed by myst-nb when the site is built, so their figures
  appear; ``-D nb_execution_mode=off`` builds the pages without running them
  (what ``tests/test_docs_build.py`` does: CI executes the notebooks in
  ``tests/test_notebooks.py``).
* **MathJax** is loaded by the reader's browser; ``GRAPHSHAP_MATHJAX=path``
  serves a local copy instead (for viewing offline).
"""

from __future__ import annotations

import os
import sys
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import captum_graphshap  # noqa: E402

project = "captum-graphshap"
author = "captum-graphshap developers"
copyright = "captum-graphshap developers"
release = captum_graphshap.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "myst_nb",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "jupyter_execute", "**.ipynb_checkpoints", "_inventories"]
templates_path = ["_templates"]

# -- HTML ---------------------------------------------------------------------
html_theme = "furo"
html_title = f"captum-graphshap {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
if os.environ.get("GRAPHSHAP_MATHJAX"):
    mathjax_path = os.environ["GRAPHSHAP_MATHJAX"]

# -- autodoc / napoleon (Google style) ----------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = False
napoleon_custom_sections = [("Return values", "params_style")]

# -- MyST / myst-nb -----------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_in_temp = True  # a notebook never writes next to its source
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_merge_streams = True
# Static pages: stderr is progress bars and tqdm's 'IProgress not found' note, not content.
nb_output_stderr = "remove"

# -- references ---------------------------------------------------------------
nitpicky = True
# External names outside the vendored inventories stay plain text; names of
# this package must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|numpy\.typing|npt|nx|networkx|captum|matplotlib|PIL)(\..*)?"),
    (
        r"py:.*",
        r"(typing|collections|collections\.abc|types|pathlib|dataclasses|abc|os|io|enum"
        r"|functools|contextlib|concurrent|numbers|datetime|logging)\..*",
    ),
    (r"py:.*", r"(transformers|shap|shapiq|ray|tqdm|sklearn|skimage|nn)(\..*)?"),
    (r"py:.*", r"(BatchEncoding|PreTrainedTokenizerBase|PreTrainedModel)"),
    (r"py:class", r"(dict|tuple|list|set|type)\[.*"),  # split generics of constants
    (r"py:.*", r"(Tensor|Module|Generator|Figure|Axes|Path|Any|Callable|Sequence|Iterable)"),
    (r"py:.*", r"(Mapping|Iterator|Hashable|NDArray|ArrayLike|MatrixLike|NodesLike|Self)"),
    (r"py:.*", r"(int|float|str|bool|None|tuple|list|dict|object|type|slice|ellipsis)"),
    (r"py:.*", r".*\b(T|_T|_EdgeArray|TensorOrTuple|TargetType|BaselineType)\b.*"),
]


def _inventory(name: str, source: Path, out_dir: Path) -> Path:
    """Write a Sphinx v2 ``objects.inv`` from ``name role uri`` lines."""
    lines = []
    for raw in source.read_text().splitlines():
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        obj, role, uri = raw.split()
        lines.append(f"{obj} {role} 1 {uri} -")
    header = (
        f"# Sphinx inventory version 2\n# Project: {name}\n# Version: \n"
        "# The remainder of this file is compressed using zlib.\n"
    ).encode()
    path = out_dir / f"{name}.inv"
    path.write_bytes(header + zlib.compress(("\n".join(lines) + "\n").encode()))
    return path


_INVENTORY_BASES = {
    "python": "https://docs.python.org/3/",
    "torch": "https://docs.pytorch.org/docs/stable/",
    "captum": "https://captum.ai/api/",
    "numpy": "https://numpy.org/doc/stable/",
    "networkx": "https://networkx.org/documentation/stable/",
}
_inv_dir = Path(tempfile.mkdtemp(prefix="graphshap-inv-"))
intersphinx_mapping = {
    name: (base, str(_inventory(name, HERE / "_inventories" / f"{name}.txt", _inv_dir)))
    for name, base in _INVENTORY_BASES.items()
}
intersphinx_timeout = 1


# -- references to this package's names --------------------------------------
# Docstrings name objects by any path they import from (``captum_graphshap.
# LShapley``, ``captum_graphshap.viz.images.to_hwc``, ``myerson_weight`` from
# another module). The API pages document each public object once. A
# reference Sphinx cannot resolve is looked up among every module of the
# package: if it names an object that exists, it links to the page where that
# object is documented, or stays code when the object has no page (a helper
# outside ``__all__``); if it names nothing that exists (a stale name), it is
# left unresolved and fails the build under ``-W``.
_INDEX: dict[str, list[object]] = {}


def _package_index() -> dict[str, list[object]]:
    """Every dotted path under captum_graphshap -> the objects it names."""
    if _INDEX:
        return _INDEX
    import importlib
    import inspect
    import pkgutil

    modules = ["captum_graphshap"] + [
        name for _, name, _ in pkgutil.walk_packages(captum_graphshap.__path__, "captum_graphshap.")
    ]
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional dependency is missing
            continue
        _INDEX.setdefault(name, []).append(module)
        for attr, obj in vars(module).items():
            if attr.startswith("__"):
                continue
            path = f"{name}.{attr}"
            _INDEX.setdefault(path, []).append(obj)
            if inspect.isclass(obj) and obj.__module__.startswith("captum_graphshap"):
                for member in vars(obj):
                    if not member.startswith("__"):
                        _INDEX.setdefault(f"{path}.{member}", []).append((obj, member))
    return _INDEX


def _same(a: object, b: object) -> bool:
    return a is b or (isinstance(a, tuple) and isinstance(b, tuple) and a == b)


def _resolve_package_name(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "").lstrip("~.")
    index = _package_index()
    if target in index:
        candidates = index[target]
    else:
        suffix = "." + target
        candidates = [obj for path, objs in index.items() if path.endswith(suffix) for obj in objs]
    if not candidates:
        return None  # a name that exists nowhere: a broken reference
    domain = env.get_domain("py")
    documented = {
        path
        for path, objs in index.items()
        if any(_same(obj, c) for obj in objs for c in candidates) and path in domain.objects
    }
    if len(documented) >= 1:
        canonical = sorted(documented, key=lambda p: (p.count("."), p))[0]
        role = domain.objects[canonical].objtype
        found = domain.resolve_xref(
            env,
            node["refdoc"],
            app.builder,
            domain.role_for_objtype(role) or "obj",
            canonical,
            node,
            contnode,
        )
        if found is not None:
            return found
    return contnode  # exists, but has no page of its own: shown as code


def _drop_builtin_docstrings(app, what, name, obj, options, lines):
    """Constants (a dict, a str) would otherwise show their type's docstring."""
    if what in ("data", "attribute") and lines:
        # a NamedTuple field's type has a descriptor, not a string, as __doc__
        doc = type(obj).__doc__
        builtin = doc.strip().splitlines() if isinstance(doc, str) else []
        if builtin and lines[0].strip() == builtin[0].strip():
            lines[:] = []


#: Abbreviations a summary may not end on: "(Chen et al., ICLR 2019, Eq. 5)."
#: would otherwise be cut at "Eq." (autosummary knows "et al." but not these).
_ABBREVIATIONS = ("Eq.", "Eqs.", "Sec.", "Fig.", "Alg.", "Thm.", "Prop.", "cf.", "vs.")


def first_sentence(paragraph: str) -> str:
    """The paragraph up to the first ``". "`` outside a literal and after no abbreviation."""
    import re

    for end in re.finditer(r"\.(?=\s)", paragraph):
        sentence = paragraph[: end.end()]
        if sentence.count("``") % 2 == 0 and not sentence.endswith(_ABBREVIATIONS):
            return sentence
    return paragraph


def _whole_literals_in_summaries() -> None:
    """autosummary cuts a summary at the first ``". "``, even inside ````...```` or after "Eq."."""
    from sphinx.ext import autosummary

    original = autosummary.extract_summary

    def extract_summary(doc, document):
        summary = original(doc, document)
        if summary.count("``") % 2 or summary.endswith(_ABBREVIATIONS):
            paragraph = []
            for line in doc:
                if not line.strip():
                    if paragraph:
                        break
                    continue
                paragraph.append(line.strip())
            summary = first_sentence(" ".join(paragraph))
        return summary

    autosummary.extract_summary = extract_summary


_whole_literals_in_summaries()


def _no_inline_attribute_types() -> None:
    """Napoleon reads ``#: per input: build rows ...`` as a type ``per input``.

    Our attribute and constant comments never write ``type: text`` (types come
    from the annotations), so the comment is kept as it is.
    """
    from sphinx.ext.napoleon.docstring import GoogleDocstring

    def _parse_attribute_docstring(self):
        return list(self._consume_to_end())

    GoogleDocstring._parse_attribute_docstring = _parse_attribute_docstring


_no_inline_attribute_types()


def _named_returns(app, what, name, obj, options, lines):
    """``Returns:`` listing named values (``name:`` then an indented text) as fields.

    Napoleon reads a Returns section as one ``type: text``, so a function that
    returns ``feature_mask`` and ``words`` would show them run together; such a
    section is renamed "Return values", rendered like ``Args``.
    """
    import re

    for start, line in enumerate(lines):
        header = re.fullmatch(r"(\s*)Returns:\s*", line)
        if not header:
            continue
        indent = len(header.group(1))
        body = []
        for later in lines[start + 1 :]:
            if later.strip() and len(later) - len(later.lstrip()) <= indent:
                break
            body.append(later)
        filled = [b for b in body if b.strip()]
        if not filled:
            continue
        entry_indent = min(len(b) - len(b.lstrip()) for b in filled)
        entries = [b for b in filled if len(b) - len(b.lstrip()) == entry_indent]
        if len(entries) > 1 and all(re.fullmatch(r"\s*[\w.]+:(\s.*)?", e) for e in entries):
            lines[start] = " " * indent + "Return values:"


def setup(app):
    app.connect("autodoc-process-docstring", _named_returns, priority=400)
    app.connect("missing-reference", _resolve_package_name)
    app.connect("autodoc-process-docstring", _drop_builtin_docstrings)
