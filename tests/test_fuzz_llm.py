"""A fuzzing harness for LLM attribution: random prompts, answers and models against
brute force.

Each example draws a random tiny causal LM (Llama or GPT-2, random weights), a
prompt (token prompts with skipped tokens, or templates whose values and
baselines are random strings, removal included, so perturbed prompts change
length), an answer of 1-3 tokens, a prompt long enough for the shared-prefix
path or not, the path on or off, and scoring token by token or in one pass.
``LLMShapley(ExactShapley)`` (and ``PairedKernelShap`` with a budget that
covers every coalition) must equal the Shapley values computed here from
scratch: every coalition's prompt formatted as Captum does, tokenised, and
the answer's log-probabilities read off one plain forward each.
``GRAPHSHAP_FUZZ_EXAMPLES=N`` runs N random examples instead of the
derandomised few.
"""

from __future__ import annotations

import itertools
import warnings
from unittest import mock

import numpy as np
import pytest
import torch
from captum.attr import TextTemplateInput, TextTokenInput
from hypothesis import assume, given
from hypothesis import strategies as st

import captum_graphshap as cg
from captum_graphshap.apps import toy_task
from captum_graphshap.llm import LLMShapley, prefix_cache, prompt_graph

from .reference import brute_l_shapley, brute_shapley
from .test_bivariate import brute_bivariate
from .test_fuzz import FUZZ
from .test_owen_value import brute_winter, random_nested
from .tiny_lms import tiny_gpt2, tiny_llama

pytest.importorskip("transformers")


LETTERS = toy_task.VOCAB[2:]
#: the context the random models are built with (the prompts stay within it)
POSITIONS = 96


def letters(draw, low: int, high: int) -> list[str]:
    return draw(st.lists(st.sampled_from(LETTERS), min_size=low, max_size=high))


def model_of(arch: str, seed: int) -> torch.nn.Module:
    build = tiny_llama if arch == "llama" else tiny_gpt2
    model = build(width=16, max_positions=POSITIONS)
    torch.manual_seed(seed)
    with torch.no_grad():  # a model of its own: logits far from uniform
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    return model


