"""Captum's ``visualize_text`` works on our attributions, and the extras bring what it needs.

``captum.attr.visualization.visualize_text`` asserts that IPython imports; the
``[text]`` and ``[viz]`` extras must install it, and the table it draws from
our attributions must be the one ``visualize_words`` returns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from captum_graphshap import ExactShapley

from .optional_deps import optional

ROOT = Path(__file__).resolve().parents[1]


def test_the_text_and_viz_extras_install_ipython():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra in ("text", "viz"):
        names = {re.split(r"[<>=!~ \[]", dep)[0].lower() for dep in extras[extra]}
        assert "ipython" in names, f"the [{extra}] extra must install IPython for visualize_text"


def test_visualize_text_runs_on_our_attributions():
    optional("IPython")  # in the [text], [viz] and [dev] extras: missing fails in CI
    from captum.attr import visualization

    from captum_graphshap.text import visualize_words

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    words = ["a", "dull", "clumsy", "film"]
    phi = ExactShapley(model).attribute(torch.randn(1, 4), baselines=0.0, target=1)[0]
    record = visualization.VisualizationDataRecord(
        phi / phi.abs().max(),
        0.75,
        "negative",
        "negative",
        "negative",
        float(phi.sum()),
        words,
        None,
    )
    shown = visualization.visualize_text([record])  # raised AssertionError without IPython
    html = str(shown.data)
    for word in words:
        assert f"{word} " in html or f"{word}<" in html
    # the strongest word is drawn in full colour: our values reached Captum's colour scale
    strongest = int(phi.abs().argmax())
    full = "hsl(120, 75%, 50%)" if float(phi[strongest]) > 0 else "hsl(0, 75%, 60%)"
    assert full in html
    assert html == visualize_words(
        words, phi, "negative", 0.75, true_label="negative", attribution_label="negative"
    )
