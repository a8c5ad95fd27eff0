"""The notebook tutorials are code: every ``tutorials/*.ipynb`` executes.

Each notebook runs in a fresh kernel (the test's own Python), with a temporary
directory as its working directory and ``GRAPHSHAP_OUTPUT_DIR`` pointing to
another one: a tutorial writes its files under ``OUTPUT_DIR``, which it reads
from that variable at the top (default: a new temporary directory), never
to the current directory. Notebooks are committed without outputs.

A notebook can raise its time limit with ``"graphshap": {"timeout": seconds}``
in its metadata; the default is ``DEFAULT_TIMEOUT``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
DEFAULT_TIMEOUT = 240  # seconds per cell and per notebook (2 shared CPUs)


def _read(path: Path):
    nbformat = optional("nbformat")
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    nb = _read(path)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"
    assert nb.cells and nb.cells[0].cell_type == "markdown", "a tutorial opens with its title"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    nbclient = optional("nbclient")
    optional("ipykernel")
    nb = _read(path)
    timeout = int(nb.metadata.get("graphshap", {}).get("timeout", DEFAULT_TIMEOUT))
    out = tmp_path / "out"
    out.mkdir()
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.setenv("GRAPHSHAP_OUTPUT_DIR", str(out))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend, as for a user
    # one thread per kernel: the CI machine has two cores shared with pytest itself
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    assert elapsed < timeout, f"{path.name} took {elapsed:.0f} s (limit {timeout} s)"
    assert list(work.iterdir()) == [], f"{path.name} wrote to the current directory"
    shows = any("plt.show()" in cell.source for cell in nb.cells if cell.cell_type == "code")
    images = [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert images or not shows, f"{path.name} calls plt.show() but no figure was drawn"
