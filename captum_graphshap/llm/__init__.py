"""Generative language models: Captum's ``LLMAttribution`` with batched coalitions.

:class:`LLMShapley` scores many perturbed prompts per forward pass;
:func:`prompt_graph` gives L-/C-Shapley the prompt's tokens or template
segments as a line in text order. The GPT-2 trained in-process on a task with a
known answer (tests, benchmark, tutorial) is :mod:`captum_graphshap.apps.toy_task`.
"""

from __future__ import annotations

from .llm_shapley import LLMBivariateResult, LLMShapley
from .prompt_graph import prompt_graph
from .prompt_hierarchy import prompt_hierarchy

__all__ = ["LLMBivariateResult", "LLMShapley", "prompt_graph", "prompt_hierarchy"]
