"""LLMShapley on transformers' current cache API: Llama and GPT-2, no deprecation warning.

The cached token-by-token path feeds the prompt once and the answer's first
T - 1 tokens in one more forward after the prompt's key/value cache; its
values must equal Captum's uncached scoring (each answer token from a
forward over the prompt and the answer before it). A prompt past the model's
context is refused before any model call; running out of memory halves the
chunk and keeps the rows already scored.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from captum.attr import LLMAttribution, ShapleyValues, TextTokenInput

import captum_graphshap as cg
from captum_graphshap.apps import toy_task
from captum_graphshap.llm import LLMShapley
from captum_graphshap.llm.model_api import cache_keyword, is_causal_lm, returned_cache

from .tiny_lms import tiny_gpt2, tiny_llama

pytest.importorskip("transformers")

PROMPT = "c # h a d"
ANSWER = "h a b"


MODELS = {"llama": tiny_llama, "gpt2": tiny_gpt2}


def spy(model: torch.nn.Module, calls: list[dict]) -> None:
    """Record each forward's keyword arguments (and input shape) on ``model``."""
    forward = model.forward

    @functools.wraps(forward)
    def recorded(*args, **kwargs):
        calls.append({k: (tuple(v.shape) if torch.is_tensor(v) else v) for k, v in kwargs.items()})
        return forward(*args, **kwargs)

    model.forward = recorded  # type: ignore[method-assign]


def scored_against_captum(model: torch.nn.Module) -> list[dict]:
    """LLMShapley's default scoring of the prompt, checked against Captum's uncached
    token-by-token values with no deprecation warning; returns the forwards' keywords."""
    tokenizer = toy_task.LetterTokenizer()
    inp = TextTokenInput(PROMPT, tokenizer)
    reference = LLMAttribution(ShapleyValues(model), tokenizer).attribute(
        inp, target=ANSWER, forward_in_tokens=True, use_cached_outputs=False
    )
    calls: list[dict] = []
    spy(model, calls)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(inp, target=ANSWER)
    deprecations = [
        w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))
    ]
    assert not deprecations, [str(w.message) for w in deprecations]
    torch.testing.assert_close(ours.token_attr, reference.token_attr, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.seq_attr, reference.seq_attr, atol=1e-5, rtol=1e-4)
    return calls


@pytest.mark.parametrize("name", list(MODELS))
def test_cached_scoring_equals_captums_uncached_values_without_deprecation_warnings(name):
    model = MODELS[name]()
    calls = scored_against_captum(model)
    # a transformers causal LM: one forward per chunk over prompt and answer, logits
    # at the T + 1 positions that predict the answer, no cache
    assert is_causal_lm(model)
    keyword = cache_keyword(model)
    assert calls and all(c["logits_to_keep"] == 4 and keyword not in c for c in calls)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_prompt_cache_path_equals_captums_uncached_values(name):
    model = MODELS[name]()
    model.__class__ = type("Unregistered", (type(model),), {})  # not in the causal-LM list
    assert not is_causal_lm(model)
    calls = scored_against_captum(model)
    # the current keyword ("cache" from transformers 5.2x, "past_key_values" before),
    # never the deprecated one; two forwards per chunk: the prompts (logits at the
    # last position only) and the answer's first two tokens
    keyword = cache_keyword(model)
    if keyword == "cache":
        assert all("past_key_values" not in call for call in calls)
    prompt_calls = [c for c in calls if keyword not in c]
    answer_calls = [c for c in calls if keyword in c]
    assert len(prompt_calls) == len(answer_calls) >= 1
    assert all(c["logits_to_keep"] == 1 for c in prompt_calls)
    assert all(c["input_ids"][1] == 2 for c in answer_calls)  # T - 1 = 2 answer tokens


