"""Budget spent: rows evaluated per example over ``budget=``, per class and estimator.

``budget=`` is model evaluations per example after deduplication; this prints
``n_evaluations / budget`` (the mean over a batch of examples and
``--seeds`` seeds, with the minimum in brackets where examples or seeds
differ) for each sampled class and estimator at d = 8, 12, 14, 16, 32, 100,
201 and 1,000 and budgets 3 d, 4 d, 256, 1,024, 4,096. Where
``2^d`` is below the budget the spend is capped by the coalitions there are
(shown with a ``*``: every coalition, or as many as the plan may use). A
linear model: the spend depends on the draws only, not on the model.

    python benchmarks/budget_spend.py [--features 8 12 14 16 32 100 201 1000]
        [--budgets 3d 4d 256 1024 4096]
        [--seeds 1] [--match ShapleySampling]
"""

from __future__ import annotations

import argparse

import torch

from captum_graphshap import BayesShap, BivariateShapley, PairedKernelShap, ShapleySampling

CONTENDERS = (
    ("PairedKernelShap auto", PairedKernelShap, {"estimator": "auto"}),
    ("PairedKernelShap kernel", PairedKernelShap, {"estimator": "kernel"}),
    ("PairedKernelShap stratified", PairedKernelShap, {"estimator": "stratified"}),
    ("PairedKernelShap cubic", PairedKernelShap, {"estimator": "cubic"}),
    ("PairedKernelShap regression_mc", PairedKernelShap, {"estimator": "regression_mc"}),
    ("BayesShap", BayesShap, {}),
    ("ShapleySampling antithetic", ShapleySampling, {"antithetic": True}),
    ("ShapleySampling independent", ShapleySampling, {"antithetic": False}),
    ("ShapleySampling antithetic, intervals", ShapleySampling, {"return_uncertainty": True}),
    ("BayesShap focused", BayesShap, {"focused": True}),
    ("ShapleySampling 5 references", ShapleySampling, {"references": 5}),
    (
        "ShapleySampling Taylor control, coefficient 1",
        ShapleySampling,
        {"antithetic": False, "control_variate": "taylor", "control_coefficient": 1.0},
    ),
    (
        "ShapleySampling Taylor control, optimal",
        ShapleySampling,
        {"antithetic": False, "control_variate": "taylor"},
    ),
    ("BivariateShapley kernel", BivariateShapley, {"estimator": "kernel"}),
    ("BivariateShapley permutation", BivariateShapley, {"estimator": "permutation"}),
)


def spend(cls: type, options: dict, d: int, budget: int, batch: int, seeds: range) -> tuple:
    """``(mean, min)`` of ``n_evaluations / budget`` over ``batch`` examples and ``seeds``,
    or an error."""
    spent = []
    for seed in seeds:
        mean, low = spend_once(cls, options, d, budget, batch, seed)
        if mean is None:
            return mean, low
        spent.append((mean, low))
    return sum(m for m, _ in spent) / len(spent), min(low for _, low in spent)


def spend_once(cls: type, options: dict, d: int, budget: int, batch: int, seed: int) -> tuple:
    """``(mean, min)`` of ``n_evaluations / budget`` over ``batch`` examples, or an error."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(d, 1).double()
    inputs = torch.randn(batch, d, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    if "references" in options:  # a count: that many random references
        options = {**options, "references": torch.randn(options["references"], d).double()}
    try:
        result = cls(model).attribute(
            inputs,
            target=0,
            budget=budget,
            generator=generator,
            return_evaluations=True,
            **options,
        )
    except ValueError as error:
        return None, str(error).split(":")[0]
    evaluations = result[-1].double()
    if bool((evaluations > budget).any()):
        raise AssertionError(f"{cls.__name__} {options}: {int(evaluations.max())} > {budget}")
    return float(evaluations.mean() / budget), float(evaluations.min() / budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--features", type=int, nargs="+", default=[8, 12, 14, 16, 32, 100, 201, 1000]
    )
    parser.add_argument(
        "--budgets", nargs="+", default=["3d", "4d", "256", "1024", "4096"], help="k d: k times d"
    )
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1, help="seeds from --seed on")
    parser.add_argument("--match", default="", help="only the methods whose name holds this")
    args = parser.parse_args()
    seeds = range(args.seed, args.seed + args.seeds)
    header = ["method", "d", *args.budgets]
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join(["---"] * 2 + ["---:"] * len(args.budgets)) + " |")
    for name, cls, options in CONTENDERS:
        if args.match not in name:
            continue
        for d in args.features:
            cells = []
            for text in args.budgets:
                budget = int(text[:-1]) * d if text.endswith("d") else int(text)
                mean, low = spend(cls, options, d, budget, args.batch, seeds)
                if mean is None:
                    cells.append("refused")
                    continue
                capped = "*" if 2**d < budget else ""
                cell = f"{mean:.3f}{capped}"
                if low < mean - 1e-9:
                    cell += f" ({low:.3f})"
                cells.append(cell)
            print("| " + " | ".join([name, str(d), *cells]) + " |")


if __name__ == "__main__":
    main()
