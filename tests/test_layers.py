"""The import graph of the package points down only, function-level imports included.

Every subpackage has a layer; a module may import from its own layer or
below, and the subpackages' import graph has no cycle. The imports are read
from the source with ``ast`` (so an import hidden inside a function counts),
relative imports resolved against the importing module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

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
        ("analysis", "metrics", "viz", "interop", "text", "llm", "distributed", "wrappers"), 5
    ),
    "apps": 6,
}


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
    return found


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


def test_the_reader_finds_hidden_and_absolute_imports(tmp_path):
    root = tmp_path / "captum_graphshap"
    (root / "plans").mkdir(parents=True)
    probe = root / "plans" / "probe.py"
    probe.write_text(
        "def f():\n    from ..attr import base\n"
        "import captum_graphshap.apps.demo\nfrom captum_graphshap import uncertainty\n"
    )
    assert _imported_subpackages(probe, root) == {"attr", "apps", "uncertainty"}
