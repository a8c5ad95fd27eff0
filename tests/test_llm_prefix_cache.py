"""The shared-prefix path of LLMShapley: the prompts' common prefix computed once.

For a transformers causal LM, the perturbed prompts of a chunk share the
reference row's first tokens; their key/value cache is computed once and the
rows are scored in groups after it. The attributions must be the one-pass
path's (``LLMShapley.share_prompt_prefix = False``) to rounding, on Llama and
GPT-2, token by token or in one pass, for graph methods (long shared
prefixes) and for random coalitions (little sharing), with no warning.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import pytest
import torch
from captum.attr import TextTokenInput

import captum_graphshap as cg
from captum_graphshap.apps import toy_task
from captum_graphshap.llm import LLMShapley
from captum_graphshap.llm import prefix_cache as pc
from captum_graphshap.llm.model_api import cache_keyword

from .tiny_lms import tiny_gpt2, tiny_llama

pytest.importorskip("transformers")

LETTERS = toy_task.VOCAB[2:]
#: 40 letters: long enough for the path (at least MIN_PROMPT_TOKENS)
PROMPT = " ".join(LETTERS[(7 * i + 3) % len(LETTERS)] for i in range(40))
ANSWER = "h a b"


#: wider than test_llm_cache's, with room for PROMPT
llama = functools.partial(tiny_llama, width=32, max_positions=128)
gpt2 = functools.partial(tiny_gpt2, width=32, heads=4, max_positions=128)
MODELS = {"llama": llama, "gpt2": gpt2}


def recorded_forwards(model: torch.nn.Module) -> list[tuple[int, int, int]]:
    """Record, per forward: its rows, the length of the cache it was given (0
    without one) and its new tokens. :func:`unrecorded` undoes it."""
    calls: list[tuple[int, int, int]] = []
    forward, keyword = model.forward, cache_keyword(model)

    @functools.wraps(forward)
    def recorded(*args, **kwargs):
        cache = kwargs.get(keyword)
        rows, width = kwargs["input_ids"].shape
        calls.append((rows, 0 if cache is None else cache.get_seq_length(), width))
        return forward(*args, **kwargs)

    model.forward = recorded  # type: ignore[method-assign]
    return calls


def unrecorded(model: torch.nn.Module) -> None:
    model.forward = type(model).forward.__get__(model)  # type: ignore[method-assign]


def cache_lengths(calls: list[tuple[int, int, int]]) -> list[int]:
    return [past for _, past, _ in calls]


def attribute(model, method, share: bool, **options):
    """LLMShapley's attribution of ANSWER after PROMPT with the path on or off,
    checked to raise no warning; and the cache lengths of its forwards."""
    tokenizer = toy_task.LetterTokenizer()
    explainer = LLMShapley(method(model), tokenizer)
    explainer.share_prompt_prefix = share
    calls = recorded_forwards(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = explainer.attribute(TextTokenInput(PROMPT, tokenizer), target=ANSWER, **options)
    unrecorded(model)
    return result, cache_lengths(calls)


def assert_same(ours, plain, atol: float) -> None:
    torch.testing.assert_close(ours.seq_attr, plain.seq_attr, atol=atol, rtol=0)
    torch.testing.assert_close(ours.token_attr, plain.token_attr, atol=atol, rtol=0)


@pytest.mark.parametrize("forward_in_tokens", [True, False])
@pytest.mark.parametrize("name", list(MODELS))
def test_lshapley_on_the_shared_prefix_equals_the_one_pass_path(name, forward_in_tokens):
    model = MODELS[name]()
    options = dict(k=1, forward_in_tokens=forward_in_tokens)
    plain, plain_lengths = attribute(model, cg.LShapley, share=False, **options)
    ours, lengths = attribute(model, cg.LShapley, share=True, **options)
    assert_same(ours, plain, atol=1e-5)
    assert not any(plain_lengths)  # off: every prompt scored in full
    assert any(lengths)  # on: groups scored after a shared prefix's cache


def test_float64_llama_agrees_to_double_rounding():
    model = llama(dtype=torch.float64)
    plain, _ = attribute(model, cg.LShapley, share=False, k=1)
    ours, lengths = attribute(model, cg.LShapley, share=True, k=1)
    assert any(lengths)
    assert_same(ours, plain, atol=1e-10)


@pytest.fixture
def blockwise(monkeypatch) -> list[int]:
    """Cheap blocks (16 tokens, so that short calls and small parts take the
    blockwise path), and a list that grows by one per blockwise call."""
    monkeypatch.setattr(pc, "BLOCK_COST_TOKENS", {"cpu": 16})
    calls: list[int] = []
    monkeypatch.setattr(
        pc,
        "prefix_class_scores",
        lambda *args, _run=pc.prefix_class_scores: calls.append(1) or _run(*args),
    )
    return calls


@pytest.mark.parametrize(
    ("forward_in_tokens", "cheap_blocks"), [(True, False), (True, True), (False, True)]
)
@pytest.mark.parametrize("name", list(MODELS))
def test_random_coalitions_equal_the_one_pass_path(name, forward_in_tokens, cheap_blocks, request):
    """LLMShapley(ShapleySampling) end to end: with little sharing in calls of 16
    rows (the costs as shipped), and through the blockwise path (cheap blocks,
    so that these short calls take it), token by token or in one pass."""
    blocks = request.getfixturevalue("blockwise") if cheap_blocks else None
    model = MODELS[name]()
    plain, ours = (
        attribute(
            model,
            cg.ShapleySampling,
            share=share,
            n_samples=3 if cheap_blocks else 2,
            perturbations_per_eval=None if cheap_blocks else 16,
            forward_in_tokens=forward_in_tokens,
            generator=torch.Generator().manual_seed(2 if cheap_blocks else 0),
        )[0]
        for share in (False, True)
    )
    assert blocks is None or blocks
    assert_same(ours, plain, atol=1e-5)


def test_without_use_cached_outputs_every_prompt_is_scored_in_full():
    model = llama()
    _, lengths = attribute(model, cg.LShapley, share=True, k=1, use_cached_outputs=False)
    assert lengths and not any(lengths)


def scores(model, prompts: torch.Tensor, share: bool) -> torch.Tensor:
    explainer = LLMShapley(cg.LShapley(model), toy_task.LetterTokenizer())
    explainer.share_prompt_prefix = share
    target = torch.tensor([3, 4, 5])
    return explainer._score_in_one_pass(prompts, target, share_prefix=True)


@pytest.mark.parametrize("name", list(MODELS))
def test_identical_rows_recompute_their_last_prompt_token(name):
    model = MODELS[name]()
    prompts = torch.randint(2, len(toy_task.VOCAB), (1, 48)).expand(6, -1).clone()
    calls = recorded_forwards(model)
    ours = scores(model, prompts, share=True)
    unrecorded(model)
    assert max(cache_lengths(calls)) == 47  # the prefix is every prompt token but the last
    torch.testing.assert_close(ours, scores(model, prompts, share=False), atol=1e-5, rtol=0)


def nested_prompts(length: int, orderings: int, seed: int) -> torch.Tensor:
    """A permutation sampler's rows: per ordering, the input's first j tokens in that
    order, the rest at the baseline 0, for j = 0 .. length."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, len(toy_task.VOCAB), (length,), generator=generator)
    rows = []
    for _ in range(orderings):
        rank = torch.argsort(torch.randperm(length, generator=generator))
        rows += [torch.where(rank < j, tokens, 0) for j in range(length + 1)]
    return torch.stack(rows)


