"""Bivariate Shapley: cost of the whole d x d matrix, and the paper's Table 2 analogue.

Prints, measured in one run:

1. Seconds per explained example for the whole bivariate matrix with
   ``estimator="kernel"`` (the paper's Alg. 2) and ``estimator="permutation"`` (Alg. 1),
   beside one univariate KernelSHAP (``PairedKernelShap``) at the same
   ``n_samples`` (the same paired draws, so the same model rows), univariate
   permutation sampling (``ShapleySampling``) at the same permutations, and
   the bare model pushing the kernel's rows (pre-built, same batch sizes).
   Target: bivariate kernel <= 1.5x one univariate KernelSHAP. Cases:
   scikit-learn digits (64 pixels, an MLP 64-64-10 trained in under a second)
   and a 50-token text model (embedding 1000x32, conv1d 32->32 width 3, max
   over time, linear to 2 classes) with RANDOM weights on random token ids,
   pad id 0 as the baseline. ``n_samples`` = 2 d + 2048 coalitions (the
   default); sampling gets the permutations that cost as many rows
   (``ceil(n / (d - 1))``). Every contender runs in the same rounds, in a
   rotating order, after one warm-up run that also counts its model rows;
   medians and the median per-round ratio (benchmarks/_timing.py). Captum's
   ``KernelShap`` at the same n_samples is timed once on one example, for
   context.
2. Table 2 analogue on held-out digits: post-hoc accuracy (the model keeps its
   predicted class) after masking (setting to 0) the features of the sinks of
   the quotient DAG of the redundancy graph H_gamma, against masking its
   sources, random features of the same counts, and the features of lowest /
   highest |Shapley| of the same counts. The graph is built over the
   example's non-zero pixels only (a pixel already at the baseline is a dummy
   feature: masking it changes nothing), from the kernel estimate at the
   default n_samples; gamma = tau * max |E2| of the example.

Run:  python benchmarks/bivariate.py [--repeats 9] [--digits 200] [--device cpu]
                                    [--threads 0] [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from _timing import median_ratio, rotating_rounds, timed
from torch import Tensor, nn

from captum_graphshap import PairedKernelShap, ShapleySampling
from captum_graphshap.analysis import ExplanationGraph
from captum_graphshap.apps.demo import CountingModel
from captum_graphshap.attr.bivariate_shapley import BivariateShapley
from captum_graphshap.engine.batching import AUTO_ELEMENTS_PER_CALL
from captum_graphshap.engine.dedup import unique_coalitions
from captum_graphshap.metrics.posthoc import post_hoc_accuracy
from captum_graphshap.plans.bivariate import default_kernel_samples, kernel_plan


class TokenCNN(nn.Module):
    """Embedding, one convolution, max over time, linear: random weights."""

    def __init__(self, vocab: int = 1000, dim: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, dim, 3, padding=1)
        self.head = nn.Linear(dim, 2)

    def forward(self, ids: Tensor) -> Tensor:
        hidden = torch.relu(self.conv(self.embedding(ids).transpose(1, 2)))
        return self.head(hidden.amax(dim=2))


@dataclass
class Digits:
    model: nn.Module
    inputs: Tensor  # held-out digits, (N, 64) in [0, 1]
    accuracy: float


def train_digits(device: torch.device, epochs: int = 300) -> Digits:
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    x = torch.tensor(features / 16.0, dtype=torch.float32, device=device)
    y = torch.tensor(labels, device=device)
    torch.manual_seed(0)
    order = torch.randperm(len(x), device=device)
    train, test = order[:1400], order[1400:]
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):  # full batch: well under a second on a CPU
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(x[train]), y[train]).backward()
        optimiser.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x[test]).argmax(dim=1) == y[test]).float().mean())
    return Digits(model, x[test], accuracy)


@dataclass
class Case:
    name: str
    model: nn.Module
    inputs: Tensor
    baseline: float | int
    target: Tensor

    @property
    def d(self) -> int:
        return self.inputs.shape[1]


def bare_rows(case: Case, n_samples: int) -> Callable[[], None]:
    """The kernel's distinct rows (endpoints and the paired draws, each once, as
    the engine evaluates them) for the whole batch, built beforehand, in the
    engine's default batch sizes."""
    d = case.d
    sampled = kernel_plan(d, n_samples, torch.Generator().manual_seed(0), case.inputs.device)
    ends = torch.zeros(2, d, dtype=torch.bool, device=case.inputs.device)
    ends[1] = True
    coalitions, _ = unique_coalitions(torch.cat([ends, sampled]))
    per_call = max(1, AUTO_ELEMENTS_PER_CALL // d // case.inputs.shape[0])
    baseline = torch.full_like(case.inputs[:1], case.baseline)
    chunks = [
        torch.where(block[:, None, :], case.inputs[None], baseline[None]).reshape(-1, d)
        for block in coalitions.split(per_call)
    ]

    def run() -> None:
        with torch.no_grad():
            for chunk in chunks:
                case.model(chunk)

    return run


def contenders(case: Case, n_samples: int, permutations: int) -> dict[str, Callable[[], object]]:
    def seeded() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    common = {"baselines": case.baseline, "target": case.target}
    bivariate = BivariateShapley(case.model)
    return {
        "bivariate kernel": lambda: bivariate.attribute(
            case.inputs, estimator="kernel", n_samples=n_samples, generator=seeded(), **common
        ),
        "bivariate sampling": lambda: bivariate.attribute(
            case.inputs,
            estimator="permutation",
            n_samples=permutations,
            generator=seeded(),
            **common,
        ),
        "PairedKernelShap": lambda: PairedKernelShap(case.model).attribute(
            case.inputs, n_samples=n_samples, generator=seeded(), **common
        ),
        "ShapleySampling": lambda: ShapleySampling(case.model).attribute(
            case.inputs, n_samples=permutations, generator=seeded(), **common
        ),
        "bare model (kernel rows)": bare_rows(case, n_samples),
    }


def rows_per_example(case: Case, name: str, n_samples: int, permutations: int) -> float:
    counter = CountingModel(case.model)
    counted = Case(case.name, counter, case.inputs, case.baseline, case.target)
    contenders(counted, n_samples, permutations)[name]()
    return counter.rows / case.inputs.shape[0]


def captum_kernel_seconds(case: Case, n_samples: int) -> float:
    import warnings

    from captum.attr import KernelShap

    explainer = KernelShap(case.model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return timed(
            lambda: explainer.attribute(
                case.inputs[:1],
                baselines=case.baseline,
                target=case.target[:1],
                n_samples=n_samples,
                perturbations_per_eval=n_samples,
            ),
            case.inputs.device,
        )


def speed_table(cases: list[Case], repeats: int, device: torch.device) -> None:
    print(
        "\n| case | method | model rows per example | s per example | "
        "ratio to PairedKernelShap | ratio to bare model |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for case in cases:
        n_samples = default_kernel_samples(case.d)
        permutations = math.ceil(n_samples / (case.d - 1))
        runs = contenders(case, n_samples, permutations)
        rows = {name: rows_per_example(case, name, n_samples, permutations) for name in runs}
        times = rotating_rounds(runs, repeats, device)
        batch = case.inputs.shape[0]
        for name in runs:
            label = name
            if "sampling" in name.lower():
                label += f" ({permutations} perm.)"
            elif name != "bare model (kernel rows)":
                label += f" (n={n_samples})"
            print(
                f"| {case.name} | {label} | {rows[name]:,.0f} | "
                f"{statistics.median(times[name]) / batch:.5f} | "
                f"{median_ratio(times, name, 'PairedKernelShap'):.2f}x | "
                f"{median_ratio(times, name, 'bare model (kernel rows)'):.2f}x |"
            )
        captum = captum_kernel_seconds(case, n_samples)
        print(
            f"| {case.name} | Captum KernelShap (n={n_samples}), 1 example, once | — | "
            f"{captum:.3f} | — | — |"
        )


def table_two(digits: Digits, count: int, taus: list[float]) -> None:
    model, inputs = digits.model, digits.inputs[:count]
    with torch.no_grad():
        predicted = model(inputs).argmax(dim=1)
    matrix, shapley = BivariateShapley(model).attribute(
        inputs,
        target=predicted,
        estimator="kernel",
        generator=torch.Generator().manual_seed(0),
        return_shapley=True,
    )
    generator = torch.Generator().manual_seed(1)
    print(
        f"\n{count} held-out digits (model accuracy {digits.accuracy:.3f}), kernel estimate at "
        f"n={default_kernel_samples(64)}; mean non-zero pixels per digit "
        f"{float((inputs != 0).sum(dim=1).float().mean()):.1f}.\n"
    )
    print("| tau | features masked | mean count | post-hoc accuracy |")
    print("| ---: | --- | ---: | ---: |")
    for tau in taus:
        masks = {key: torch.zeros(count, 64, dtype=torch.bool) for key in SETS}
        for n in range(count):
            active = (inputs[n] != 0).nonzero().flatten().cpu()
            sub = matrix[n].cpu()[active][:, active]
            graph = ExplanationGraph(sub)
            dag = graph.quotient_dag(tau * float(sub.abs().max()))
            sinks = active[dag.sink_features()]
            sources = active[dag.source_features()]
            by_size = active[shapley[n].cpu()[active].abs().argsort()]
            shuffled = active[torch.randperm(len(active), generator=generator)]
            chosen = {
                "H-sinks": sinks,
                "random, as many as sinks": shuffled[: len(sinks)],
                "lowest |Shapley|, as many as sinks": by_size[: len(sinks)],
                "H-sources": sources,
                "random, as many as sources": shuffled[: len(sources)],
                "highest |Shapley|, as many as sources": by_size.flip(0)[: len(sources)],
            }
            for key, features in chosen.items():
                masks[key][n, features] = True
        for key in SETS:
            kept = post_hoc_accuracy(model, inputs, masks[key].to(inputs.device)).double()
            error = float(kept.std() / math.sqrt(count)) if count > 1 else 0.0
            print(
                f"| {tau} | {key} | {float(masks[key].sum(dim=1).double().mean()):.1f} | "
                f"{float(kept.mean()):.3f} ± {error:.3f} |"
            )


SETS = (
    "H-sinks",
    "random, as many as sinks",
    "lowest |Shapley|, as many as sinks",
    "H-sources",
    "random, as many as sources",
    "highest |Shapley|, as many as sources",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--digits", type=int, default=200, help="held-out digits for Table 2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 40 digits")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else args.repeats
    n_digits = 40 if args.quick else args.digits
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")

    digits = train_digits(device)
    with torch.no_grad():
        digit_batch = digits.inputs[:10]
        digit_target = digits.model(digit_batch).argmax(dim=1)
    text_model = TokenCNN().to(device).eval()
    tokens = torch.randint(1, 1000, (4, 50), generator=torch.Generator().manual_seed(0)).to(device)
    cases = [
        Case("digits MLP, 64 pixels, 10 digits", digits.model, digit_batch, 0.0, digit_target),
        Case(
            "token CNN (random weights), 50 tokens, 4 texts",
            text_model,
            tokens,
            0,
            torch.zeros(4, dtype=torch.long, device=device),
        ),
    ]
    speed_table(cases, repeats, device)
    table_two(digits, min(n_digits, digits.inputs.shape[0]), [0.005, 0.01, 0.02])


if __name__ == "__main__":
    main()
