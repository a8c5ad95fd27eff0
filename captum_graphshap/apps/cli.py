"""``graphshap``: the command line. ``graphshap demo`` runs :mod:`captum_graphshap.apps.demo`.

Nothing heavy is imported before the arguments are parsed: ``graphshap --help``
answers without loading torch (the package's names are imported lazily).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

#: The demo's install hint (``captum_graphshap.apps.demo.INSTALL_DEMO``, which imports torch).
INSTALL_DEMO = 'pip install "captum-graphshap[demo]"'


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphshap`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _run_demo(args)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphshap",
        description="Shapley-value attributions for structured data (captum-graphshap).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_demo_arguments(
        commands.add_parser(
            "demo",
            help="explain a CNN on digits with L-/C-Shapley and Captum; write an HTML report",
            description=(
                "Train a small CNN on scikit-learn's 8x8 digits (a few seconds), measure "
                "PairedKernelShap, ShapleySampling and Captum's KernelShap and "
                "ShapleyValueSampling against exact Shapley values at equal evaluations, explain "
                "held-out digits with C-Shapley (pixel grid, k=2 and k=1), L-Shapley (2x2 "
                "patches), exact Shapley (4x4 patches) and Captum's ShapleyValueSampling and "
                "KernelShap at C-Shapley k=1's number of model evaluations, score each with "
                "the L-/C-Shapley paper's masking experiment (lower log-odds after masking = "
                "better), and write an HTML report with heatmaps and masking curves. With the "
                "'text' extra, also explains two sentences word by word. About 30 s of CPU "
                "time (it prints its wall time at the end; more on a busy machine). "
                f"Needs scikit-learn: {INSTALL_DEMO}."
            ),
        )
    )
    return parser


def _version() -> str:
    """The installed distribution's version, else the package's (a source tree on the path)."""
    from importlib import metadata

    try:
        return metadata.version("captum-graphshap")
    except metadata.PackageNotFoundError:
        from .. import __version__

        return __version__


def _add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("graphshap-report"),
        help="folder for report.html and its figures (default: ./graphshap-report)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: fewer epochs, 4 digits, no text section (seconds)",
    )
    demo.add_argument("--no-text", action="store_true", help="skip the text section")
    demo.add_argument(
        "--context",
        choices=("baseline", "input"),
        default="baseline",
        help="L-/C-Shapley: pixels outside a neighbourhood take the baseline (default, the "
        "paper's equations) or keep their input values (the authors' code)",
    )
    demo.add_argument(
        "--weights",
        choices=("myerson", "paper"),
        default="myerson",
        help="C-Shapley weights (default: myerson; paper = Eq. (6) literally)",
    )


def _run_demo(args: argparse.Namespace) -> int:
    import matplotlib

    from . import demo as demo_module
    from .demo import DemoDependencyError

    # The demo only writes files; never open a window.
    matplotlib.use("Agg")
    try:
        demo_module.run_demo(
            args.out,
            args.seed,
            quick=args.quick,
            text=not args.no_text,
            context=args.context,
            weights=args.weights,
        )
    except DemoDependencyError as error:
        print(f"graphshap: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