@pytest.mark.parametrize("name", list(MODELS))
def test_one_pass_and_uncached_scoring_keep_only_the_logits_they_read(name):
    model, tokenizer = MODELS[name](), toy_task.LetterTokenizer()
    inp = TextTokenInput(PROMPT, tokenizer)
    reference = LLMAttribution(ShapleyValues(model), tokenizer).attribute(
        inp, target=ANSWER, forward_in_tokens=False
    )
    calls: list[dict] = []
    spy(model, calls)
    ours = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(
        inp, target=ANSWER, forward_in_tokens=False
    )
    torch.testing.assert_close(ours.token_attr, reference.token_attr, atol=1e-5, rtol=1e-4)
    assert calls and all(c["logits_to_keep"] == 4 for c in calls)  # T + 1


def test_the_cache_is_read_under_either_name():
    model = tiny_llama()
    ids = torch.tensor([[1, 2, 3]])
    outputs = model(input_ids=ids, use_cache=True)
    assert returned_cache(outputs) is outputs[cache_keyword(model)]
    legacy = type("Legacy", (), {"past_key_values": "kv"})()
    assert returned_cache(legacy) == "kv"
    assert returned_cache(type("Bare", (), {})()) is None


@pytest.mark.parametrize("name", list(MODELS))
def test_a_prompt_past_the_context_is_refused_before_any_model_call(name):
    model, tokenizer = MODELS[name](max_positions=8), toy_task.LetterTokenizer()
    calls: list[dict] = []
    spy(model, calls)
    explainer = LLMShapley(cg.LShapley(model), tokenizer)
    long_prompt = TextTokenInput("c # h a d c # h a d", tokenizer)  # 10 tokens
    with pytest.raises(
        ValueError, match="prompt has 10 tokens, more than the model's context of 8"
    ):
        explainer.attribute(long_prompt, target="h", k=1)
    # 6 prompt tokens fit; with a 3-token answer they do not
    with pytest.raises(ValueError, match=r"6 tokens and the answer's 3.*context of 8"):
        explainer.attribute(TextTokenInput("c # h a d c", tokenizer), target=ANSWER, k=1)
    assert calls == []
    explainer.attribute(TextTokenInput("c # h a d", tokenizer), target="h a", k=1)  # 5 + 2 fit
    assert calls


@pytest.mark.parametrize("name", list(MODELS))
def test_generation_past_the_context_is_refused_before_generate(name):
    """Without target the answer is generated: prompt plus max_new_tokens past the
    context is refused before generate runs (GPT-2 died inside it with an IndexError)."""
    model, tokenizer = MODELS[name](max_positions=16), toy_task.LetterTokenizer()
    calls: list[dict] = []
    spy(model, calls)
    explainer = LLMShapley(cg.LShapley(model), tokenizer)
    prompt = TextTokenInput("c # h a d c # h a d c # h a", tokenizer)  # 14 tokens
    for gen_args in ({"max_new_tokens": 5}, None):  # None: Captum's default, 25 tokens
        with pytest.raises(ValueError, match=r"14 tokens and the answer's .*at most 2 here"):
            explainer.attribute(prompt, gen_args=gen_args, k=1)
    with pytest.raises(ValueError, match=r"14 tokens and the answer's 6"):
        explainer.attribute(prompt, gen_args={"max_length": 20}, k=1)
    assert calls == []
    result = explainer.attribute(prompt, gen_args={"max_new_tokens": 2, "do_sample": False}, k=1)
    assert calls and result.token_attr.shape[1] == 14


def test_out_of_memory_halves_the_chunk_and_keeps_the_scored_rows():
    model, tokenizer = tiny_llama(), toy_task.LetterTokenizer()
    inp = TextTokenInput(PROMPT, tokenizer)
    expected = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(
        inp, target=ANSWER, perturbations_per_eval=32
    )
    forward, scored = model.forward, []

    @functools.wraps(forward)
    def small_batches_only(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if rows > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        if cache_keyword(model) not in kwargs:
            scored.append(rows)
        return forward(*args, **kwargs)

    model.forward = small_batches_only  # type: ignore[method-assign]
    with pytest.warns(RuntimeWarning, match="out of memory"):
        result = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(
            inp, target=ANSWER, perturbations_per_eval=32
        )
    torch.testing.assert_close(result.token_attr, expected.token_attr, atol=1e-6, rtol=1e-5)
    # every coalition of the 5 tokens scored once: no finished row was evaluated again
    assert sum(scored) == 2**5
