"""Markdown tables of the benchmark scripts, and the one table of ``benchmarks/gpu.sh``.

:func:`markdown_table` writes any table as markdown; a script given ``--markdown``
(:func:`add_markdown_argument`) prints its tables that way, ready to paste into
``benchmarks/README.md``.

The GPU table (:func:`append_row`) has the columns: method, examples, rows, s,
rows/s, share of bare forward (the method's rows/s over the bare model's at its
best batch), Captum at the same evaluations (seconds), peak GiB. ``gpu.sh`` writes
the header (device, torch, date); a script run alone with ``--table PATH``
appends to PATH, writing the column header first when the file is new.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

COLUMNS = (
    "method",
    "examples",
    "rows",
    "s",
    "rows/s",
    "share of bare forward",
    "Captum at the same evaluations (s)",
    "peak GiB",
)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def append_row(path: str | None, *values: object) -> None:
    """Append one row (in :data:`COLUMNS` order) to the table at ``path``; nothing if None."""
    if not path:
        return
    table = Path(path)
    lines = []
    if not table.exists() or "| method |" not in table.read_text():
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
    cells = [_cell(v) for v in values] + ["-"] * (len(COLUMNS) - len(values))
    lines.append("| " + " | ".join(cells) + " |")
    with table.open("a") as out:
        out.write("\n".join(lines) + "\n")


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[bool] | None = None
) -> str:
    """``header`` and ``rows`` as a markdown table; columns flagged in ``numeric`` are
    right-aligned. Cells are written as :func:`_cell` writes them (floats to 3
    significant digits) unless they are strings already."""
    aligns = ["---:" if flag else "---" for flag in (numeric or [False] * len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(aligns) + " |"]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def add_markdown_argument(parser: object) -> None:
    """``--markdown`` on a script's argparse parser: print its tables as markdown."""
    parser.add_argument(  # type: ignore[attr-defined]
        "--markdown", action="store_true", help="print the tables as markdown, ready to paste"
    )
