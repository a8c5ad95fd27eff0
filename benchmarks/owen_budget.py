"""OwenValue within a budget on random uneven trees: error and spend against the exact value.

Random trees (d = 7-13, up to three levels, groups of 1-12 and single leaves
among them), a random tanh MLP each, four examples; budgets at a share of
each tree's exact count. Prints, per share, the relative error
``||phi - phi_exact|| / ||phi_exact||`` (median, mean, worst over trees) and
``n_evaluations / budget`` (median, least). Run it at another commit (for
example 7e30b8d, the walk before issue 37) to compare walks.

    python benchmarks/owen_budget.py [--trees 24] [--seed 5] [--shares 0.2 0.5 0.9] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

from captum_graphshap import Hierarchy, OwenValue
from captum_graphshap.plans.owen import winter_coalition_count


def uneven_tree(rng: random.Random, ids: list[int], depth: int) -> object:
    """Ids in groups of 1-12 (a single leaf often), ``depth`` levels at most."""
    if len(ids) == 1 or depth == 0:
        return ids if len(ids) > 1 else ids[0]
    parts, start = [], 0
    while start < len(ids):
        size = rng.choice([1, 1, rng.randint(1, 12)])
        part = ids[start : start + size]
        start += size
        parts.append(uneven_tree(rng, part, depth - 1) if len(part) > 1 else part[0])
    return parts if len(parts) > 1 else parts[0]


def measure(trees: int, seed: int, shares: list[float]) -> dict[float, list[tuple[float, float]]]:
    """Per share of the exact count: (relative error, spent / budget) per tree."""
    rng = random.Random(seed)
    out: dict[float, list[tuple[float, float]]] = {share: [] for share in shares}
    for case in range(trees):
        d = rng.randint(7, 13)
        ids = list(range(d))
        rng.shuffle(ids)
        nested = uneven_tree(rng, ids, rng.randint(1, 3))
        hierarchy = Hierarchy.from_nested(nested if isinstance(nested, list) else [nested], d)
        count = winter_coalition_count(hierarchy)
        g = torch.Generator().manual_seed(case)
        hidden = torch.randn(d, 16, generator=g, dtype=torch.float64)
        head = torch.randn(16, 1, generator=g, dtype=torch.float64)

        def model(z: torch.Tensor, hidden=hidden, head=head) -> torch.Tensor:
            return torch.tanh(z @ hidden) @ head

        x = torch.randn(4, d, generator=g, dtype=torch.float64)
        exact = OwenValue(model).attribute(x, target=0, hierarchy=hierarchy)
        for share in shares:
            budget = max(2, int(count * share))
            options = {"budget": budget, "return_evaluations": True}
            if "generator" in OwenValue.Options.__dataclass_fields__:
                options["generator"] = torch.Generator().manual_seed(case)
            result = OwenValue(model).attribute(x, target=0, hierarchy=hierarchy, **options)
            error = (result.attributions - exact).norm(dim=1) / exact.norm(dim=1)
            spent = result.n_evaluations.double().mean().item() / budget
            out[share].append((error.mean().item(), spent))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", type=int, default=24)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.2, 0.5, 0.9])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = measure(args.trees, args.seed, args.shares)
    header = "| budget / exact count | error median | mean | worst | spent median | least |"
    print(f"{args.trees} trees, seed {args.seed}")
    if args.markdown:
        print(header)
        print("|" + "---|" * 6)
    for share, rows in results.items():
        errors = [e for e, _ in rows]
        spent = [s for _, s in rows]
        cells = (
            share,
            statistics.median(errors),
            statistics.mean(errors),
            max(errors),
            statistics.median(spent),
            min(spent),
        )
        if args.markdown:
            print("| {:.1f} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.2f} |".format(*cells))
        else:
            print(
                "budget {:.1f} x exact: error median {:.3f} mean {:.3f} worst {:.3f}; "
                "spent/budget median {:.2f} least {:.2f}".format(*cells)
            )


if __name__ == "__main__":
    main()
