"""Words over sub-word tokens: feature masks and token-id baselines (the library part).

A Hugging Face *fast* tokenizer splits a sentence into sub-word tokens;
:func:`word_feature_mask` groups the tokens of each word into one feature, so
every method of the package explains words while the model still sees
sub-word tokens. Special tokens ([CLS], [SEP]) and padding are not features:
they carry the feature id of the neighbouring word (so a sentence's ids stay
contiguous and the inferred graph is the line of words) and
:func:`token_baselines` gives them their own id as baseline, which keeps them
present whatever coalition is evaluated. Pure functions of a tokenizer
encoding: no model, no download.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover - typing only
    from transformers import BatchEncoding


def _check_encoding(encoding: Any) -> tuple[int, int]:
    """Batch size and padded length of a fast tokenizer's batch encoding."""
    if not hasattr(encoding, "word_ids") or getattr(encoding, "encodings", None) is None:
        raise TypeError(
            "encoding must be the BatchEncoding of a fast tokenizer (tokenizer(texts, "
            "padding=True, return_tensors='pt') with use_fast=True); word_ids() is needed "
            f"to group sub-word tokens, got {type(encoding).__name__}."
        )
    lengths = {len(e.ids) for e in encoding.encodings}
    if len(lengths) != 1:
        raise ValueError(
            f"encoding holds texts of different token lengths {sorted(lengths)}; "
            "tokenise the batch with padding=True so it forms an (N, L) tensor."
        )
    return len(encoding.encodings), lengths.pop()


def _group_mask(encoding: Any, units: list[list[Any]]) -> tuple[Tensor, list[list[list[int]]]]:
    """Feature ids ``(N, L)`` from per-token unit keys (None: not a feature).

    Units get ids 0, 1, ... in order of first appearance. A token without a
    unit (special token, padding) takes the id of the preceding unit, or of
    the first one before any: ids stay contiguous along the sequence, so the
    adjacency of the mask's regions is the line of units. Also returns the
    token positions of each unit.
    """
    batch, length = _check_encoding(encoding)
    mask = torch.zeros(batch, length, dtype=torch.long)
    groups: list[list[list[int]]] = []
    for n, keys in enumerate(units):
        ids: dict[Any, int] = {}
        row = [None if key is None else ids.setdefault(key, len(ids)) for key in keys]
        members: list[list[int]] = [[] for _ in ids]
        previous = next((i for i in row if i is not None), 0)
        for position, feature in enumerate(row):
            if feature is not None:
                members[feature].append(position)
                previous = feature
            mask[n, position] = previous
        groups.append(members)
    return mask, groups


def _piece(token: str, first: bool) -> str:
    """Token text without sub-word marker (WordPiece ``##``, SentencePiece ``▁``, BPE ``Ġ``)."""
    if token.startswith("##"):
        return token[2:]
    return token.lstrip("▁Ġ") if first else token


def word_feature_mask(
    encoding: BatchEncoding, texts: Sequence[str] | None = None
) -> tuple[Tensor, list[list[str]]]:
    """Group the sub-word tokens of each word into one feature.

    Args:
        encoding:
            A fast tokenizer's batch encoding (``tokenizer(texts, padding=True,
            return_tensors="pt")``); ``word_ids()`` says which word each token
            belongs to. Sentence pairs work: words are numbered across both.
        texts:
            The tokenised texts. With them the words are the exact spans of the
            text (original case); without, they are rebuilt from the tokens
            (``"un", "##bel", ...`` -> ``"unbel..."``, lower case for uncased models).

    Returns:
        feature_mask:
            ``(N, L)`` long tensor on the CPU; the tokens of word ``j`` of example
            ``n`` have id ``j`` (``0..n_words-1``). Special tokens and padding are
            not words: they carry the id of the preceding word ([CLS], or left
            padding, that of word 0), so ids are contiguous and graph methods infer
            the line of words. Use :func:`token_baselines` as the baselines to
            keep them present; with a scalar baseline they are replaced together
            with the word whose id they carry. A batch whose examples differ in
            words is a per-example mask (graph methods then need one graph per
            example).
        words:
            The words of each example, in order, ``len(words[n])`` features.
    """
    batch, _ = _check_encoding(encoding)
    if texts is not None and (isinstance(texts, str) or len(texts) != batch):
        raise ValueError(
            f"texts must be the list of the {batch} tokenised texts, one per example, "
            f"got {texts!r:.80}."
        )
    units = [
        [
            None if w is None else (q, w)
            for w, q in zip(encoding.word_ids(n), encoding.sequence_ids(n))
        ]
        for n in range(batch)
    ]
    mask, groups = _group_mask(encoding, units)
    words: list[list[str]] = []
    for n, members in enumerate(groups):
        if texts is not None:
            words.append([_span(texts[n], encoding, n, group) for group in members])
        else:
            tokens = encoding.tokens(n)
            words.append(
                ["".join(_piece(tokens[p], p == group[0]) for p in group) for group in members]
            )
    return mask, words


def _span(text: str, encoding: Any, n: int, positions: list[int]) -> str:
    """The text a word's tokens cover (from the first token's start to the last's end)."""
    spans = [span for p in positions if (span := encoding.token_to_chars(n, p)) is not None]
    if not spans:  # a word token always has a span; be safe for exotic tokenizers
        return "".join(encoding.tokens(n)[p] for p in positions)
    return text[min(s.start for s in spans) : max(s.end for s in spans)]


def token_feature_mask(encoding: BatchEncoding) -> tuple[Tensor, list[list[str]]]:
    """One feature per sub-word token (special tokens and padding excluded).

    The token-level counterpart of :func:`word_feature_mask`, with the same
    handling of special tokens and padding.

    Args:
        encoding:
            A fast tokenizer's batch encoding.

    Returns:
        feature_mask:
            ``(N, L)`` long tensor; token features numbered ``0..n_tokens-1``.
        tokens:
            The tokens of each example as the tokenizer writes them (``"##ly"``).
    """

    batch, _ = _check_encoding(encoding)
    units = [
        [None if w is None else p for p, w in enumerate(encoding.word_ids(n))] for n in range(batch)
    ]
    mask, groups = _group_mask(encoding, units)
    return mask, [[encoding.tokens(n)[g[0]] for g in members] for n, members in enumerate(groups)]


def token_baselines(encoding: BatchEncoding, token_id: int) -> Tensor:
    """Token-id baselines that replace words and keep special tokens and padding.

    Args:
        encoding:
            A fast tokenizer's batch encoding with ``input_ids``.
        token_id:
            The id absent tokens take: ``tokenizer.pad_token_id`` or
            ``tokenizer.mask_token_id``.

    Returns:
        Tensor
            ``(N, L)`` long tensor on the device of ``input_ids``: ``token_id``
            where a token belongs to a word, the input's own id at special tokens
            and padding. Used as ``baselines`` with the masks above, it keeps
            [CLS]/[SEP] in every coalition (a feature's absence then changes only
            its word's tokens).
    """
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise TypeError(f"token_id must be an int token id, got {type(token_id).__name__}.")
    batch, _ = _check_encoding(encoding)
    input_ids = torch.as_tensor(encoding["input_ids"])
    is_word = torch.tensor(
        [[w is not None for w in encoding.word_ids(n)] for n in range(batch)],
        device=input_ids.device,
    )
    return torch.where(is_word, torch.full_like(input_ids, token_id), input_ids)


# ----------------------------------------------------------------------- explaining
