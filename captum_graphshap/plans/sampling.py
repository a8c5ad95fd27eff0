"""Where the samplers live: a name index kept for existing importers.

The sampled plans are split by idea: ``permutations.py`` (permutation
sampling and filled orderings), ``paired_designs.py`` (paired KernelSHAP),
``stratified.py`` (size-stratified distinct pairs), ``shear.py`` (SHEAR's
Eq. (14)) and ``draws.py`` (the random draws they share). New code imports
from those modules; the names below are those still imported from here.
"""

from __future__ import annotations

from .draws import distinct_ids
from .paired_designs import (
    filled_kernel_pairs,
    kernel_shapley,
    kernel_size_probabilities,
    sample_kernel_coalitions,
)
from .stratified import stratified_paired_coalitions

__all__ = [
    "distinct_ids",
    "filled_kernel_pairs",
    "kernel_shapley",
    "kernel_size_probabilities",
    "sample_kernel_coalitions",
    "stratified_paired_coalitions",
]
