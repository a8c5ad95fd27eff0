"""Text hierarchies: sentences, then words, then sub-word tokens, for the Owen value.

:func:`token_hierarchy` gives, per example, the tree over the token features
of :func:`~captum_graphshap.text.token_feature_mask`: each word's tokens form
a node, a sentence's words a node, and the sentences the root; within each
level the members are split into balanced contiguous halves, so the tree is
binary and the exact Winter value needs about ``0.67 d^2`` coalitions instead
of ``2^(words in a sentence)``. :func:`word_hierarchy` is the same over the
words of :func:`~captum_graphshap.text.word_feature_mask`. A sentence ends
at a word ending in ``.``, ``!`` or ``?``. Pure functions of a tokenizer
encoding: no model, no download.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..graphs import Hierarchy
from ..graphs.hierarchy import balanced_nested
from .words import word_feature_mask

if TYPE_CHECKING:  # pragma: no cover - typing only
    from transformers import BatchEncoding

__all__ = ["SENTENCE_ENDS", "sentences_of", "token_hierarchy", "word_hierarchy"]

#: a word ending in one of these closes its sentence
SENTENCE_ENDS = (".", "!", "?")


def sentences_of(words: Sequence[str]) -> list[list[int]]:
    """Word indices grouped into sentences (a sentence closes after a word ending in .!?)."""
    sentences: list[list[int]] = [[]]
    for index, word in enumerate(words):
        sentences[-1].append(index)
        if word.strip().endswith(SENTENCE_ENDS) and index < len(words) - 1:
            sentences.append([])
    return sentences


def nested_levels(groups: Sequence[Sequence[Any]]) -> Any:
    """Balanced halves of each group, then balanced halves of the groups."""
    return balanced_nested([balanced_nested(list(g)) for g in groups])


def word_hierarchy(encoding: BatchEncoding, texts: Sequence[str] | None = None) -> list[Hierarchy]:
    """Per example, sentences then words over the ids of :func:`word_feature_mask`."""
    _, words = word_feature_mask(encoding, texts)
    return [Hierarchy(nested_levels(sentences_of(row)), num_features=len(row)) for row in words]


def token_hierarchy(encoding: BatchEncoding, texts: Sequence[str] | None = None) -> list[Hierarchy]:
    """Per example, sentences, words, then tokens over the ids of ``token_feature_mask``."""
    _, words = word_feature_mask(encoding, texts)
    out = []
    for n, row in enumerate(words):
        tokens_of_word: dict[Any, list[int]] = {}
        count = 0
        for word, sequence in zip(encoding.word_ids(n), encoding.sequence_ids(n)):
            if word is not None:
                tokens_of_word.setdefault((sequence, word), []).append(count)
                count += 1
        per_word = list(tokens_of_word.values())  # the word order of word_feature_mask
        nested = balanced_nested(
            [nested_levels([per_word[w] for w in sentence]) for sentence in sentences_of(row)]
        )
        out.append(Hierarchy(nested, num_features=count))
    return out
