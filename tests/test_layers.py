"""The house rules of the package, read from its source.

Every subpackage has a layer; a module may import from its own layer or
below, and neither the subpackages' nor the modules' import graph has a
cycle. The imports are read with ``ast`` (so an import hidden inside a
function counts, and so does ``importlib.import_module("captum_graphshap...")``),
relative imports resolved against the importing module. Every library module
stays within :data:`MAX_CODE_LINES` code lines and every function within
:data:`MAX_FUNCTION_CODE_LINES`, its module docstring within
:data:`MAX_MODULE_DOCSTRING_LINES` lines, and no docstring or comment carries
a date (measurements and their history live in ``benchmarks/README.md``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import captum_graphshap

PACKAGE = Path(captum_graphshap.__file__).parent

#: subpackage (or top-level module) -> layer; higher layers may import lower ones
LAYERS = {
    "_compat": 0,
    "_warnings": 0,
    "engine": 1,
    "graphs": 1,
    "plans": 2,
    "uncertainty": 3,
    "attr": 4,
    **dict.fromkeys(
        (
            "analysis",
            "metrics",
            "viz",
            "interop",
            "text",
            "llm",
            "distributed",
            "wrappers",
            "amortized",
        ),
        5,
    ),
    "apps": 6,
}

#: Non-blank, non-comment lines (docstrings count) a library module may have.
MAX_CODE_LINES = 600
#: Non-blank, non-comment lines of a function's body after its docstring (the house
#: style: functions under 60 lines; nested functions count in their parent too).
MAX_FUNCTION_CODE_LINES = 60
MAX_MODULE_DOCSTRING_LINES = 40
#: An ISO date, or a month and year.
DATE = re.compile(
    r"\b(19|20)\d\d-[01]\d-[0-3]\d\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)"
    r"[a-z]*\.? (19|20)\d\d\b"
)


def _module_name(path: Path, root: Path = PACKAGE) -> list[str]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported_subpackages(path: Path, root: Path = PACKAGE) -> set[str]:
    """The subpackages of ``captum_graphshap`` that ``path`` imports from."""
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [alias.name for alias in node.names]
            if target == ["captum_graphshap"]:  # from captum_graphshap import attr, ...
                found.update(n for n in names if n in LAYERS)
            elif target[:1] == ["captum_graphshap"] and len(target) > 1:
                found.add(target[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name.split(".")
                if target[:1] == ["captum_graphshap"] and len(target) > 1:
                    found.add(target[1])
        elif (target_name := _import_module_target(node)) is not None:
            target = target_name.split(".")
            if target[:1] == ["captum_graphshap"] and len(target) > 1:
                found.add(target[1])
    return found


def _import_module_target(node: ast.AST) -> str | None:
    """The module named by ``importlib.import_module("...")`` when it is a literal."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if name == "import_module" and isinstance(first, ast.Constant):
        return str(first.value)
    return None


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if len(name) < 2:  # captum_graphshap/__init__.py: the public names, lazily
            continue
        source = name[1]
        edges[source] |= {target for target in _imported_subpackages(path) if target != source}
    return edges


def test_every_subpackage_has_a_layer():
    present = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    present = {n for n in present if (PACKAGE / n).is_dir() or (PACKAGE / f"{n}.py").is_file()}
    present -= {"__init__", "__pycache__", "py"}
    assert present <= set(LAYERS), sorted(present - set(LAYERS))


def test_imports_point_down_only():
    upward = sorted(
        f"{source} (layer {LAYERS[source]}) imports {target} (layer {LAYERS[target]})"
        for source, targets in _edges().items()
        for target in targets
        if LAYERS[target] > LAYERS[source]
    )
    assert not upward, upward


def test_no_cycle_between_subpackages():
    edges = _edges()

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(edges.get(node, ()))
        return False

    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a))
    assert not cycles, cycles


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        (
            "plans/probe.py",
            "def f():\n    from ..attr import base\n"
            "import captum_graphshap.apps.demo\nfrom captum_graphshap import uncertainty\n",
            {"attr", "apps", "uncertainty"},
        ),
        (  # a deprecation shim's import on demand counts too
            "text/__init__.py",
            "import importlib\ndef __getattr__(name):\n"
            "    return importlib.import_module('captum_graphshap.apps.minilm')\n",
            {"apps"},
        ),
    ],
)
def test_the_reader_finds_hidden_absolute_and_on_demand_imports(tmp_path, where, source, expected):
    root = tmp_path / "captum_graphshap"
    probe = root / where
    probe.parent.mkdir(parents=True)
    probe.write_text(source)
    assert _imported_subpackages(probe, root) == expected


