"""Hand our attributions to SHAP's and shapiq's plots.

- :func:`to_shap_explanation`: a ``shap.Explanation`` for ``shap.plots.waterfall``,
  ``bar``, ``beeswarm``, ``image`` and ``text`` (the ``shap`` extra:
  ``pip install "captum-graphshap[shap]"``);
- :func:`to_interaction_values`: a ``shapiq.InteractionValues`` of Shapley values
  and Bivariate Shapley's pair matrix for shapiq's network, SI-graph and force
  plots (the ``shapiq`` extra: ``pip install "captum-graphshap[shapiq]"``);
- :func:`per_feature_values` and :func:`pair_dependence`: the tensor functions
  behind them (no optional dependency).

``shap`` and ``shapiq`` are imported only inside the converters: importing this
module (or the package) never loads them.
"""

from .shap_explanation import per_feature_values, to_shap_explanation
from .shapiq_values import PAIR_VALUES, pair_dependence, to_interaction_values

__all__ = [
    "PAIR_VALUES",
    "pair_dependence",
    "per_feature_values",
    "to_interaction_values",
    "to_shap_explanation",
]
