"""What a language model's forward takes and returns, across transformers releases.

transformers 5 renamed the key/value cache argument and output field from
``past_key_values`` to ``cache`` (the old name warns, on every call, that it is
removed in 5.40); older releases and Captum's own test models know only
``past_key_values``. These helpers ask the model's signature which name it
takes, so :class:`~captum_graphshap.llm.LLMShapley` passes the current one
where it exists and the old one only where it does not, and read the cache
back under either name without touching the deprecated attribute.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import nn


def _parameters(model: nn.Module) -> Mapping[str, inspect.Parameter]:
    try:  # deprecate_kwarg wraps with functools.wraps: the signature is the model's own
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin forward
        return {}


def cache_keyword(model: nn.Module) -> str:
    """``"cache"`` where the forward takes it (transformers 5), else ``"past_key_values"``."""
    return "cache" if "cache" in _parameters(model) else "past_key_values"


def logits_kept(model: nn.Module, positions: int) -> dict[str, int]:
    """The keyword that makes the model compute logits for the last ``positions`` only.

    Logits over a 32,000-token vocabulary at every prompt position are most of
    a long prompt's memory; transformers' causal LMs take ``logits_to_keep``
    (``num_logits_to_keep`` in 4.45-4.49). Empty for models without either.
    """
    parameters = _parameters(model)
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in parameters:
            return {name: positions}
    return {}


def returned_cache(outputs: Any) -> Any:
    """The key/value cache a forward returned (None when it returned none).

    transformers' outputs are mappings holding ``cache`` (5) or
    ``past_key_values`` (4); any other object is read by attribute.
    """
    if isinstance(outputs, Mapping):
        for name in ("cache", "past_key_values"):
            if outputs.get(name) is not None:
                return outputs[name]
        return None
    return getattr(outputs, "past_key_values", None)


def is_causal_cache(cache: Any) -> bool:
    """Whether ``cache`` is a transformers ``Cache``: its model masks appended tokens causally.

    Only then may several answer tokens be fed after the prompt's cache in one
    forward; any other cache (Captum's test model keeps embeddings and runs a
    non-causal encoder over them) is stepped one token at a time.
    """
    return any(
        cls.__name__ == "Cache" and cls.__module__.startswith("transformers")
        for cls in type(cache).__mro__
    )


def is_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` is one of transformers' causal language models (its class
    registered for ``AutoModelForCausalLM``): each position sees only those
    before it, so one forward over prompt and answer gives every answer token's
    logits exactly as feeding the answer token by token would (teacher forcing)."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:  # transformers is an optional extra
        return False
    return type(model).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def context_length(model: nn.Module) -> int | None:
    """The most positions the model's configuration allows (None when it names none)."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
