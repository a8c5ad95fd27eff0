"""Scoring perturbed prompts that share a prefix: its keys and values computed once.

The perturbed prompts of a graph method (L-/C-Shapley on a line of tokens)
equal one reference sequence (every token at the baseline, or at the input)
except inside a short window, so the tokens before the window are the same
in every row, and in a causal LM so are their keys and values. For a
transformers causal LM whose cache is a ``DynamicCache`` of full-attention
layers, :func:`shared_prefix_scores` runs the reference's prefix once and
scores the rows in groups (rows sorted by where they leave the reference),
each group's forward taking only the tokens after its shortest shared
prefix, on that prefix's cache.

Rows that leave the reference early but share prefixes among themselves (a
permutation sampler's nested coalitions: of the rows of one ordering, only
``p + 1`` differ in their first ``p`` tokens) take the blockwise path
instead, :func:`prefix_class_scores`: the prompt is cut in blocks, and each
block is computed once per distinct prefix ending there, on the cache of
the prefix it extends. That computes about half the one-pass tokens for
such rows. Each call takes whichever path costs fewer tokens; the values
are the one-pass scoring's, to rounding, and a path runs only where the
tokens it saves outweigh its extra forwards.
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
#: The same for a block of :func:`prefix_class_scores`, whose forward also takes a
#: gathered cache and extends it. On the CPU (8.5M Llama, 256-token prompts,
#: a permutation sampler's rows) 256-1,024 gave the fastest calls (15.6 s, against
#: 21.6 s at 32 and 16.8 s at 4,096); off the CPU not measured: four forwards' cost.
BLOCK_COST_TOKENS = {"cpu": 512}
DEFAULT_BLOCK_COST_TOKENS = 4 * DEFAULT_FORWARD_COST_TOKENS
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


def prefix_classes(prompts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct rows of ``prompts`` ``(P, L)`` in lexicographic order ``(U, L)``,
    where each row sits among them ``(P,)``, and the common prefix length of each
    two neighbours ``(U - 1,)``.

    Rows sharing their first ``e`` tokens are neighbours in that order, so
    there are ``1 + #{lcp < e}`` distinct prefixes of length ``e``.
    """
    distinct, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    differs = distinct[1:] != distinct[:-1]
    common = torch.where(differs.any(dim=1), differs.int().argmax(dim=1), prompts.shape[1])
    return distinct, inverse, common


def plan_blocks(
    common: list[int], length: int, step: int, forward_cost: int
) -> tuple[list[int], int]:
    """Block ends (the last is ``length``) for :func:`prefix_class_scores` and their
    cost in prompt row-tokens: each block's tokens once per distinct prefix
    ending there, plus ``forward_cost`` per block (one forward each).

    ``common``: the neighbours' common prefix lengths (:func:`prefix_classes`)
    of one forward's rows. Ends are multiples of ``step`` (few distinct
    shapes), chosen by dynamic programming.
    """
    counts = [0] * (length + 2)
    for value in common:
        counts[min(value, length) + 1] += 1
    below = 1  # distinct prefixes of length e: 1 + #{common < e}
    classes = []
    for e in range(length + 1):
        below += counts[e]
        classes.append(below)
    ends = [0, *sorted({*range(step, length, step), length})]
    best, cut = [0] * len(ends), [0] * len(ends)
    for j in range(1, len(ends)):
        best[j], cut[j] = min(
            (best[i] + classes[ends[j]] * (ends[j] - ends[i]) + forward_cost, i) for i in range(j)
        )
    chosen, j = [], len(ends) - 1
    while j:
        chosen.append(ends[j])
        j = cut[j]
    return chosen[::-1], best[-1]


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


def _gathered(cache: Any, rows: Tensor) -> Any:
    """``cache`` with its rows ``rows`` (copies; ``cache`` itself left as it was)."""
    taken = copy.copy(cache)
    taken.layers = []
    for layer in cache.layers:
        view = copy.copy(layer)
        view.keys = layer.keys.index_select(0, rows)
        view.values = layer.values.index_select(0, rows)
        taken.layers.append(view)
    return taken


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
    one_pass = count * width + -(-count // max_rows) * cost
    distinct, inverse, common = prefix_classes(prompts)
    class_parts = _class_parts(distinct.shape[0], max_rows)
    block_cost = BLOCK_COST_TOKENS.get(prompts.device.type, DEFAULT_BLOCK_COST_TOKENS)
    blocks = [
        plan_blocks(common[start : end - 1].tolist(), length, step, block_cost)
        for start, end in class_parts
    ]
    # the answer's tokens come with the last block, once per distinct row
    blockwise = sum(c for _, c in blocks) + distinct.shape[0] * steps
    if blockwise < min(grouped + longest + cost, one_pass):
        scores = prefix_class_scores(
            model, distinct, common, class_parts, [b for b, _ in blocks], target, answer_scores
        )
        return None if scores is None else scores[inverse]
    if grouped + longest + cost >= one_pass:
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


def _class_parts(rows: int, max_rows: int) -> list[tuple[int, int]]:
    """Consecutive ranges of the sorted distinct rows, at most ``max_rows`` each."""
    return [(start, min(rows, start + max_rows)) for start in range(0, rows, max_rows)]


def prefix_class_scores(
    model: nn.Module,
    distinct: Tensor,
    common: Tensor,
    parts: list[tuple[int, int]],
    ends: list[list[int]],
    target: Tensor,
    answer_scores: AnswerScores,
) -> Tensor | None:
    """``(U, T)`` answer log-probabilities after the distinct rows ``distinct``
    (sorted, with their neighbours' common prefix lengths ``common``:
    :func:`prefix_classes`), computed block by block within each part.

    Block ``[s, e)`` runs once per distinct prefix of length ``e`` (the first
    row of each in the sorted order stands for it), on the cache of the
    prefix of length ``s`` it extends, gathered from the block before; the
    last block ends with the answer, for every row. None where the model's
    cache cannot be shared (then score in one pass).
    """
    steps = target.numel()
    length = distinct.shape[1]
    scores = []
    with torch.no_grad():
        for (first, last), part_ends in zip(parts, ends):
            rows, shared = distinct[first:last], common[first : last - 1]
            cache, start = None, 0
            # each row's prefix among the last block's leaders (none before the first)
            previous = torch.zeros(rows.shape[0], dtype=torch.long, device=rows.device)
            for end in part_ends:
                new = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
                new[1:] = shared < end  # the first row of each prefix of length `end`
                leaders = new.nonzero()[:, 0]
                ids = rows[leaders, start:end]
                if end == length:
                    ids = torch.cat([ids, target.expand(ids.shape[0], -1)], dim=1)
                extra: dict[str, Any] = {"use_cache": True}
                if cache is not None:
                    extra[cache_keyword(model)] = _gathered(cache, previous[leaders])
                outputs = model.forward(
                    input_ids=ids,
                    attention_mask=torch.ones(
                        ids.shape[0], start + ids.shape[1], dtype=ids.dtype, device=ids.device
                    ),
                    **logits_kept(model, steps + 1 if end == length else 1),
                    **extra,
                )
                if end == length:
                    scores.append(answer_scores(outputs, target))
                    break
                cache = returned_cache(outputs)
                if not _shareable(cache):
                    return None
                previous = new.long().cumsum(0) - 1
                start = end
    return torch.cat(scores)
