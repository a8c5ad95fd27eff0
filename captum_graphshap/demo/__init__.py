"""The ``graphshap demo`` application: an experiment and its report, apart from the library.

:mod:`.experiment` trains a small CNN on scikit-learn's digits and runs the
L-/C-Shapley paper's masking experiment against Captum's samplers;
:mod:`.report` prints its table and writes the HTML report; :mod:`.results`
holds the method names and the result record.
"""

from .experiment import (
    CountingModel,
    explain_digits,
    load_digits_tensors,
    make_cnn,
    run_demo,
    single_thread,
    text_section,
    train_cnn,
)
from .report import plot_curves, plot_heatmaps, write_report
from .results import (
    C_SHAPLEY_1,
    C_SHAPLEY_2,
    CAPTUM_KERNEL,
    CAPTUM_SAMPLING,
    EXACT_PATCHES,
    INSTALL_DEMO,
    L_SHAPLEY,
    METHODS,
    RANDOM,
    SENTENCES,
    DemoDependencyError,
    DemoResult,
)

__all__ = [
    "CAPTUM_KERNEL",
    "CAPTUM_SAMPLING",
    "C_SHAPLEY_1",
    "C_SHAPLEY_2",
    "EXACT_PATCHES",
    "INSTALL_DEMO",
    "L_SHAPLEY",
    "METHODS",
    "RANDOM",
    "SENTENCES",
    "CountingModel",
    "DemoDependencyError",
    "DemoResult",
    "explain_digits",
    "load_digits_tensors",
    "make_cnn",
    "plot_curves",
    "plot_heatmaps",
    "run_demo",
    "single_thread",
    "text_section",
    "train_cnn",
    "write_report",
]
