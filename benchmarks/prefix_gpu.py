"""The shared prompt prefix on a GPU: first calls per prompt length, and where the
blockwise path pays.

Two questions the H200 run of ``llm_scale.py`` left open (a 1.1B Llama in bf16,
``benchmarks/gpu_results/h200.md``):

* the first call through the shared prefix cost about 0.9 s more than the next.
  Is that paid once per process, or again for every new prompt length (new
  shapes)? Each length below is explained twice, shared and not; the caching
  allocator's new segments (``cudaMalloc`` calls) are printed beside each call.
* ``ShapleySampling``'s rows take the blockwise path
  (``llm/prefix_cache.py``), which was no faster than one pass there (0.97x).
  It is timed at the block cost off the CPU (``DEFAULT_BLOCK_COST_TOKENS``) and
  at 4x and 16x it, against the unshared call (warm, after one untimed call).

Run:  python benchmarks/prefix_gpu.py [--device cuda] [--size 1b|10m] [--lengths 256,200,320]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from captum.attr import TextTokenInput
from llm_scale import bare_rows_per_second, build_model, measure, prompt_text

import captum_graphshap as cg
import captum_graphshap.llm.prefix_cache as prefix_cache
from captum_graphshap.apps.toy_task import LetterTokenizer
from captum_graphshap.llm import LLMShapley


def segments(device: torch.device) -> int:
    """The allocator's segments allocated so far (each a ``cudaMalloc``; 0 on the CPU)."""
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0))


def timed_call(explain: Any, device: torch.device) -> str:
    before = segments(device)
    seconds, _ = measure(explain, device)
    return f"{seconds:6.2f} s (+{segments(device) - before} segments)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--size", help="1b on cuda, 10m on cpu")
    parser.add_argument("--lengths", default="256,200,320,256")
    parser.add_argument("--orderings", type=int, default=10)
    args = parser.parse_args()
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    model = build_model(args.size or ("10m" if cpu else "1b"), device,
                        torch.float32 if cpu else torch.bfloat16)  # fmt: skip
    vocab = model.config.vocab_size
    tokenizer = LetterTokenizer([f"t{i}" for i in range(vocab)])
    answer = prompt_text(8, vocab, seed=1)
    lengths = [int(t) for t in args.lengths.split(",")]
    bare = bare_rows_per_second(model, lengths[0] + 8, device)
    print(f"{device}, bare forward {bare:,.0f} rows/s at {lengths[0] + 8} tokens")

    def explainer(method: Any, shared: bool) -> LLMShapley:
        explain = LLMShapley(method, tokenizer)
        explain.share_prompt_prefix = shared
        return explain

    print("LShapley(k=1), each prompt twice (first, second):")
    for index, length in enumerate(lengths):
        inp = TextTokenInput(prompt_text(length, vocab, seed=10 + index), tokenizer)
        for shared in (True, False):
            method = explainer(cg.LShapley(model), shared)
            calls = [
                timed_call(lambda: method.attribute(inp, target=answer, k=1), device)  # noqa: B023
                for _ in range(2)
            ]
            print(f"  {length} tokens, {'shared  ' if shared else 'unshared'}: " + ", ".join(calls))
    inp = TextTokenInput(prompt_text(lengths[0], vocab, seed=0), tokenizer)
    print(f"ShapleySampling({args.orderings} orderings), {lengths[0]} tokens (first, second):")
    default_cost = prefix_cache.DEFAULT_BLOCK_COST_TOKENS
    for label, cost, shared in [
        ("unshared", default_cost, False),
        (f"shared, block cost {default_cost}", default_cost, True),
        (f"shared, block cost {4 * default_cost}", 4 * default_cost, True),
        (f"shared, block cost {16 * default_cost}", 16 * default_cost, True),
    ]:
        prefix_cache.DEFAULT_BLOCK_COST_TOKENS = cost
        method = explainer(cg.ShapleySampling(model), shared)

        def run(method: LLMShapley = method) -> object:
            return method.attribute(
                inp, target=answer, n_samples=args.orderings,
                generator=torch.Generator().manual_seed(0),
            )  # fmt: skip

        calls = [timed_call(run, device) for _ in range(2)]
        peak = f", peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if not cpu else ""
        print(f"  {label:28s} " + ", ".join(calls) + peak)
    prefix_cache.DEFAULT_BLOCK_COST_TOKENS = default_cost


if __name__ == "__main__":
    main()
