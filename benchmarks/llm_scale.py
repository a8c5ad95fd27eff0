"""LLMs at real size: a random-initialised Llama decoder, a long prompt, a short answer.

The model is ``transformers.LlamaForCausalLM`` built from a ``LlamaConfig``
with random weights (nothing is downloaded): about 1B parameters in bf16 on
a GPU (2,048 wide, 22 layers, 32 heads, 4 key/value heads, TinyLlama's
shape), about 10M in fp32 on the CPU. One prompt of ``--prompt`` random
tokens (256) and an answer of ``--answer`` tokens (8), explained in
:class:`~captum_graphshap.llm.LLMShapley` by

* ``LShapley(k=1)``, token by token (the default, the prompt's key/value
  cache serving the whole answer) and in one pass (``forward_in_tokens=False``):
  their ratio is the cost of token-by-token scoring; and with
  ``share_prompt_prefix`` off (every perturbed prompt scored in full, not
  after its shared prefix's cache): the off/on ratio is that path's speed-up
  (also for ``ShapleySampling``, whose rows take the blockwise path);
* ``CShapley(k=2)``, ``ShapleySampling`` with ``--orderings`` orderings (10),
  and ``OwenValue`` on the prompt's hierarchy: exact on a GPU (about
  ``0.67 L^2`` coalitions, 44,000 at 256 tokens), within ``--owen-budget``
  evaluations on the CPU (orderings x (L + 1) by default: the sampler's);
* Captum's ``LLMAttribution(ShapleyValueSampling)`` at the same orderings:
  timed on one ordering first, and extrapolated (linearly in orderings) when
  the full run would take longer than ``--captum-budget`` seconds;
* ``LShapley(k=1)`` on a ``--long-prompt``-token prompt (1,024; 0 skips it).

Reported per call: seconds per explanation (each method's second call; its
first, printed beside, pays the new shapes of the shared prefix's paths;
``OwenValue``'s and the long prompt's are first calls), prompt rows scored (a forward's
rows at the prompt's length: one per coalition), rows per second, their share
of the bare model's rows per second (one pass over prompt + answer, 64 rows
per call), and the peak GPU memory. ``--table PATH`` appends the rows to the
markdown table of ``benchmarks/gpu.sh``.

Run:  python benchmarks/llm_scale.py [--device cpu|cuda] [--quick] [--table PATH]
      (--quick: 1 Captum ordering extrapolated; on the CPU a 64-token prompt,
      2 orderings and no long prompt)
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from _table import append_row
from captum.attr import LLMAttribution, ShapleyValueSampling, TextTokenInput

import captum_graphshap as cg
from captum_graphshap.apps.toy_task import LetterTokenizer
from captum_graphshap.llm import LLMShapley

SIZES = {
    # about 1.0B parameters: TinyLlama's shape
    "1b": dict(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
    ),
    # about 10M parameters
    "10m": dict(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=8192,
    ),
}


def build_model(size: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**SIZES[size], max_position_embeddings=2048)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def count_prompt_rows(model: torch.nn.Module, length: int, answer: int) -> list[int]:
    """Wrap ``model.forward`` (keeping its signature): rows of the calls that start a
    coalition's scoring (the prompt alone, or prompt and answer in one pass, whole
    or after a shared prefix's cache: cached and new tokens make up the row)."""
    rows = [0]
    forward = model.forward

    @functools.wraps(forward)
    def counted(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = cache.get_seq_length() if hasattr(cache, "get_seq_length") else 0
        if ids is not None and past + ids.shape[-1] in (length, length + answer):
            rows[0] += ids.shape[0]
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    return rows


def prompt_text(length: int, vocab: int, seed: int) -> str:
    ids = torch.randint(1, vocab, (length,), generator=torch.Generator().manual_seed(seed))
    return " ".join(f"t{i}" for i in ids.tolist())


def measure(fn: Callable[[], object], device: torch.device) -> tuple[float, float | None]:
    """Seconds of one call and its peak GPU memory in GiB (None on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter() - start, torch.cuda.max_memory_allocated() / 2**30
    return time.perf_counter() - start, None


def bare_rows_per_second(model: torch.nn.Module, length: int, device: torch.device) -> float:
    """The model alone: one pass over 64 rows of ``length`` tokens (best of 3)."""
    ids = torch.randint(1, 100, (64, length), device=device)
    with torch.no_grad():
        model(input_ids=ids, logits_to_keep=1)
        best = min(
            measure(lambda: model(input_ids=ids, logits_to_keep=1), device)[0] for _ in range(3)
        )
    return 64 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", choices=list(SIZES), help="default 1b on cuda, 10m on cpu")
    parser.add_argument("--prompt", type=int, help="prompt tokens (256; 64 with --quick on cpu)")
    parser.add_argument("--answer", type=int, default=8)
    parser.add_argument("--orderings", type=int, help="10 (2 with --quick on cpu)")
    parser.add_argument("--long-prompt", type=int, help="1024 on cuda (0: skip; cpu default)")
    parser.add_argument(
        "--owen-budget", type=int, help="OwenValue's budget (cpu: orderings x (prompt + 1))"
    )
    parser.add_argument(
        "--captum-budget", type=float, help="seconds (600; 60 with --quick): else extrapolate"
    )
    parser.add_argument("--table", help="append the rows to this markdown table")
    args = parser.parse_args()
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    size = args.size or ("10m" if cpu else "1b")
    dtype = torch.float32 if cpu else torch.bfloat16
    prompt = args.prompt or (64 if cpu and args.quick else 256)
    orderings = args.orderings or (2 if cpu and args.quick else 10)
    long_prompt = args.long_prompt if args.long_prompt is not None else (0 if cpu else 1024)
    budget = args.captum_budget or (60.0 if args.quick else 600.0)

    model = build_model(size, device, dtype)
    parameters = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    # whitespace tokens t0 t1 ...: token t<i> is id i
    tokenizer = LetterTokenizer([f"t{i}" for i in range(vocab)])
    answer = prompt_text(args.answer, vocab, seed=1)
    print(
        f"Llama decoder, {parameters / 1e6:,.1f}M parameters, {dtype}, {device}; prompt "
        f"{prompt} tokens, answer {args.answer} tokens, {orderings} orderings"
        + (f" ({torch.cuda.get_device_name()})" if not cpu else "")
    )
    bare = bare_rows_per_second(model, prompt + args.answer, device)
    print(f"bare forward: {bare:,.0f} rows/s (one pass, prompt + answer, 64 rows per call)")
    rows = count_prompt_rows(model, prompt, args.answer)
    inp = TextTokenInput(prompt_text(prompt, vocab, seed=0), tokenizer)
    generator = torch.Generator().manual_seed(0)

    def ours(method: Any, share_prefix: bool = True, **options: Any) -> Callable[[], object]:
        explainer = LLMShapley(method, tokenizer)
        explainer.share_prompt_prefix = share_prefix
        return lambda: explainer.attribute(inp, target=answer, **options)

    cases: dict[str, Callable[[], object]] = {
        "LShapley(k=1)": ours(cg.LShapley(model), k=1),
        "LShapley(k=1), prompt prefix not shared": ours(
            cg.LShapley(model), share_prefix=False, k=1
        ),
        "LShapley(k=1), forward_in_tokens=False": ours(
            cg.LShapley(model), k=1, forward_in_tokens=False
        ),
        "CShapley(k=2)": ours(cg.CShapley(model), k=2),
        f"ShapleySampling({orderings} orderings)": ours(
            cg.ShapleySampling(model), n_samples=orderings, generator=generator
        ),
        f"ShapleySampling({orderings} orderings), prompt prefix not shared": ours(
            cg.ShapleySampling(model),
            share_prefix=False,
            n_samples=orderings,
            generator=torch.Generator().manual_seed(0),
        ),
    }
    owen_budget = args.owen_budget or (orderings * (prompt + 1) if cpu else None)
    owen = "OwenValue (prompt hierarchy" + (f", budget={owen_budget})" if owen_budget else ")")
    cases[owen] = ours(cg.OwenValue(model), budget=owen_budget)
    # warm-up: kernels, allocator, the plans' caches (a 16-token prompt)
    LLMShapley(cg.LShapley(model), tokenizer).attribute(
        TextTokenInput(prompt_text(16, vocab, seed=2), tokenizer), target=answer, k=1
    )
    results: dict[str, tuple[float, int]] = {}
    print(f"{'call':44s} {'s':>8s} {'rows':>8s} {'rows/s':>9s} {'share':>6s} {'peak GiB':>8s}")
    for name, fn in cases.items():
        first = None
        try:
            if not name.startswith("OwenValue"):
                # a first call of its own, timed apart: the shared prefix's paths meet
                # new shapes (kernels, allocations) on their first call, which the
                # 16-token warm-up above (below MIN_PROMPT_TOKENS) never takes. Before
                # this, the H200 timed the default LShapley at 2.07 s on its first call
                # and the same code path (forward_in_tokens=False, next) at 0.91 s
                first = measure(fn, device)[0]
            rows[0] = 0
            seconds, peak = measure(fn, device)
        except Exception as error:  # a method built in parallel may not take this call yet
            print(f"{name:44s} failed: {type(error).__name__}: {error}"[:200])
            append_row(args.table, f"LLMShapley({name}): failed, {type(error).__name__}", 1)
            continue
        counted = rows[0]  # before Captum's run, which calls the same model
        results[name] = (seconds, counted)
        share = counted / seconds / bare
        peak_text = f"{peak:8.2f}" if peak is not None else "       -"
        print(
            f"{name:44s} {seconds:8.2f} {counted:8,d} {counted / seconds:9,.0f} {share:6.2f} "
            f"{peak_text}" + (f"  (first call {first:.2f} s)" if first is not None else "")
        )
        captum = None
        if name == f"ShapleySampling({orderings} orderings)":
            captum_s, extrapolated = captum_seconds(
                model, tokenizer, inp, answer, orderings, budget, device
            )
            how = " (extrapolated from 1 ordering)" if extrapolated else ""
            print(
                f"  Captum LLMAttribution(ShapleyValueSampling), {orderings} orderings: "
                f"{captum_s:.2f} s{how}"
            )
            print(f"  LLMShapley is {captum_s / seconds:.1f}x faster at equal orderings")
            captum = f"{captum_s:,.1f}" + (" (extrapolated)" if extrapolated else "")
        append_row(
            args.table,
            f"LLMShapley({name}), Llama {parameters / 1e9:.2f}B {dtype}, prompt {prompt}, "
            f"answer {args.answer}",
            1,
            counted,
            seconds,
            counted / seconds,
            share,
            captum,
            peak,
        )
    tokens, one_pass = (
        results.get("LShapley(k=1)"),
        results.get("LShapley(k=1), forward_in_tokens=False"),
    )
    if tokens and one_pass:
        print(f"token-by-token scoring costs {tokens[0] / one_pass[0]:.2f}x one pass")
    for method in ("LShapley(k=1)", f"ShapleySampling({orderings} orderings)"):
        on, off = results.get(method), results.get(f"{method}, prompt prefix not shared")
        if on and off:
            print(f"shared prompt prefix: {method} off/on {off[0] / on[0]:.2f}x")
    if long_prompt:
        long_inp = TextTokenInput(prompt_text(long_prompt, vocab, seed=3), tokenizer)
        rows = count_prompt_rows(model, long_prompt, args.answer)
        explainer = LLMShapley(cg.LShapley(model), tokenizer)
        seconds, peak = measure(lambda: explainer.attribute(long_inp, target=answer, k=1), device)
        peak_text = f"{peak:.2f} GiB peak" if peak is not None else ""
        print(
            f"LShapley(k=1), {long_prompt}-token prompt: {seconds:.2f} s, {rows[0]:,} rows, "
            f"{peak_text}"
        )
        append_row(
            args.table,
            f"LLMShapley(LShapley(k=1)), Llama {parameters / 1e9:.2f}B, prompt {long_prompt}",
            1,
            rows[0],
            seconds,
            rows[0] / seconds,
            None,
            None,
            peak,
        )


def captum_seconds(
    model: torch.nn.Module,
    tokenizer: Any,
    inp: Any,
    answer: str,
    orderings: int,
    budget: float,
    device: torch.device,
) -> tuple[float, bool]:
    """Captum's seconds at ``orderings`` orderings, and whether they were extrapolated."""
    explainer = LLMAttribution(ShapleyValueSampling(model), tokenizer)
    # Captum's default cached path calls the model with the deprecated
    # past_key_values and, under transformers 5, re-feeds the whole sequence;
    # its uncached path costs the same here and warns about nothing
    one = measure(
        lambda: explainer.attribute(inp, target=answer, n_samples=1, use_cached_outputs=False),
        device,
    )[0]
    if one * orderings > budget or orderings == 1:
        return one * orderings, orderings > 1
    seconds = measure(
        lambda: explainer.attribute(
            inp, target=answer, n_samples=orderings, use_cached_outputs=False
        ),
        device,
    )[0]
    return seconds, False


if __name__ == "__main__":
    main()
