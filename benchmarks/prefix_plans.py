"""What the LLM prefix paths would compute, without a model: token shares of one pass.

For the perturbed prompts of ``LShapley(k=1)`` (every subset of each window
of three positions, the rest at the baseline) and of ``ShapleySampling``
(each ordering's nested coalitions) on an ``--length``-token prompt, the
planners of ``captum_graphshap.llm.prefix_cache`` price the reference-prefix
path (:func:`plan_groups`) and the blockwise path (:func:`plan_blocks`) per
call of ``8 x`` one forward's rows, with the CPU's and the accelerators'
costs per forward. Printed: each path's row-tokens (forward costs included)
over the one-pass path's. The path a call takes is the cheaper of the two
(and none above 1). This is the arithmetic behind the 1,024-token prompt's
ceiling (benchmarks/README.md, issue 31): no model is run.

Run:  python benchmarks/prefix_plans.py [--length 1024] [--answer 8] [--orderings 4] [--markdown]
"""

from __future__ import annotations

import argparse
import itertools

import torch
from _table import add_markdown_argument, markdown_table

from captum_graphshap.llm import prefix_cache as pc

#: prompt tokens per forward, as ``LLMShapley`` sizes its calls
TOKENS_PER_FORWARD = 1 << 16


def lshapley_rows(tokens: torch.Tensor) -> torch.Tensor:
    """Every subset of each window of three positions present, the rest at 0."""
    length = tokens.shape[0]
    kept: set[tuple[int, ...]] = set()
    for i in range(length):
        window = [j for j in (i - 1, i, i + 1) if 0 <= j < length]
        for size in range(len(window) + 1):
            kept.update(itertools.combinations(window, size))
    rows = torch.zeros(len(kept), length, dtype=torch.long)
    for row, subset in enumerate(sorted(kept, key=lambda s: (s[0] if s else -1, s))):
        rows[row, list(subset)] = tokens[list(subset)]
    return rows


def sampling_rows(tokens: torch.Tensor, orderings: int, seed: int) -> torch.Tensor:
    """Each ordering's first j tokens present, j = 0 .. length, the rest at 0."""
    generator = torch.Generator().manual_seed(seed)
    length = tokens.shape[0]
    rows = []
    for _ in range(orderings):
        rank = torch.argsort(torch.randperm(length, generator=generator))
        rows += [torch.where(rank < j, tokens, 0) for j in range(length + 1)]
    return torch.stack(rows)


def shares(rows: torch.Tensor, answer: int, forward: int, block: int) -> tuple[float, float]:
    """Row-tokens of the reference and blockwise paths over one pass's, summed over calls."""
    length = rows.shape[1]
    max_rows = max(1, TOKENS_PER_FORWARD // (length + answer))
    step = max(1, length // pc.PREFIX_STEPS)
    reference = blockwise = one_pass = 0
    for call in rows.split(8 * max_rows):
        count = call.shape[0]
        most = min(count, max_rows)
        _, shared = pc.first_differences(call)
        ordered = sorted((shared.clamp(max=length - 1) // step * step).tolist(), reverse=True)
        groups, grouped = pc.plan_groups(ordered, length + answer, forward, most)
        reference += grouped + ordered[groups[0][1] - 1] + forward
        distinct, _, common = pc.prefix_classes(call)
        blockwise += distinct.shape[0] * answer + sum(
            pc.plan_blocks(common[start : end - 1].tolist(), length, step, block)[1]
            for start, end in pc._class_parts(distinct.shape[0], most)
        )
        one_pass += count * (length + answer) + -(-count // most) * forward
    return reference / one_pass, blockwise / one_pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--answer", type=int, default=8)
    parser.add_argument("--orderings", type=int, default=4)
    add_markdown_argument(parser)
    args = parser.parse_args()
    tokens = torch.randint(10, 1000, (args.length,), generator=torch.Generator().manual_seed(0))
    cases = {
        "LShapley(k=1)": lshapley_rows(tokens),
        f"ShapleySampling, {args.orderings} orderings": sampling_rows(tokens, args.orderings, 1),
    }
    costs = {
        "cpu": (pc.FORWARD_COST_TOKENS["cpu"], pc.BLOCK_COST_TOKENS["cpu"]),
        "accelerator": (pc.DEFAULT_FORWARD_COST_TOKENS, pc.DEFAULT_BLOCK_COST_TOKENS),
    }
    print(f"{args.length}-token prompt, {args.answer}-token answer: row-tokens / one pass's")
    table = []
    for name, rows in cases.items():
        for device, (forward, block) in costs.items():
            reference, blockwise = shares(rows, args.answer, forward, block)
            table.append((name, device, f"{reference:.3f}", f"{blockwise:.3f}"))
    header = ("rows", "costs", "reference", "blockwise")
    if args.markdown:
        print(markdown_table(header, table, [False, False, True, True]))
        return
    print(f"{header[0]:34s} {header[1]:12s} {header[2]:>9s} {header[3]:>9s}")
    for name, device, reference_cell, blockwise_cell in table:
        print(f"{name:34s} {device:12s} {reference_cell:>9s} {blockwise_cell:>9s}")


if __name__ == "__main__":
    main()
