"""Random tiny transformers causal LMs over ``toy_task``'s vocabulary, for the LLM tests.

Seeded, in eval mode; two layers. Callers import transformers (or skip)
before building one.
"""

from __future__ import annotations

import torch

from captum_graphshap.apps import toy_task


def tiny_llama(
    width: int = 16, max_positions: int = 64, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A Llama decoder: 4 heads over 2 key/value heads, an MLP twice as wide."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(toy_task.VOCAB),
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


def tiny_gpt2(
    width: int = 16, heads: int = 2, max_positions: int = 64, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A GPT-2 decoder."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(toy_task.VOCAB),
        n_embd=width,
        n_layer=2,
        n_head=heads,
        n_positions=max_positions,
    )
    return transformers.GPT2LMHeadModel(config).to(dtype).eval()
