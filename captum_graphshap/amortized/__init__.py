"""Amortized Shapley values: an explainer network trained on the engine's unbiased estimates.

:class:`AmortizedShapley` fits a network once (``fit``), then explains each
example in one forward pass (``attribute``); see docs/guide/amortized.md.
Modules: :mod:`.labels` (unbiased labels from the engine's plans),
:mod:`.potential` (the default explainer's form: Shapley values as differences
of a learnt potential, trained on the coalitions' values, ``label_estimator="potential"``),
:mod:`.coalition_rows` (the coalitions it is trained on), :mod:`.potential_training`
(its loop), :mod:`.networks` (default networks), :mod:`.training` (the loop of
the other estimators), :mod:`.objective` (FastSHAP's objective, ``"fastshap"``),
:mod:`.conformal` (intervals, spot checks), :mod:`.fitting` (the fit's
steps), :mod:`.report` (the fit report), :mod:`.explainer` (the class),
:mod:`.label_attribution` (:class:`ShapleyLabels`: the fit's labels as an
attribution method, to make them on Ray actors and pass ``fit(labels=...)``).
"""

from __future__ import annotations

from .explainer import AmortizedShapley, NotFittedError
from .label_attribution import ShapleyLabels
from .potential import ShapleyPotential
from .report import FitReport

__all__ = ["AmortizedShapley", "FitReport", "NotFittedError", "ShapleyLabels", "ShapleyPotential"]