@pytest.mark.parametrize("max_rows", [None, 30])
@pytest.mark.parametrize("name", list(MODELS))
def test_nested_coalitions_take_the_blockwise_path_and_equal_one_pass(name, max_rows, blockwise):
    """A permutation sampler's rows share prefixes among themselves, not with one
    reference: computed block by block, once per distinct prefix (in parts of at
    most ``max_rows`` rows), with the one-pass values, in the rows' order. (A
    block costs 16 tokens here, so that small parts take the path too.)"""
    model = MODELS[name]()
    prompts = nested_prompts(64, 2, seed=3)
    prompts = prompts[torch.randperm(prompts.shape[0], generator=torch.Generator().manual_seed(0))]
    target = torch.tensor([3, 4, 5])
    calls = recorded_forwards(model)
    with torch.no_grad():
        ours = pc.shared_prefix_scores(
            model,
            prompts,
            target,
            LLMShapley(cg.LShapley(model), None)._answer_scores,
            max_rows=max_rows,
        )
    unrecorded(model)
    assert ours is not None and blockwise
    assert len(calls) > 2 and any(past for _, past, _ in calls)  # several blocks on caches
    if max_rows is None:  # one part: about half the one-pass tokens
        computed = sum(rows * width for rows, _, width in calls)
        assert computed < 0.75 * prompts.shape[0] * (64 + 3)
    else:
        assert max(rows for rows, _, _ in calls) <= max_rows
    torch.testing.assert_close(ours, scores(model, prompts, share=False), atol=1e-5, rtol=0)


def test_block_plans_cost_what_they_compute():
    """plan_blocks' cost is each block's tokens once per distinct prefix ending there
    plus the block cost; its ends rise to the prompt's length; without shared
    prefixes one block is cheapest."""
    prompts = nested_prompts(40, 3, seed=5)
    distinct, inverse, common = pc.prefix_classes(prompts)
    assert torch.equal(distinct[inverse], prompts)
    ends, cost = pc.plan_blocks(common.tolist(), 40, 4, 50)
    assert ends[-1] == 40 and all(a < b for a, b in itertools.pairwise(ends))
    assert all(end % 4 == 0 for end in ends)
    expected, start = 0, 0
    for end in ends:
        prefixes = torch.unique(distinct[:, :end], dim=0).shape[0]
        expected += prefixes * (end - start) + 50
        start = end
    assert cost == expected
    assert cost < distinct.shape[0] * 40 + 50
    different = torch.arange(6)[:, None].expand(-1, 40).clone()  # differ at the first token
    _, _, common = pc.prefix_classes(different)
    assert pc.plan_blocks(common.tolist(), 40, 4, 50) == ([40], 6 * 40 + 50)


