"""The ``graphshap demo`` application: an experiment and its report, apart from the library.

:mod:`.experiment` trains a small CNN on scikit-learn's digits, measures the
estimators against exact Shapley values at equal cost (:mod:`.accuracy`) and
runs the L-/C-Shapley paper's masking experiment against Captum's samplers;
:mod:`.report` prints its table and writes the HTML report; :mod:`.results`
holds the method names and the result record.
"""

from .experiment import (
    explain_digits,
    load_digits_tensors,
    locality_check,
    make_cnn,
    make_local_cnn,
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
    CountingModel,
    DemoDependencyError,
    DemoResult,
    LocalityCheck,
    paired_difference,
    positive_share,
    why_ranking,
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
    "LocalityCheck",
    "explain_digits",
    "load_digits_tensors",
    "locality_check",
    "make_cnn",
    "make_local_cnn",
    "paired_difference",
    "plot_curves",
    "plot_heatmaps",
    "positive_share",
    "run_demo",
    "single_thread",
    "text_section",
    "train_cnn",
    "why_ranking",
    "write_report",
]