def answer_log_probs(model: torch.nn.Module, prompts: list[list[int]], answer: list[int]):
    """``(rows, len(answer))``: log p(answer token j | prompt, answer tokens before j)."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()
        steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(answer)].log_softmax(-1)
        out.append(steps[torch.arange(len(answer)), torch.tensor(answer)])
    return torch.stack(out)


def column_game(values: torch.Tensor, column: int):
    """The game of one column of ``values`` ``(2^d, T)`` (bit i: feature i)."""
    return lambda s: float(values[sum(1 << i for i in s), column])


def brute_force_shapley(values: torch.Tensor, d: int) -> torch.Tensor:
    """``(d, T)`` Shapley values of the games ``values`` ``(2^d, T)``."""
    return as_table([brute_shapley(column_game(values, c), d) for c in range(values.shape[1])])


@st.composite
def prompts(draw):
    """A Captum input, the token ids of each coalition's prompt (bit i: feature i), d,
    and the feature of each attribution Captum returns (a template's values)."""
    tokenizer = toy_task.LetterTokenizer()
    long = draw(st.booleans())  # past MIN_PROMPT_TOKENS (32): the shared-prefix path
    d = draw(st.integers(1, 5))
    if draw(st.booleans()):  # tokens: skipped filler and d attributed tokens
        filler, attributed = LETTERS[:6], LETTERS[6:]
        body = letters(draw, 34, 40) if long else letters(draw, 0, 4)
        body = [filler[LETTERS.index(t) % 6] for t in body]
        chosen = [draw(st.sampled_from(attributed)) for _ in range(d)]
        for token in chosen:  # in long prompts late, mostly: a long shared prefix
            start = len(body) // 2 if long and draw(st.booleans()) else 0
            body.insert(draw(st.integers(start, len(body))), token)
        text = " ".join(body)
        baseline = draw(st.sampled_from([0, 3]))  # pad, or a filler letter's id
        inp = TextTokenInput(text, tokenizer, baselines=baseline, skip_tokens=filler)
        ids = tokenizer.encode(text)
        where = [k for k, t in enumerate(body) if t not in filler]
        rows = []
        for coalition in range(1 << d):
            row = list(ids)
            for feature, position in enumerate(where):
                if not coalition >> feature & 1:
                    row[position] = baseline
            rows.append(row)
        return inp, rows, d, list(range(d))
    # n values in a random order in the template, grouped into d features by a mask
    # with arbitrary labels (Captum numbers the distinct labels in set order)
    n = draw(st.integers(d, d + 2))
    values = [" ".join(letters(draw, 1, 3)) for _ in range(n)]
    removal = draw(st.booleans())
    baselines = None if removal else [" ".join(letters(draw, 1, 4)) for _ in range(n)]
    labels = draw(st.lists(st.integers(0, 50), min_size=d, max_size=d, unique=True))
    mask = labels + [draw(st.sampled_from(labels)) for _ in range(n - d)]
    mask = draw(st.permutations(mask))
    feature = {label: i for i, label in enumerate(set(mask))}
    order = draw(st.permutations(range(n)))
    gaps = [" ".join(letters(draw, 0, 8 if long else 2)) for _ in range(n + 1)]
    slots = itertools.zip_longest(gaps, [f"{{{i}}}" for i in order])
    template = " ".join(part for pair in slots for part in pair if part)
    grouped = n > d or draw(st.booleans())
    inp = TextTemplateInput(template, values, baselines=baselines, mask=mask if grouped else None)
    if not grouped:
        feature, mask = {i: i for i in range(n)}, list(range(n))
    rows = []
    for coalition in range(1 << d):
        chosen = [
            values[i]
            if coalition >> feature[mask[i]] & 1
            else ("" if baselines is None else baselines[i])
            for i in range(n)
        ]
        rows.append(tokenizer.encode(template.format(*chosen)))
    assume(all(rows))  # LLMShapley refuses a prompt that can be empty (tested elsewhere)
    # Captum gives each value its feature's attribution
    return inp, rows, d, [feature[label] for label in mask]


@FUZZ
@given(
    case=prompts(),
    data=st.data(),
    arch=st.sampled_from(["llama", "gpt2"]),
    seed=st.integers(0, 2**16),
    share=st.booleans(),
    forward_in_tokens=st.booleans(),
    costs=st.sampled_from(["shipped", "cheap groups", "cheap blocks"]),
)
def test_llm_shapley_equals_brute_force_on_random_prompts(
    case, data, arch, seed, share, forward_in_tokens, costs
):
    # the shared-prefix paths run where they save tokens: cheap forwards or blocks
    # take them on these short prompts too
    forward_cost = {"cpu": 1 if costs == "cheap groups" else 32}
    block_cost = {"cpu": 1 if costs == "cheap blocks" else 512}
    with (
        mock.patch.dict(prefix_cache.FORWARD_COST_TOKENS, forward_cost),
        mock.patch.dict(prefix_cache.BLOCK_COST_TOKENS, block_cost),
    ):
        check_against_brute_force(case, data, arch, seed, share, forward_in_tokens)


def check_against_brute_force(case, data, arch, seed, share, forward_in_tokens) -> None:
    inp, rows, d, spread = case
    tokenizer = toy_task.LetterTokenizer()
    answer = tokenizer.encode(" ".join(letters(data.draw, 1, 3)))
    model = model_of(arch, seed)
    values = answer_log_probs(model, rows, answer)  # (2^d, T)
    method = data.draw(
        st.sampled_from(["exact", "kernel", "owen", "lshapley", "sampling", "bivariate"])
    )
    attribution, options, expected = expectation(method, model, inp, values, d, data)
    explainer = LLMShapley(attribution, tokenizer)
    explainer.share_prompt_prefix = share
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = explainer.attribute(
            inp,
            target=torch.tensor(answer),
            forward_in_tokens=forward_in_tokens,
            **options,
        )
    if method == "sampling":  # efficient: the sum is the full prompt's against the empty
        gap = values[-1].sum() - values[0].sum()
        first = [spread.index(f) for f in range(d)]  # a value per feature: its column
        total = result.seq_attr.double().reshape(-1)[first].sum()
        torch.testing.assert_close(total, gap, rtol=1e-4, atol=5e-4)
        return
    if method == "bivariate":  # the redundancy matrices too, per value on both axes
        pairs = bivariate_tables(values, d)[:, spread][:, :, spread]  # (1 + T, n, n)
        torch.testing.assert_close(result.seq_interactions.double(), pairs[0], rtol=1e-4, atol=5e-4)
        torch.testing.assert_close(
            result.token_interactions.double(), pairs[1:], rtol=1e-4, atol=2e-4
        )
    expected = expected[spread]
    if result.token_attr is not None:  # KernelShap's kind gets none (Captum's rule)
        torch.testing.assert_close(result.token_attr.double(), expected.T, rtol=1e-4, atol=2e-4)
    else:
        assert method == "kernel"
    torch.testing.assert_close(result.seq_attr.double(), expected.sum(1), rtol=1e-4, atol=5e-4)


def expectation(method: str, model, inp, values: torch.Tensor, d: int, data):
    """The attribution method, its options and its values ``(d, T)`` by brute force."""

    def game(column: int):
        return column_game(values, column)

    columns = range(values.shape[1])
    if method == "exact":
        return cg.ExactShapley(model), {}, brute_force_shapley(values, d)
    if method == "bivariate":
        return cg.BivariateShapley(model), {}, brute_force_shapley(values, d)
    if method == "kernel":  # a budget that covers every coalition: exact too
        options = {"budget": max(2, 1 << d)}
        return cg.PairedKernelShap(model), options, brute_force_shapley(values, d)
    if method == "sampling":
        generator = torch.Generator().manual_seed(data.draw(st.integers(0, 99)))
        options = {"budget": data.draw(st.integers(d + 1, 40)), "generator": generator}
        return cg.ShapleySampling(model), options, None
    if method == "owen":  # a random hierarchy over the features
        nested = random_nested(list(range(d)), np.random.default_rng(data.draw(st.integers(0, 99))))
        expected = [brute_winter(nested, game(c), d) for c in columns]
        hierarchy = cg.Hierarchy(nested, num_features=d)
        return cg.OwenValue(model), {"hierarchy": hierarchy}, as_table(expected)
    k, context = data.draw(st.integers(1, 2)), data.draw(st.sampled_from(["baseline", "input"]))
    graph = prompt_graph(inp).to_networkx()
    expected = [brute_l_shapley(game(c), graph, k, context) for c in columns]
    return cg.LShapley(model), {"k": k, "context": context}, as_table(expected)


def bivariate_tables(values: torch.Tensor, d: int) -> torch.Tensor:
    """``(1 + T, d, d)``: Masoomi et al.'s matrix (Eq. 6) of the sequence's game (the
    answer's log-probability) and of each answer token's."""
    games = torch.cat([values.sum(1, keepdim=True), values], dim=1)  # (2^d, 1 + T)
    columns = range(games.shape[1])
    return torch.stack([brute_bivariate(column_game(games, c), d) for c in columns])


def as_table(per_column: list[list[float]]) -> torch.Tensor:
    """``(d, T)`` from one list of ``d`` values per answer token."""
    return torch.tensor(per_column, dtype=torch.float64).T


@FUZZ
@given(case=prompts(), data=st.data(), slack=st.integers(-3, 2))
def test_a_prompt_past_the_context_is_refused_before_any_model_call(case, data, slack):
    # the longest perturbed prompt may mix a value longer than its baseline with a
    # baseline longer than its value: longer than the full prompt and the all-baseline
    # one (a GPT-2 failed mid-run on positions past its table, a Llama scored them)
    inp, rows, _, _ = case
    tokenizer = toy_task.LetterTokenizer()
    answer = tokenizer.encode(" ".join(letters(data.draw, 1, 2)))
    longest = max(len(row) for row in rows) + len(answer)
    limit = max(2, longest + slack)
    model = tiny_gpt2(width=8, max_positions=limit)
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    explainer = LLMShapley(cg.ExactShapley(model), tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if longest <= limit:
            explainer.attribute(inp, target=torch.tensor(answer))
            return
        with pytest.raises(ValueError, match="more than the model's context"):
            explainer.attribute(inp, target=torch.tensor(answer))
    assert not calls


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_a_mixed_prompt_past_the_context_is_refused(build):
    # the fuzzer's find: full and all-baseline prompts of 11 tokens, the first value
    # with the second baseline 20; a GPT-2 of 16 positions failed mid-run with an
    # IndexError, a Llama scored the prompt past its context
    long = " ".join(["c"] * 10)
    inp = TextTemplateInput("{} {}", [long, "d"], baselines=["e", long])
    model = build(width=16, max_positions=16)
    explainer = LLMShapley(cg.ExactShapley(model), toy_task.LetterTokenizer())
    with pytest.raises(ValueError, match="the longest perturbed prompt has 20 tokens"):
        explainer.attribute(inp, target=torch.tensor([5]))
