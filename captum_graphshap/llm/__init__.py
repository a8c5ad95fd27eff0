"""Generative language models: Captum's ``LLMAttribution`` with batched coalitions."""

from .llm_shapley import LLMShapley

__all__ = ["LLMShapley"]
