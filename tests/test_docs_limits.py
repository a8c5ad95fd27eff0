"""The limits the documentation states are the code's constants.

Every statement of a plan-size limit (``2^20``, ``2^22`` in any notation, and
``d ≤ 20`` / ``20 features``) in the README, the docs pages and the attribution
classes' docstrings is listed in ``CLAIMS`` with the constant it states. The
test fails when a listed statement is gone or states another number than its
constant (a constant changed, or the text did), and when a statement is not
listed (a new sentence must name its constant here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from captum_graphshap.engine import derivatives
from captum_graphshap.plans import limits
from captum_graphshap.uncertainty import residuals

ROOT = Path(__file__).resolve().parents[1]

FEATURES = limits.MAX_COALITIONS.bit_length() - 1  # 2^d coalitions: d features

#: (file, the statement as written up to whitespace, the value it must state)
CLAIMS = [
    ("README.md", "over all `2^d` coalitions (d ≤ 20)", FEATURES),
    ("README.md", "Up to 20 features, `ExactShapley` is exact", FEATURES),
    ("docs/guide/limits.md", "plans above 2^20 coalitions", limits.MAX_COALITIONS),
    (
        "docs/guide/limits.md",
        "2^22 for graph plans on grids and lines",
        limits.MAX_GRAPH_COALITIONS,
    ),
    ("docs/guide/captum_users.md", "over all `2^d` coalitions (d ≤ 20)", FEATURES),
    (
        "docs/guide/captum_users.md",
        "(Walsh–Hadamard, exact, d ≤ 20)",
        residuals.RESIDUALS_MAX_FEATURES,
    ),
    ("docs/architecture.md", "`MAX_COALITIONS = 2^20`", limits.MAX_COALITIONS),
    ("docs/architecture.md", "`MAX_GRAPH_COALITIONS = 2^22`", limits.MAX_GRAPH_COALITIONS),
    ("docs/architecture.md", "exact Shapley (`d ≤ 20`)", FEATURES),
    (
        "docs/architecture.md",
        "chunks of about 2^22 elements",
        derivatives.ELEMENTS_PER_CHUNK,
    ),
    ("docs/guide/exact_shapley.md", "Refused above $d = 20$", FEATURES),
    ("docs/guide/which_method.md", "| at most 20 features |", FEATURES),
    (
        "docs/guide/l_shapley.md",
        "Plans above $2^{22}$ coalitions per example on grids and lines",
        limits.MAX_GRAPH_COALITIONS,
    ),
    ("docs/guide/l_shapley.md", "above $2^{20}$ on other graphs", limits.MAX_COALITIONS),
    ("docs/guide/myerson_value.md", "refused above $2^{20}$ sets", limits.MAX_COALITIONS),
    ("docs/guide/myerson_value.md", "($2^{22}$ on a line)", limits.MAX_GRAPH_COALITIONS),
    (
        "captum_graphshap/attr/l_shapley.py",
        "plans above :math:`2^{22}` coalitions per example on grids and lines",
        limits.MAX_GRAPH_COALITIONS,
    ),
    (
        "captum_graphshap/attr/l_shapley.py",
        "above :math:`2^{20}` on other graphs",
        limits.MAX_COALITIONS,
    ),
    (
        "captum_graphshap/attr/graph_family.py",
        "``2^22`` coalitions on grids and lines",
        limits.MAX_GRAPH_COALITIONS,
    ),
    ("captum_graphshap/attr/graph_family.py", "``2^20`` on other graphs", limits.MAX_COALITIONS),
    (
        "captum_graphshap/attr/budget.py",
        "``2^22`` coalitions on grids and lines",
        limits.MAX_GRAPH_COALITIONS,
    ),
    (
        "captum_graphshap/attr/budget.py",
        "``2^20`` on graphs enumerated set by set",
        limits.MAX_COALITIONS,
    ),
    (
        "captum_graphshap/attr/shear.py",
        "more than :math:`2^{20}` coalitions",
        limits.MAX_COALITIONS,
    ),
    ("captum_graphshap/attr/exact_shapley.py", "more than 20 features", FEATURES),
    (
        "captum_graphshap/attr/exact_shapley.py",
        "(:math:`2^{20}` coalitions)",
        limits.MAX_COALITIONS,
    ),
    (
        "captum_graphshap/attr/shapley_residuals.py",
        "at most 20 features",
        residuals.RESIDUALS_MAX_FEATURES,
    ),
    (
        "captum_graphshap/attr/shapley_residuals.py",
        "refused above ``d = 20``",
        residuals.RESIDUALS_MAX_FEATURES,
    ),
]

#: A stated limit: a power of two with exponent 20 or 22, or a count of 20 features.
STATEMENT = re.compile(r"2\^\{?(2[02])\}?|\bd\s*(?:≤|<=|=)\s*\$?(20)\b|\b(20) features")

SCANNED = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
    *sorted((ROOT / "docs" / "api").glob("*.rst")),
    *sorted((ROOT / "captum_graphshap" / "attr").glob("*.py")),
]


def _text(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


def _stated(phrase: str) -> int:
    (match,) = STATEMENT.finditer(phrase)  # one number per listed statement
    power, features, count = match.groups()
    return 2 ** int(power) if power else int(features or count)


@pytest.mark.parametrize("path, phrase, value", CLAIMS, ids=[f"{p}:{s}" for p, s, _ in CLAIMS])
def test_a_stated_limit_is_the_constant(path, phrase, value):
    assert phrase in _text(ROOT / path), f"{path} no longer says {phrase!r}: update CLAIMS"
    assert _stated(phrase) == value, f"{path} says {phrase!r}, but the code's value is {value}"


@pytest.mark.parametrize("path", SCANNED, ids=[str(p.relative_to(ROOT)) for p in SCANNED])
def test_every_stated_limit_is_checked(path):
    text = _text(path)
    relative = str(path.relative_to(ROOT))
    covered = [
        (start.start(), start.start() + len(phrase))
        for file, phrase, _ in CLAIMS
        if file == relative
        for start in re.finditer(re.escape(phrase), text)
    ]
    unlisted = [
        text[max(0, m.start() - 40) : m.end() + 40]
        for m in STATEMENT.finditer(text)
        if not any(a <= m.start() and m.end() <= b for a, b in covered)
    ]
    assert not unlisted, f"{relative} states limits CLAIMS does not check: {unlisted}"
