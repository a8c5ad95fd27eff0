"""Scoring perturbed prompts that share a prefix: its keys and values computed once.

The perturbed prompts of a graph method (L-/C-Shapley on a line of tokens)
equal one reference sequence (every token at the baseline, or at the input)
except inside a short window, so the tokens before the window are the same
in every row, and in a causal LM so are their keys and values. For a
transformers causal LM whose cache is a ``DynamicCache`` of full-attention
layers, :func:`shared_prefix_scores` runs the reference's prefix once and
scores the rows in groups (rows sorted by where they leave the reference),
each group's forward taking only the tokens after its shortest shared
prefix, on that prefix's cache. The values are the one-pass scoring's, to
rounding; the path runs only where the tokens it saves outweigh its extra
forwards.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .model_api import cache_keyword, logits_kept, returned_cache

#: Shorter prompts are scored in one pass: their prefixes save too little.
MIN_PROMPT_TOKENS = 32
#: A forward's fixed cost in row-tokens, per device type (launches, Python, smaller
#: batches): what one more group must save to be worth its call. A 1B Llama in
#: bf16 on an H200 scored L-Shapley's prompts a little faster at 1,024 than at
#: 4,096 (1,024 and 256 prompt tokens); on the CPU small groups pay.
FORWARD_COST_TOKENS = {"cpu": 32}
DEFAULT_FORWARD_COST_TOKENS = 1024
#: Group boundaries are searched at most at this many places (rows in blocks).
MAX_BLOCKS = 64
#: Shared prefixes are cut to a multiple of 1/32 of the prompt: few distinct
#: shapes (kernels chosen per shape, cuDNN's attention plans, compiled models)
#: for a few tokens recomputed per row.
PREFIX_STEPS = 32

#: ``(outputs, target)`` -> ``(rows, T)`` log-probabilities of the answer
AnswerScores = Callable[[Any, Tensor], Tensor]


def first_differences(prompts: Tensor) -> tuple[Tensor, Tensor]:
    """The reference row (the per-position mode of ``prompts``, ``(P, L)``) and,
    per row, the first position where it differs from it (L if nowhere).

    For a graph method's coalitions the mode is the all-baseline (or all-input)
    sequence they perturb, so each row's shared prefix is as long as it gets.
    """
    reference = torch.mode(prompts, dim=0).values
    differs = prompts != reference
    first = differs.int().argmax(dim=1)
    return reference, torch.where(differs.any(dim=1), first, prompts.shape[1])


def plan_groups(
    shared: list[int], width: int, forward_cost: int, max_rows: int
) -> tuple[list[tuple[int, int]], int]:
    """Groups of consecutive rows (``shared`` sorted descending), at most
    ``max_rows`` each, and their cost in row-tokens: the fewest tokens plus
    ``forward_cost`` per forward.

    A group of rows ``[start, end)`` takes ``width - shared[end - 1]`` tokens per
    row (all after its shortest shared prefix); boundaries are searched over
    blocks of rows (at most :data:`MAX_BLOCKS`), by dynamic programming.
    """
    rows = len(shared)
    block = max(1, min(max_rows, -(-rows // MAX_BLOCKS)))
    ends = [min(rows, b * block) for b in range(1, -(-rows // block) + 1)]
    starts = [0, *ends[:-1]]
    best = [0.0] + [float("inf")] * len(ends)
    cut = [0] * (len(ends) + 1)
    for j, end in enumerate(ends, start=1):
        per_row = width - shared[end - 1]
        for i in range(j - 1, -1, -1):
            if end - starts[i] > max_rows:
                break
            cost = best[i] + (end - starts[i]) * per_row + forward_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], len(ends)
    while j:
        groups.append((starts[cut[j]], ends[j - 1]))
        j = cut[j]
    return groups[::-1], int(best[-1])


def _shareable(cache: Any) -> bool:
    """Whether ``cache`` is a ``DynamicCache`` of full-attention layers (keys and
    values per position, nothing else), so a view of its first positions
    repeated over rows is the cache those rows' prefix would give."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # transformers before the layered cache: no sharing
        return False
    return isinstance(cache, DynamicCache) and all(
        type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers
    )


