"""Explaining text classifiers word by word: word masks, token-id baselines, MiniLM.

Text is handled as integer token ids, without torchtext. A Hugging Face *fast*
tokenizer splits a sentence into sub-word tokens; :func:`word_feature_mask`
groups the tokens of each word into one feature, so every method of the
package explains words while the model still sees sub-word tokens. Absent
words take a token-id baseline (the pad or the mask token); the attention mask
travels through ``additional_forward_args``.

Special tokens ([CLS], [SEP]) and padding are not features: the model always
sees them. They carry the feature id of the neighbouring word (so the ids of
a sentence stay contiguous and the inferred graph is the line of words) and
:func:`token_baselines` gives them their own id as baseline, which keeps them
present whatever coalition is evaluated.

Modules: :mod:`.words` (masks and baselines: pure functions of a tokenizer
encoding) and :mod:`.visualize` (HTML). The offline MiniLM model and the
zero-shot sentiment application live in :mod:`captum_graphshap.apps.minilm`
(the ``text`` extra); asking this package for one of their old names says so
(the library never imports the applications).
"""

from __future__ import annotations

from typing import Any

from .hierarchy import token_hierarchy, word_hierarchy
from .hierarchy_view import node_values, plot_hierarchy, visualize_hierarchy
from .visualize import visualize_words
from .words import token_baselines, token_feature_mask, word_feature_mask

#: Names that moved to :mod:`captum_graphshap.apps.minilm`.
_MOVED_TO_APPS = frozenset(
    {
        "DEFAULT_PROTOTYPES",
        "METHODS",
        "SentimentExplanation",
        "SequenceClassifier",
        "ZeroShotSentiment",
        "explain_sentiment",
        "load_minilm",
        "minilm_path",
    }
)


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_APPS:
        raise AttributeError(
            f"captum_graphshap.text.{name} moved to captum_graphshap.apps.minilm; "
            f"import it from there: from captum_graphshap.apps.minilm import {name}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "node_values",
    "plot_hierarchy",
    "token_baselines",
    "token_feature_mask",
    "token_hierarchy",
    "visualize_hierarchy",
    "visualize_words",
    "word_feature_mask",
    "word_hierarchy",
]
