"""Generative language models: Captum's ``LLMAttribution`` with batched coalitions.

:class:`LLMShapley` scores many perturbed prompts per forward pass;
:func:`prompt_graph` gives L-/C-Shapley the prompt's tokens or template
segments as a line in text order; :mod:`.toy_task` is a GPT-2 trained
in-process on a task with a known answer (tests, benchmark, tutorial).
"""

from . import toy_task
from .llm_shapley import LLMBivariateResult, LLMShapley
from .prompt_graph import prompt_graph

__all__ = ["LLMBivariateResult", "LLMShapley", "prompt_graph", "toy_task"]