def test_rows_are_scattered_back_in_their_order():
    model = llama()
    generator = torch.Generator().manual_seed(1)
    prompts = torch.zeros(12, 40, dtype=torch.long)
    for row, start in enumerate(torch.randperm(36, generator=generator)[:12].tolist()):
        window = torch.randint(2, len(toy_task.VOCAB), (3,), generator=generator)
        prompts[row, start : start + 3] = window
    torch.testing.assert_close(
        scores(model, prompts, share=True), scores(model, prompts, share=False), atol=1e-5, rtol=0
    )


def test_short_prompts_and_single_rows_take_the_one_pass_path():
    model = llama()
    target = torch.tensor([3, 4])
    answer = lambda outputs, target: outputs  # noqa: E731 - never called
    short = torch.zeros(4, pc.MIN_PROMPT_TOKENS - 1, dtype=torch.long)
    assert pc.shared_prefix_scores(model, short, target, answer) is None
    single = torch.zeros(1, 64, dtype=torch.long)
    assert pc.shared_prefix_scores(model, single, target, answer) is None


def test_first_differences_from_the_mode():
    prompts = torch.tensor([[0, 0, 0, 0], [0, 5, 0, 0], [0, 0, 0, 6], [0, 0, 0, 0]])
    reference, first = pc.first_differences(prompts)
    assert reference.tolist() == [0, 0, 0, 0]
    assert first.tolist() == [4, 1, 3, 4]


def test_groups_cover_the_rows_in_order_and_cost_no_more_than_one_group():
    shared = sorted(torch.randint(0, 100, (200,)).tolist(), reverse=True)
    groups, cost = pc.plan_groups(shared, 108, 32, max_rows=200)
    assert groups[0][0] == 0 and groups[-1][1] == 200
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    assert cost == sum((e - s) * (108 - shared[e - 1]) + 32 for s, e in groups)
    assert cost <= 200 * (108 - shared[-1]) + 32
    # no sharing: one group, or as few as max_rows allows
    assert pc.plan_groups([0] * 10, 50, 32, max_rows=10) == ([(0, 10)], 10 * 50 + 32)
    assert pc.plan_groups([0] * 10, 50, 32, max_rows=4)[0] == [(0, 4), (4, 8), (8, 10)]


def test_groups_keep_to_the_rows_of_a_one_pass_forward(monkeypatch):
    """A call takes SHARED_PREFIX_ROWS times the rows; no forward more than one
    pass would take (TOKENS_PER_CALL // L rows), with the path on or off."""
    from captum_graphshap.llm import llm_shapley

    monkeypatch.setattr(llm_shapley, "TOKENS_PER_CALL", 40 * 6)  # 6 rows of 40 tokens
    model, tokenizer = llama(), toy_task.LetterTokenizer()
    results, rows = {}, {}
    for share in (False, True):
        explainer = LLMShapley(cg.LShapley(model), tokenizer)
        explainer.share_prompt_prefix = share
        calls = recorded_forwards(model)
        results[share] = explainer.attribute(TextTokenInput(PROMPT, tokenizer), target=ANSWER, k=1)
        unrecorded(model)
        rows[share] = [(r, width) for r, _, width in calls]
    assert max(r for r, _ in rows[False]) == max(r for r, _ in rows[True]) == 6
    tokens = {share: sum(r * n for r, n in calls) for share, calls in rows.items()}
    assert tokens[True] < 0.75 * tokens[False]
    assert_same(results[True], results[False], atol=1e-5)


def test_out_of_memory_halves_the_forwards_of_a_shared_prefix_call():
    """attribute gives such calls several forwards' rows, so halving the call would
    not shrink its forwards: out of memory halves the forwards themselves, and the
    attributions are those of a call that never ran out."""
    model = llama()
    expected, _ = attribute(model, cg.LShapley, share=True, k=1)
    forward, sizes = model.forward, []

    @functools.wraps(forward)
    def small_batches_only(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if rows > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        sizes.append(rows)
        return forward(*args, **kwargs)

    model.forward = small_batches_only  # type: ignore[method-assign]
    tokenizer = toy_task.LetterTokenizer()
    with pytest.warns(RuntimeWarning, match="rows per forward"):
        result = LLMShapley(cg.LShapley(model), tokenizer).attribute(
            TextTokenInput(PROMPT, tokenizer), target=ANSWER, k=1
        )
    assert_same(result, expected, atol=1e-5)
    assert sizes and max(sizes) <= 3
