"""The in-process GPT-2 task of the tests: now :mod:`captum_graphshap.apps.toy_task`."""

from captum_graphshap.apps.toy_task import (  # noqa: F401  (re-exported for older callers)
    PROMPT_LENGTH,
    VOCAB,
    LetterTokenizer,
    accuracy,
    make_batch,
    prompts,
    trained_model,
)
