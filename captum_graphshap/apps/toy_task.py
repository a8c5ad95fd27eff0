"""A tiny GPT-2 trained in-process on a task with a known answer, and its tokenizer.

The task: a prompt of :data:`PROMPT_LENGTH` letters with one marker ``#``; the
next token is the letter right after the marker (an induction-style copy).
The answer is determined by that letter and the marker, so a faithful token
attribution puts its mass there. No download: the model is built from
``transformers``' ``GPT2Config`` (the ``[text]`` extra); its weights after
250 steps ship with the package, so every CPU explains the same model
(:func:`trained_model`), and other step counts train in a few seconds.

Used by the tests, ``benchmarks/llm.py`` and ``tutorials/07_llm_token_attribution.ipynb``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

LETTERS = [chr(ord("a") + i) for i in range(12)]
#: id 0 is padding, id 1 the marker, then the letters
VOCAB = ["<pad>", "#", *LETTERS]
PROMPT_LENGTH = 7
MARKER = 1


class LetterTokenizer:
    """A whitespace tokenizer over a vocabulary (:data:`VOCAB` unless given) with
    Captum's ``TokenizerLike`` methods: token ``i`` of ``vocabulary`` is id ``i``.

    Example:
        >>> from captum_graphshap.apps.toy_task import LetterTokenizer
        >>> tokenizer = LetterTokenizer()
        >>> tokenizer.encode("c # h")
        [4, 1, 9]
        >>> tokenizer.decode([4, 1, 9])
        'c # h'
    """

    pad_token_id = 0

    def __init__(self, vocabulary: Sequence[str] = tuple(VOCAB)) -> None:
        self.vocabulary = tuple(vocabulary)
        self._ids = {token: i for i, token in enumerate(self.vocabulary)}

    def _id(self, token: str) -> int:
        if token not in self._ids:
            raise ValueError(f"{token!r} is not in the tokenizer's vocabulary")
        return self._ids[token]

    def encode(self, text: str, add_special_tokens: bool = True, return_tensors: Any = None) -> Any:
        ids = [self._id(token) for token in text.split()]
        return torch.tensor([ids]) if return_tensors == "pt" else ids

    def __call__(
        self,
        text: str,
        return_offsets_mapping: bool = False,
        add_special_tokens: bool = True,
        **kwargs: Any,
    ) -> dict[str, Any]:
        ids, offsets, position = [], [], 0
        for token in text.split():
            start = text.index(token, position)
            position = start + len(token)
            ids.append(self._id(token))
            offsets.append((start, position))
        encoding: dict[str, Any] = {"input_ids": ids}
        if return_offsets_mapping:
            encoding["offset_mapping"] = offsets
        return encoding

    def decode(self, token_ids: Any) -> str:
        ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else token_ids
        ids = [ids] if isinstance(ids, int) else ids
        return " ".join(self.vocabulary[i] for i in ids)

    def convert_ids_to_tokens(self, token_ids: Any) -> Any:
        if isinstance(token_ids, int):
            return self.vocabulary[token_ids]
        return [self.vocabulary[i] for i in token_ids]

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._id(tokens)
        return [self._id(t) for t in tokens]


def make_batch(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts ``(size, PROMPT_LENGTH)`` of letter ids with one marker, and the answers."""
    letters = torch.randint(2, len(VOCAB), (size, PROMPT_LENGTH), generator=generator)
    marker = torch.randint(0, PROMPT_LENGTH - 1, (size,), generator=generator)
    rows = torch.arange(size)
    letters[rows, marker] = MARKER
    answers = letters[rows, marker + 1]
    return letters, answers


class Prompt(NamedTuple):
    """One prompt of the task: its text, the answer, and where the answer is decided."""

    text: str
    answer: str
    #: position of the letter after the marker (the answer's source)
    answer_position: int
    #: position of the marker
    marker_position: int


def prompts(count: int, seed: int = 7) -> Iterator[Prompt]:
    """``count`` prompts of the task, reproducible from ``seed``.

    Example:
        >>> from captum_graphshap.apps.toy_task import prompts
        >>> p = next(prompts(1))
        >>> p.text.split()[p.marker_position], p.text.split()[p.answer_position] == p.answer
        ('#', True)
    """
    ids, answers = make_batch(count, torch.Generator().manual_seed(seed))
    for row, answer in zip(ids.tolist(), answers.tolist()):
        marker = row.index(MARKER)
        yield Prompt(" ".join(VOCAB[i] for i in row), VOCAB[answer], marker + 1, marker)


#: The weights of :func:`trained_model` after :data:`SHIPPED_STEPS` steps, shipped
#: with the package: training rounds differently on different CPUs, and a test
#: or figure that reads a trained model must read the same model everywhere.
SHIPPED_WEIGHTS = Path(__file__).with_name("toy_task_gpt2.safetensors")
SHIPPED_STEPS = 250


@functools.lru_cache(maxsize=4)
def trained_model(steps: int = SHIPPED_STEPS) -> torch.nn.Module:
    """A 2-layer GPT-2 that solves the task (250 steps reach 100% accuracy), in eval mode.

    At :data:`SHIPPED_STEPS` steps the shipped weights (:data:`SHIPPED_WEIGHTS`)
    are loaded, so every machine explains the same model; other step counts
    train in-process, on one CPU thread (sums over several threads round
    differently): :func:`save_trained_weights` wrote the shipped file so.
    """
    if steps == SHIPPED_STEPS and SHIPPED_WEIGHTS.exists():
        from safetensors.torch import load_file

        model: Any = _untrained()  # a GPT2LMHeadModel (transformers is optional)
        missing, unexpected = model.load_state_dict(load_file(SHIPPED_WEIGHTS), strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head is tied to wte
            raise RuntimeError(f"{SHIPPED_WEIGHTS.name} does not fit the model: {missing}")
        model.tie_weights()
        return model.eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(steps)
    finally:
        torch.set_num_threads(threads)


def save_trained_weights(path: Path = SHIPPED_WEIGHTS, steps: int = SHIPPED_STEPS) -> None:
    """Train for ``steps`` on one thread and write the weights to ``path`` (safetensors)."""
    from safetensors.torch import save_file

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _train(steps)
    finally:
        torch.set_num_threads(threads)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(path), metadata={"steps": str(steps)})


def _untrained() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(VOCAB),
        n_positions=PROMPT_LENGTH + 4,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return GPT2LMHeadModel(config)


def _train(steps: int) -> torch.nn.Module:
    model = _untrained()
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch, answers = make_batch(128, generator)
        logits = model(input_ids=batch).logits[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, answers)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.eval()


def accuracy(model: torch.nn.Module, size: int = 512) -> float:
    """Share of held-out prompts whose next-token prediction is the answer."""
    batch, answers = make_batch(size, torch.Generator().manual_seed(123))
    with torch.no_grad():
        predicted = model(input_ids=batch).logits[:, -1].argmax(dim=1)
    return float((predicted == answers).float().mean())
