"""A tiny GPT-2 trained in-process on a task with a known answer, and its tokenizer.

The task: a prompt of letters with one marker ``#``; the next token is the
letter right after the marker. The answer is determined by that one letter
(and the marker's position), so an attribution should put its mass there.
No download: the model is built from ``transformers``' config and trained for
a few seconds on CPU.
"""

from __future__ import annotations

import functools

import torch

LETTERS = [chr(ord("a") + i) for i in range(12)]
VOCAB = ["<pad>", "#", *LETTERS]
PROMPT_LENGTH = 7


class LetterTokenizer:
    """A whitespace tokenizer over :data:`VOCAB` with Captum's ``TokenizerLike`` methods."""

    pad_token_id = 0

    def encode(self, text, add_special_tokens=True, return_tensors=None):
        ids = [VOCAB.index(token) for token in text.split()]
        return torch.tensor([ids]) if return_tensors == "pt" else ids

    def __call__(self, text, return_offsets_mapping=False, add_special_tokens=True, **kwargs):
        ids, offsets, position = [], [], 0
        for token in text.split():
            start = text.index(token, position)
            position = start + len(token)
            ids.append(VOCAB.index(token))
            offsets.append((start, position))
        encoding = {"input_ids": ids}
        if return_offsets_mapping:
            encoding["offset_mapping"] = offsets
        return encoding

    def decode(self, token_ids):
        ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else token_ids
        ids = [ids] if isinstance(ids, int) else ids
        return " ".join(VOCAB[i] for i in ids)

    def convert_ids_to_tokens(self, token_ids):
        if isinstance(token_ids, int):
            return VOCAB[token_ids]
        return [VOCAB[i] for i in token_ids]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return VOCAB.index(tokens)
        return [VOCAB.index(t) for t in tokens]


def make_batch(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts ``(size, PROMPT_LENGTH)`` of letter ids with one marker, and the answers."""
    letters = torch.randint(2, len(VOCAB), (size, PROMPT_LENGTH), generator=generator)
    marker = torch.randint(0, PROMPT_LENGTH - 1, (size,), generator=generator)
    rows = torch.arange(size)
    letters[rows, marker] = 1
    answers = letters[rows, marker + 1]
    return letters, answers


@functools.lru_cache(maxsize=1)
def trained_model(steps: int = 600) -> torch.nn.Module:
    """A 2-layer GPT-2 that solves the task (accuracy checked by the tests)."""
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
    model = GPT2LMHeadModel(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        prompts, answers = make_batch(128, generator)
        logits = model(input_ids=prompts).logits[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, answers)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.eval()


def accuracy(model: torch.nn.Module, size: int = 512) -> float:
    prompts, answers = make_batch(size, torch.Generator().manual_seed(123))
    with torch.no_grad():
        predicted = model(input_ids=prompts).logits[:, -1].argmax(dim=1)
    return float((predicted == answers).float().mean())
