"""The test matrix: the core of the suite on every Python from 3.10 to 3.13 found here,
and on the newest torch whose torchvision pair is on PyPI.

    pip install nox && nox -l          # the sessions, and which interpreters were found
    nox -s "core-3.12"                 # one Python
    nox -s newest-torch                # Python 3.12, torch 2.15.0, torchvision 0.29.2

CI stays the README's command (``.ci/run``, Python 3.11, torch 2.14.1 with every
extra); this matrix is run by hand. An interpreter is found as ``pythonX.Y`` on
PATH or under ``~/.pyenv/versions/X.Y.*``; nox skips a session whose Python is
missing. ``docs/guide/install.md`` states what each session last measured.

"The core of the suite": every test file except those that need the ``docs`` or
``ray`` extras or a GPU (the notebooks, the documentation build, the Ray runner,
``test_cuda.py``), with the ``dev``, ``image``, ``shap``, ``shapiq`` and ``text``
extras installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import nox

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: The pinned pair of the README and CI.
TORCH_PINNED = ("torch==2.14.1", "torchvision==0.29.1")
#: The newest torch on PyPI (``pip index versions torch``: 2.15.0, which needs Python
#: 3.11+) with the newest torchvision, 0.29.2: a build for the same CUDA 13.2 that
#: declares ``torch>=2.14.0``, imports and runs its operators with torch 2.15.
TORCH_NEWEST = ("torch==2.15.0", "torchvision==0.29.2")
NEWEST_PYTHON = "3.12"
EXTRAS = "dev,image,shap,shapiq,text"
#: Files left out of the core run (they need [docs], [ray] or a GPU, or execute
#: every notebook: minutes each).
NOT_CORE = (
    "tests/test_notebooks.py",
    "tests/test_docs_build.py",
    "tests/test_distributed.py",
    "tests/test_ray_attempts.py",
    "tests/test_cuda.py",
)

nox.options.reuse_existing_virtualenvs = True


def interpreter(version: str) -> str:
    """A path to Python ``version`` (X.Y) on this machine, or the bare version for nox
    to look for (and skip when it is missing)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = os.path.expanduser(os.environ.get("PYENV_ROOT", "~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python"), reverse=True)
    for candidate in candidates:
        # a pyenv shim exists for every installed version but runs only the selected ones
        if candidate and _runs(candidate):
            return candidate
    return version


def _runs(path: str) -> bool:
    try:
        return subprocess.run([path, "--version"], capture_output=True).returncode == 0
    except OSError:
        return False


def _core(session: nox.Session, torch: tuple[str, ...], *, uncapped: bool = False) -> None:
    if uncapped:
        # this project's machines cap torch at the release on disk in a pip config file
        session.env["PIP_CONFIG_FILE"] = os.devnull
    session.install(*torch, "-e", f".[{EXTRAS}]")
    session.run("python", "-c", "import sys, torch; print(sys.version, torch.__version__)")
    ignored = [f"--ignore={path}" for path in NOT_CORE]
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *ignored,
                *session.posargs)  # fmt: skip


for _version in PYTHONS:

    @nox.session(name=f"core-{_version}", python=interpreter(_version))
    def core(session: nox.Session) -> None:
        """The core of the suite on this Python with the README's torch pair."""
        _core(session, TORCH_PINNED)


@nox.session(name="newest-torch", python=interpreter(NEWEST_PYTHON))
def newest_torch(session: nox.Session) -> None:
    """The core of the suite on the newest torch on PyPI."""
    _core(session, TORCH_NEWEST, uncapped=True)
