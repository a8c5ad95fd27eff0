"""Token attribution of a generative LM: L-/C-Shapley against ShapleyValueSampling.

The model is the GPT-2 of :mod:`captum_graphshap.apps.toy_task`, trained
in-process (a few seconds) on a task with a known answer: the next token
copies the letter after the marker ``#``, so the letter after the marker is
the token that decides the answer. For each prompt, every contender explains
the answer's log-probability; it "finds the answer" when that letter gets the
largest attribution. Contenders, at equal model evaluations per prompt (rows
counted by wrapping the model; Captum's ``n_samples`` is the largest whose
rows do not exceed L-/C-Shapley's):

* ``LShapley(k=1)`` and ``CShapley(k=2)`` in :class:`~captum_graphshap.llm.LLMShapley`
  (coalitions batched into one padded forward), with the paper's
  ``context="baseline"`` (tokens outside a neighbourhood at the pad token) and
  with ``context="input"`` (they keep their values, as in the authors' code);
* Captum's ``ShapleyValueSampling`` in Captum's ``LLMAttribution`` (one
  forward per coalition), at L-Shapley's and at C-Shapley's evaluations;
* our ``ShapleySampling`` in ``LLMShapley`` at the same evaluations, which
  separates the method from the batching.

Contenders run prompt by prompt in a rotating order, so a shared machine's
load falls on all of them. Prints hit rates, mean share of the absolute
attribution on the answer token, evaluations and milliseconds per prompt.

Run:  python benchmarks/llm.py [--quick] [--device cpu|cuda] [--prompts 60]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from captum.attr import LLMAttribution, ShapleyValueSampling, TextTokenInput

from captum_graphshap import CShapley, LShapley, ShapleySampling
from captum_graphshap.apps import toy_task
from captum_graphshap.llm import LLMShapley


class RowCounter(torch.nn.Module):
    """The model, counting the prompt rows it scores."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.config, self.rows = model, model.config, 0

    def forward(self, **kwargs: object) -> object:
        ids = kwargs["input_ids"]
        assert isinstance(ids, torch.Tensor)
        self.rows += ids.shape[0]
        return self.model(**kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 prompts")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--prompts", type=int, default=60)
    parser.add_argument("--steps", type=int, default=250, help="training steps of the GPT-2")
    args = parser.parse_args()
    count = 12 if args.quick else args.prompts
    device = torch.device(args.device)

    started = time.perf_counter()
    model = toy_task.trained_model(args.steps).to(device)
    tokenizer = toy_task.LetterTokenizer()
    print(
        f"GPT-2 (2 layers, 64 wide) trained in {time.perf_counter() - started:.1f} s, accuracy "
        f"{toy_task.accuracy(model.cpu()):.3f}; {count} prompts of {toy_task.PROMPT_LENGTH} "
        f"tokens, device {device}"
    )
    model.to(device)
    counter = RowCounter(model)
    d = toy_task.PROMPT_LENGTH

    def run(name: str, make: Callable[[], object], prompt: toy_task.Prompt, **kw: object):
        explainer = make()
        inp = TextTokenInput(prompt.text, tokenizer)
        counter.rows = 0
        start = time.perf_counter()
        attribute = explainer.attribute  # type: ignore[attr-defined]
        result = attribute(inp, target=prompt.answer, forward_in_tokens=False, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        attributions = result.seq_attr.float().cpu()
        hit = int(attributions.argmax()) == prompt.answer_position
        share = float(attributions[prompt.answer_position] / attributions.abs().sum())
        records[name].append((hit, share, counter.rows, seconds))
        return counter.rows

    records: dict[str, list[tuple[bool, float, int, float]]] = {}
    graph_methods = {
        "LShapley k=1, context=baseline": (LShapley, {"k": 1}),
        "LShapley k=1, context=input": (LShapley, {"k": 1, "context": "input"}),
        "CShapley k=2, context=baseline": (CShapley, {"k": 2}),
        "CShapley k=2, context=input": (CShapley, {"k": 2, "context": "input"}),
    }
    # each graph method's evaluations go to Captum's sampler and to ours
    captum = {name: f"Captum ShapleyValueSampling @ {name}" for name in graph_methods}
    ours = {name: f"our ShapleySampling @ {name}" for name in graph_methods}
    names = [*graph_methods, *captum.values(), *ours.values()]
    for name in names:
        records[name] = []
    for index, prompt in enumerate(toy_task.prompts(count, seed=2024)):
        budget: dict[str, int] = {}
        for name, (cls, options) in graph_methods.items():
            budget[name] = run(
                name, lambda cls=cls: LLMShapley(cls(counter), tokenizer), prompt, **options
            )
        samplers = []
        for name, rows in budget.items():
            # Captum's sampler: 1 row for the baseline, then d rows per permutation
            samplers.append(
                (
                    captum[name],
                    lambda: LLMAttribution(ShapleyValueSampling(counter), tokenizer),
                    {"n_samples": max(1, (rows - 1) // d)},
                )
            )
            samplers.append(
                (
                    ours[name],
                    lambda: LLMShapley(ShapleySampling(counter), tokenizer),
                    {"budget": rows, "generator": torch.Generator().manual_seed(index)},
                )
            )
        shift = index % len(samplers)
        for name, make, kw in samplers[shift:] + samplers[:shift]:
            torch.manual_seed(index)  # Captum's sampler draws from the global generator
            run(name, make, prompt, **kw)

    print(
        "\n| method | answer found | mean share on answer | evaluations / prompt | ms / prompt |"
        "\n| --- | --- | --- | --- | --- |"
    )
    for name in names:
        rows = records[name]
        hits = sum(r[0] for r in rows)
        print(
            f"| {name} | {hits}/{len(rows)} | {statistics.mean(r[1] for r in rows):.2f} | "
            f"{statistics.mean(r[2] for r in rows):.1f} | "
            f"{1000 * statistics.median(r[3] for r in rows):.1f} |"
        )
    print()
    for name in graph_methods:
        ratio = statistics.median(b[3] / a[3] for a, b in zip(records[name], records[captum[name]]))
        found = sum(r[0] for r in records[name])
        theirs = sum(r[0] for r in records[captum[name]])
        verdict = "at least as often" if found >= theirs else "less often"
        print(
            f"{name} vs Captum ShapleyValueSampling at equal evaluations: answer found "
            f"{found} vs {theirs} times ({verdict}); "
            f"{ratio:.1f}x faster (median per-prompt ratio)"
        )


if __name__ == "__main__":
    main()
