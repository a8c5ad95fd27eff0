"""Dataset-scale explanation on Ray Data (the ``[ray]`` extra).

:func:`explain_dataset` runs any attribution method of this package (or of
Captum) over a dataset on a pool of Ray actors, one per GPU or per CPU slot,
and writes Parquet shards that a rerun resumes; :func:`read_explanations`
reads them back in order. A manifest fingerprints the run (settings,
``attribute_kwargs``, version, ids, data; the actors check the explainer), so
a rerun resumes only the same run, and it verifies the shards on disk: a
damaged one is explained again, with a warning. :class:`ExplainBatch` does the same work inside a
``ray.data.Dataset`` pipeline of your own (``ds.map_batches(ExplainBatch, ...)``);
it returns batches and writes nothing, so it has no manifest or shards to check.
Importing this module needs no Ray; calling ``explain_dataset`` without it
raises an ``ImportError`` that names the extra.
"""

from .ray_runner import DatasetRun, explain_dataset, require_ray
from .ray_udf import ExplainBatch
from .shards import batch_seed, read_explanations

__all__ = [
    "DatasetRun",
    "ExplainBatch",
    "batch_seed",
    "explain_dataset",
    "read_explanations",
    "require_ray",
]