def _module_edges(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a package counts
    as its submodule when there is one, else as the package's ``__init__``)."""
    modules = {".".join(_module_name(path, root)): path for path in root.rglob("*.py")}

    def known(dotted: str) -> str | None:
        parts = dotted.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".")
        package = here if path.name == "__init__.py" else here[:-1]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - (node.level - 1)] if node.level else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                targets |= {known(f"{module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
            elif (literal := _import_module_target(node)) is not None:
                targets.add(known(literal))
        edges[name] = {t for t in targets if t is not None and t != name}
    return edges


def _module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_cycle_between_modules():
    assert not _module_cycles(_module_edges()), _module_cycles(_module_edges())


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path):
    root = tmp_path / "captum_graphshap"
    (root / "distributed").mkdir(parents=True)
    (root / "distributed" / "__init__.py").write_text("")
    (root / "distributed" / "shards.py").write_text("from .fingerprint import canonical\n")
    (root / "distributed" / "fingerprint.py").write_text(
        "def digest():\n    from .shards import example_at\n"
    )
    (root / "distributed" / "ray_runner.py").write_text("from . import shards\n")
    assert _module_cycles(_module_edges(root)) == [
        ["captum_graphshap.distributed.fingerprint", "captum_graphshap.distributed.shards"]
    ]


def _library_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def code_lines(source: str) -> int:
    """Lines that are neither blank nor comments (docstrings count)."""
    return sum(
        1 for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def test_every_library_module_is_within_the_code_line_bound():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in _library_modules()
        if (lines := code_lines(path.read_text())) > MAX_CODE_LINES
    }
    assert not long, f"split these by idea (at most {MAX_CODE_LINES} code lines): {long}"


def test_code_lines_leave_out_blanks_and_comments_only():
    assert code_lines('"""Doc.\n\nMore."""\n\n# why\nx = 1  # inline\n    # indented\n') == 3


def function_code_lines(source: str) -> dict[str, int]:
    """``{"name:line": code lines}`` of every function in ``source``: the body after
    its docstring, blank lines and comments left out (signature and docstring are not
    counted, nested functions' lines count in their parent too)."""
    lines = source.splitlines()
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0]
        has_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        start = (first.end_lineno or first.lineno) + 1 if has_docstring else first.lineno
        body = "\n".join(lines[start - 1 : node.end_lineno])
        found[f"{node.name}:{node.lineno}"] = code_lines(body)
    return found


def test_every_library_function_is_within_the_function_line_bound():
    long = {
        f"{path.relative_to(PACKAGE)}:{name}": lines
        for path in _library_modules()
        for name, lines in function_code_lines(path.read_text()).items()
        if lines > MAX_FUNCTION_CODE_LINES
    }
    assert not long, f"split these (at most {MAX_FUNCTION_CODE_LINES} code lines): {long}"


def test_function_code_lines_leave_out_the_signature_docstring_blanks_and_comments():
    source = (
        'def f(\n    a,\n):\n    """Doc.\n\n    More."""\n    # why\n    x = a\n\n'
        "    def g():\n        return x\n    return g\n\n\nasync def h(): return 1\n"
    )
    assert function_code_lines(source) == {"f:1": 4, "g:10": 1, "h:15": 1}


def test_no_module_docstring_is_longer_than_the_bound():
    long = {}
    for path in _library_modules():
        body = ast.parse(path.read_text()).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            lines = (body[0].end_lineno or body[0].lineno) - body[0].lineno + 1
            if lines > MAX_MODULE_DOCSTRING_LINES:
                long[str(path.relative_to(PACKAGE))] = lines
    assert not long, f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines: {long}"


def test_no_date_in_library_docstrings_or_comments():
    dated = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()[:80]}"
        for path in _library_modules()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if DATE.search(line)
    ]
    assert not dated, f"dates belong in benchmarks/README.md: {dated}"


def test_the_date_pattern_finds_dates_and_leaves_versions_and_sizes():
    found = [
        text
        for text in ["(2026-11-25, 10 explicands)", "in Nov 2026", "measured March 2025",
                     "version 2026.1", "2**20 rows", "d = 2048 - 12", "sha256"]
        if DATE.search(text)
    ]  # fmt: skip
    assert found == ["(2026-11-25, 10 explicands)", "in Nov 2026", "measured March 2025"]
