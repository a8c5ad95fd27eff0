"""Uncertainty of Shapley explanations: residuals, intervals, Bayesian posteriors.

Pure tensor maths, no model in sight; the attribution classes
(:class:`~captum_graphshap.attr.ShapleyResiduals`,
:class:`~captum_graphshap.attr.bayes_shap.BayesShap`, and the
``return_uncertainty`` option of L-/C-Shapley) are thin adapters over it.
"""

from .bayes import BayesPosterior, BayesShapReport, fit_posterior, run_bayes_shap
from .intervals import (
    check_confidence,
    interval_over_references,
    moderated_half_width,
    moderated_variance,
    normal_quantile,
    student_t_quantile,
)
from .local_residuals import neighbourhood_games_plan
from .residuals import (
    hypercube_edges,
    inessential_games,
    residual_norms,
    residual_vectors,
    walsh_hadamard,
)

__all__ = [
    "BayesPosterior",
    "BayesShapReport",
    "check_confidence",
    "fit_posterior",
    "hypercube_edges",
    "inessential_games",
    "interval_over_references",
    "moderated_half_width",
    "moderated_variance",
    "neighbourhood_games_plan",
    "normal_quantile",
    "residual_norms",
    "residual_vectors",
    "run_bayes_shap",
    "student_t_quantile",
    "walsh_hadamard",
]