def _repeated_prefix(cache: Any, length: int, rows: int) -> Any:
    """``cache``'s first ``length`` positions repeated over ``rows`` rows, as views.

    The forward appends each layer's new keys with ``torch.cat``, which copies:
    the views cost no memory, and ``cache`` itself is left as it was.
    """
    repeated = copy.copy(cache)
    repeated.layers = []
    for layer in cache.layers:
        view = copy.copy(layer)
        view.keys = layer.keys[:, :, :length].expand(rows, -1, -1, -1)
        view.values = layer.values[:, :, :length].expand(rows, -1, -1, -1)
        repeated.layers.append(view)
    return repeated


def _prefix_cache(model: nn.Module, prefix: Tensor) -> Any:
    """The key/value cache of one row, ``prefix`` (None where it cannot be shared)."""
    outputs = model.forward(
        input_ids=prefix[None],
        attention_mask=torch.ones_like(prefix[None]),
        use_cache=True,
        **logits_kept(model, 1),
    )
    cache = returned_cache(outputs)
    return cache if _shareable(cache) else None


def shared_prefix_scores(
    model: nn.Module,
    prompts: Tensor,
    target: Tensor,
    answer_scores: AnswerScores,
    max_rows: int | None = None,
) -> Tensor | None:
    """``(P, T)`` log-probabilities of the answer after each prompt, the prompts'
    shared prefix computed once; None where that saves nothing or the model's
    cache cannot be shared (then score in one pass, ``max_rows`` rows a forward).

    ``model`` is a transformers causal LM; ``prompts`` ``(P, L)`` have one length.
    Each row recomputes at least its last prompt token (its logits predict the
    answer's first). A group has at most ``max_rows`` rows (P by default) and
    its cache holds its rows' shared prefix: no more memory than one pass over
    as many rows.
    """
    count, length = prompts.shape
    steps = target.numel()
    max_rows = min(count, max_rows or count)
    if length < MIN_PROMPT_TOKENS or count < 2:
        return None
    reference, shared = first_differences(prompts)
    step = max(1, length // PREFIX_STEPS)
    shared = shared.clamp(max=length - 1) // step * step
    order = torch.argsort(shared, descending=True, stable=True)
    ordered = shared[order].tolist()
    width = length + steps
    cost = FORWARD_COST_TOKENS.get(prompts.device.type, DEFAULT_FORWARD_COST_TOKENS)
    groups, grouped = plan_groups(ordered, width, cost, max_rows)
    longest = ordered[groups[0][1] - 1]
    if grouped + longest + cost >= count * width + -(-count // max_rows) * cost:
        return None
    with torch.no_grad():
        cache = _prefix_cache(model, reference[:longest]) if longest else None
        if longest and cache is None:
            return None
        parts = [
            _group_scores(
                model, prompts[order[start:end]], target, cache, ordered[end - 1], answer_scores
            )
            for start, end in groups
        ]
    # rows back in the caller's order
    scores = torch.empty(count, steps, dtype=parts[0].dtype, device=parts[0].device)
    scores[order] = torch.cat(parts)
    return scores


def _group_scores(
    model: nn.Module,
    prompts: Tensor,
    target: Tensor,
    cache: Any,
    shared: int,
    answer_scores: AnswerScores,
) -> Tensor:
    """``(rows, T)``: ``prompts[:, shared:]`` and the answer in one forward after the
    first ``shared`` positions of ``cache`` (the rows' common prefix)."""
    rows, length = prompts.shape
    steps = target.numel()
    ids = torch.cat([prompts[:, shared:], target.expand(rows, -1)], dim=1)
    extra: dict[str, Any] = {}
    if shared:
        # positions (and cache_position) follow from the cache's length
        extra = {"use_cache": True, cache_keyword(model): _repeated_prefix(cache, shared, rows)}
    outputs = model.forward(
        input_ids=ids,
        attention_mask=torch.ones(rows, length + steps, dtype=ids.dtype, device=ids.device),
        **logits_kept(model, steps + 1),
        **extra,
    )
    return answer_scores(outputs, target)
