"""The hierarchy of a prompt's features: sentences, words and tokens in text order.

For :class:`~captum.attr.TextTokenInput` the features are the prompt's
tokens; words are read from the tokenizer's markers (``Ġ``/``▁``/a leading
space starts a word in BPE and SentencePiece, ``##`` continues one in
WordPiece) and a sentence closes after a token ending in ``.``, ``!`` or
``?``. For :class:`~captum.attr.TextTemplateInput` the features are the
segments, split into balanced halves in the order they appear in the
formatted prompt (:func:`~captum_graphshap.llm.prompt_graph.segment_order`).
Pass the result as ``hierarchy=`` to :class:`~captum_graphshap.OwenValue`
inside :class:`~captum_graphshap.llm.LLMShapley` or Captum's
``LLMAttribution``.
"""

from __future__ import annotations

from typing import Any

from captum.attr import TextTemplateInput, TextTokenInput

from ..graphs import Hierarchy
from ..graphs.hierarchy import balanced_nested
from ..text.hierarchy import SENTENCE_ENDS, nested_levels
from .prompt_graph import segment_order

__all__ = ["prompt_hierarchy"]

_WORD_STARTS = ("Ġ", "▁", " ")


def prompt_hierarchy(inp: Any) -> Hierarchy:
    """A :class:`~captum_graphshap.Hierarchy` over the interpretable features of ``inp``.

    Example:
        >>> from captum.attr import TextTemplateInput
        >>> from captum_graphshap.llm import prompt_hierarchy
        >>> prompt_hierarchy(TextTemplateInput("{1} lives in {0} with {2}", ["P", "A", "B"])).leaves
        (1, 0, 2)
    """
    if isinstance(inp, TextTokenInput):
        return Hierarchy(token_nested(list(inp.values)), num_features=int(inp.n_itp_features))
    if not isinstance(inp, TextTemplateInput):
        raise TypeError(
            f"prompt_hierarchy takes a TextTokenInput or TextTemplateInput, got "
            f"{type(inp).__name__}; pass hierarchy= yourself for other inputs."
        )
    order = list(dict.fromkeys(segment_order(inp)))
    missing = [i for i in range(int(inp.n_itp_features)) if i not in order]
    return Hierarchy(balanced_nested(order + missing), num_features=int(inp.n_itp_features))


def token_nested(tokens: list[str]) -> Any:
    """Nested token positions: sentences, then words, then tokens (balanced halves)."""
    wordpiece = any(t.startswith("##") for t in tokens)
    sentences: list[list[list[int]]] = [[]]
    for position, token in enumerate(tokens):
        starts_word = not token.startswith("##") if wordpiece else token.startswith(_WORD_STARTS)
        if not sentences[-1] or (starts_word and sentences[-1][-1]):
            sentences[-1].append([])
        sentences[-1][-1].append(position)
        if (
            token.strip("".join(_WORD_STARTS)).endswith(SENTENCE_ENDS)
            and position < len(tokens) - 1
        ):
            sentences.append([])
    return balanced_nested([nested_levels(words) for words in sentences if words])
