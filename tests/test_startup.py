"""What a process pays before the first result: imports and first-call costs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from captum_graphshap.apps import cli, demo


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_help_answers_without_importing_torch():
    report = _run(
        """
        import contextlib, io, json, sys
        from captum_graphshap.apps.cli import main
        texts = {}
        for argv in (["--help"], ["demo", "--help"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    main(argv)
                except SystemExit as stop:
                    assert stop.code == 0, stop.code
            texts[" ".join(argv)] = out.getvalue()
        heavy = sorted(m for m in ("torch", "numpy", "captum", "matplotlib") if m in sys.modules)
        print(json.dumps({"heavy": heavy, "texts": texts}))
        """
    )
    assert report["heavy"] == []
    assert "demo" in report["texts"]["--help"]
    assert "--quick" in report["texts"]["demo --help"]
    assert "masking" in report["texts"]["demo --help"]


def test_import_is_lazy_and_names_resolve():
    report = _run(
        """
        import json, sys
        import captum_graphshap as cg
        before = "torch" in sys.modules
        names = {name: getattr(cg, name).__name__ for name in cg.__all__}
        print(json.dumps({"before": before, "after": "torch" in sys.modules, "names": names,
                          "dir": sorted(set(cg.__all__) - set(dir(cg)))}))
        """
    )
    assert report["before"] is False and report["after"] is True
    assert report["names"] == {name: name for name in report["names"]}
    assert report["dir"] == []


def test_dir_lists_the_public_names_and_subpackages_only():
    report = _run(
        """
        import json, sys
        import captum_graphshap as cg
        print(json.dumps({"dir": dir(cg), "torch": "torch" in sys.modules}))
        """
    )
    import captum_graphshap as cg

    listed = set(report["dir"])
    assert set(cg.__all__) <= listed and "__version__" in listed
    assert {"attr", "engine", "graphs", "metrics", "text", "viz", "llm"} <= listed
    assert not listed & {"Any", "TYPE_CHECKING", "annotations", "importlib", "game", "_compat"}
    import importlib.util

    others = listed - set(cg.__all__) - {"__version__"}
    assert all(importlib.util.find_spec(f"captum_graphshap.{name}") for name in others)
    assert report["torch"] is False  # dir() imports nothing heavy


def test_cli_install_hint_is_the_demo_one():
    assert cli.INSTALL_DEMO == demo.INSTALL_DEMO


def test_first_shear_call_is_quiet_and_loads_no_compiler():
    # torch.func.jvp's first call scripts decompositions with the deprecated
    # torch.jit.script (a FutureWarning and ~2 s); torch.func transforms import
    # torch._dynamo. Shear needs neither.
    report = _run(
        """
        import json, sys, warnings
        import torch
        from captum_graphshap import Shear
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        x = torch.randn(3, 6)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            phi = Shear(model).attribute(
                x, target=1, n_samples=8, generator=torch.Generator().manual_seed(0)
            )
        loaded = [m for m in ("torch._dynamo", "torch._decomp.decompositions_for_jvp")
                  if m in sys.modules]
        print(json.dumps({"warnings": [str(w.message) for w in caught], "loaded": loaded,
                          "shape": list(phi.shape)}))
        """
    )
    assert report["shape"] == [3, 6]
    assert report["loaded"] == []
    assert not [w for w in report["warnings"] if "jit" in w], report["warnings"]
