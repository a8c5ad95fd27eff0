"""The one markdown table of ``benchmarks/gpu.sh``: rows appended by each script.

Columns: method, examples, rows, s, rows/s, share of bare forward (the
method's rows/s over the bare model's at its best batch), Captum at the same
evaluations (seconds), peak GiB. ``gpu.sh`` writes the header (device, torch,
date); a script run alone with ``--table PATH`` appends to PATH, writing the
column header first when the file is new.
"""

from __future__ import annotations

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
