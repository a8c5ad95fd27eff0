"""Generative language models: Captum's ``LLMAttribution`` with batched coalitions.

:class:`LLMShapley` scores many perturbed prompts per forward pass;
:func:`prompt_graph` gives L-/C-Shapley the prompt's tokens or template
segments as a line in text order. The GPT-2 trained in-process on a task with a
known answer (tests, benchmark, tutorial) is :mod:`captum_graphshap.apps.toy_task`;
``captum_graphshap.llm.toy_task`` still reaches it for one release, with a
``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .llm_shapley import LLMBivariateResult, LLMShapley
from .prompt_graph import prompt_graph
from .prompt_hierarchy import prompt_hierarchy


def __getattr__(name: str) -> Any:
    if name == "toy_task":
        warnings.warn(
            "captum_graphshap.llm.toy_task moved to captum_graphshap.apps.toy_task; "
            "import it from there (the old name goes in the next release).",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("captum_graphshap.apps.toy_task")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LLMBivariateResult", "LLMShapley", "prompt_graph", "prompt_hierarchy"]
