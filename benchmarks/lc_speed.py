"""L-Shapley and C-Shapley: engine overhead, speed against Captum and SHAP, masking curves.

Prints, measured in one run:

1. Engine overhead: LShapley/CShapley wall time against pushing the same rows
   (built from the same plan with ``torch.where``, pre-built, in the same
   batch sizes, no_grad) through the bare model, as rows/second, for a small
   strided CNN on 1x28x28 pixels and a token CNN on 400 tokens. Target <= 1.2x.
   Every contender gets d rows per model call (d = 784 pixels or 400 tokens):
   Captum's ShapleyValueSampling batches only within one permutation, so d is
   its largest call. Our default batching (``perturbations_per_eval=None``,
   about 2^21 input elements per call) is timed beside it.
2. Speed-up over Captum's ShapleyValueSampling at an equal number of model
   rows (rows are counted by wrapping the model; n_samples is chosen from a
   measured rows-per-permutation), perturbations_per_eval = d. Target >= 10x
   on CPU.
3. Speed-up over SHAP's PartitionExplainer (Owen values on the masker's
   axis-aligned partition tree) with ``shap.maskers.Image`` and a fixed zero
   background (the pad id 0 for tokens, shaped as a 1 x L image), at
   max_evals = our row count, batch_size = d.
4. Masking-curve area on held-out scikit-learn digits (log-odds of the
   predicted class as the top-ranked pixels are set to 0; lower is better) for
   C-Shapley, L-Shapley, Captum KernelShap and ShapleyValueSampling at equal
   rows per digit, and a random ranking; then whether the paper's claim
   "C-Shapley beats KernelShap" holds here.

Items 1-3 run every contender in the same rounds, in an order that rotates
each round, after one warm-up run each (which also counts its rows; SHAP's
first call compiles with numba). Tables give medians and the median of the
per-round ratios, as in engine_overhead.py.

Run:  python benchmarks/lc_speed.py [--repeats 9] [--digits 30] [--kernel-digits 10]
                                   [--device cpu] [--threads 0] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from _timing import median_ratio, rotating_rounds
from torch import Tensor, nn

from captum_graphshap import CShapley, GridGraph, LineGraph, LShapley
from captum_graphshap.apps.demo import CountingModel
from captum_graphshap.apps.demo.experiment import make_local_cnn
from captum_graphshap.engine.batching import AUTO_ELEMENTS_PER_CALL
from captum_graphshap.graphs import FeatureGraph, default_feature_mask
from captum_graphshap.metrics import DEFAULT_FRACTIONS, curve_area, masking_curve
from captum_graphshap.plans.l_c_shapley import c_shapley_plan, l_shapley_plan

EXPLAINERS = {"CShapley": CShapley, "LShapley": LShapley}
PLANS = {"CShapley": c_shapley_plan, "LShapley": l_shapley_plan}


# ---------------------------------------------------------------- timing


def rows_of(counter: CountingModel, fn: Callable[[], object]) -> int:
    """Run ``fn`` once (the warm-up) and return the rows it pushed through the model."""
    counter.rows = 0
    fn()
    return counter.rows


# ---------------------------------------------------------------- models


def image_cnn() -> nn.Module:
    """A small strided CNN for 1x28x28 (78 k multiply-adds per image)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    ).eval()


class TokenCNN(nn.Module):
    """Embedding, one conv1d, max-pooling over time, a linear layer (random weights)."""

    def __init__(self, vocab: int = 1000, dim: int = 32, channels: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, channels, 3, padding=1)
        self.head = nn.Linear(channels, 2)

    def forward(self, ids: Tensor) -> Tensor:
        hidden = torch.relu(self.conv(self.embed(ids).transpose(1, 2)))
        return self.head(hidden.amax(dim=2))


def digits_cnn() -> nn.Module:
    """A small CNN for the 8x8 digits (88 k multiply-adds per image): the demo's CNN
    without pooling."""
    torch.manual_seed(0)
    return make_local_cnn()


# ---------------------------------------------------------------- items 1-3


@dataclass
class Case:
    """One explanation to time: a model, one input, a method and its order k."""

    name: str
    method: str
    k: int
    model: CountingModel
    x: Tensor
    graph: FeatureGraph

    @property
    def label(self) -> str:
        return f"{self.name}, {self.method} k={self.k}"

    @property
    def mask(self) -> Tensor:
        return default_feature_mask(tuple(self.x.shape)).to(self.x.device)

    @property
    def rows_per_call(self) -> int:
        """d rows per model call for every contender: Captum's ShapleyValueSampling
        batches within one permutation only, so d is its largest call."""
        return self.mask.numel()

    @property
    def default_rows_per_call(self) -> int:
        """Our engine's call size with ``perturbations_per_eval=None``."""
        return max(1, AUTO_ELEMENTS_PER_CALL // self.x[0].numel())


def ours(case: Case, per_eval: int | None) -> Callable[[], object]:
    explainer = EXPLAINERS[case.method](case.model)
    return lambda: explainer.attribute(
        case.x, baselines=0, target=0, perturbations_per_eval=per_eval, k=case.k
    )


def bare_model(case: Case) -> Callable[[], None]:
    """The same plan's rows, pre-built with ``torch.where``, through the bare model."""
    coalitions = PLANS[case.method](case.graph, case.k).coalitions.dense()
    coalitions = coalitions.to(case.x.device)
    flat = case.mask.reshape(-1)
    background = torch.zeros_like(case.x)
    chunks = []
    for start in range(0, coalitions.shape[0], case.rows_per_call):
        block = coalitions[start : start + case.rows_per_call]
        keep = block.gather(1, flat.expand(block.shape[0], -1)).view(-1, *case.mask.shape[1:])
        chunks.append(torch.where(keep, case.x, background))
    model = case.model.model

    def run() -> None:
        with torch.no_grad():
            for chunk in chunks:
                model(chunk)

    return run


def captum_svs(case: Case, budget: int) -> tuple[Callable[[], object], int]:
    """Captum's ShapleyValueSampling with the n_samples whose rows come closest to ``budget``."""
    from captum.attr import ShapleyValueSampling

    explainer = ShapleyValueSampling(case.model)

    def run(n_samples: int) -> object:
        return explainer.attribute(
            case.x,
            baselines=0,
            target=0,
            feature_mask=case.mask,
            n_samples=n_samples,
            perturbations_per_eval=case.rows_per_call,
        )

    one = rows_of(case.model, lambda: run(1))
    per_permutation = rows_of(case.model, lambda: run(2)) - one
    n_samples = max(1, round((budget - (one - per_permutation)) / per_permutation))
    return (lambda: run(n_samples)), n_samples


def shap_partition(case: Case, budget: int) -> Callable[[], object] | None:
    """SHAP's PartitionExplainer on an Image masker with a fixed zero background.

    Images are (H, W, 1) arrays; token ids a (1, L, 1) integer "image", so the
    masker's axis-aligned partition tree is a balanced split of the line.
    """
    try:
        import shap
    except ImportError:
        return None
    x = case.x
    shape = (*x.shape[-2:], 1) if x.dim() == 4 else (1, x.shape[1], 1)
    row = x.cpu().numpy().reshape(1, *shape)

    def f(z: np.ndarray) -> np.ndarray:
        batch = torch.as_tensor(z, device=x.device).reshape(-1, *x.shape[1:]).to(x.dtype)
        with torch.no_grad():
            return case.model(batch)[:, 0].cpu().numpy()

    masker = shap.maskers.Image(np.zeros(shape, dtype=row.dtype))
    explainer = shap.explainers.Partition(f, masker)
    return lambda: explainer(row, max_evals=budget, batch_size=case.rows_per_call, silent=True)


@dataclass
class SpeedResult:
    case: Case
    rows: dict[str, int]
    times: dict[str, list[float]]
    n_samples: int

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])


def measure(case: Case, repeats: int, device: torch.device) -> SpeedResult:
    contenders = {
        "ours": ours(case, case.rows_per_call),
        "ours default": ours(case, None),
        "bare": bare_model(case),
    }
    rows = {"ours": rows_of(case.model, contenders["ours"])}
    contenders["ours default"](), contenders["bare"]()  # warm-up
    contenders["captum"], n_samples = captum_svs(case, rows["ours"])
    rows["captum"] = rows_of(case.model, contenders["captum"])
    partition = shap_partition(case, rows["ours"])
    if partition is not None:
        contenders["shap"] = partition
        rows["shap"] = rows_of(case.model, partition)
    return SpeedResult(case, rows, rotating_rounds(contenders, repeats, device), n_samples)


def speed_cases(device: torch.device) -> list[Case]:
    torch.manual_seed(1)
    image = torch.rand(1, 1, 28, 28, device=device)
    tokens = torch.randint(1, 1000, (1, 400), device=device)
    cnn = CountingModel(image_cnn().to(device))
    text = CountingModel(TokenCNN().eval().to(device))
    grid, line = GridGraph(28, 28), LineGraph(400)
    return [
        Case("small CNN 1x28x28", "CShapley", 1, cnn, image, grid),
        Case("small CNN 1x28x28", "LShapley", 1, cnn, image, grid),
        Case("token CNN, 400 tokens", "CShapley", 2, text, tokens, line),
        Case("token CNN, 400 tokens", "LShapley", 2, text, tokens, line),
    ]


def print_overhead(results: list[SpeedResult]) -> None:
    print("\n### 1. Engine overhead (target <= 1.2x)\n")
    print(
        "| case | rows | rows per call | ours s | bare model s | ours rows/s | bare rows/s "
        "| overhead | ours, default batching s (rows per call) | its ratio to bare |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        rows, ours_s, bare_s = r.rows["ours"], r.median("ours"), r.median("bare")
        print(
            f"| {r.case.label} | {rows:,} | {r.case.rows_per_call} | {ours_s:.3f} | {bare_s:.3f} "
            f"| {rows / ours_s:,.0f} | {rows / bare_s:,.0f} "
            f"| {median_ratio(r.times, 'ours', 'bare'):.2f}x "
            f"| {r.median('ours default'):.3f} ({r.case.default_rows_per_call:,}) "
            f"| {median_ratio(r.times, 'ours default', 'bare'):.2f}x |"
        )


def print_captum(results: list[SpeedResult]) -> None:
    print("\n### 2. Against Captum ShapleyValueSampling at equal rows (target >= 10x)\n")
    print("| case | our rows | Captum rows (n_samples) | ours s | Captum s | speed-up |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r.case.label} | {r.rows['ours']:,} | {r.rows['captum']:,} ({r.n_samples}) | "
            f"{r.median('ours'):.3f} | {r.median('captum'):.3f} | "
            f"{median_ratio(r.times, 'captum', 'ours'):.1f}x |"
        )


def print_shap(results: list[SpeedResult]) -> None:
    print("\n### 3. Against SHAP PartitionExplainer at max_evals = our rows\n")
    print("| case | our rows | SHAP rows | ours s | SHAP s | speed-up |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        if "shap" not in r.times:
            print(f"| {r.case.label} | {r.rows['ours']:,} | n/a | n/a | n/a | n/a |")
            continue
        print(
            f"| {r.case.label} | {r.rows['ours']:,} | {r.rows['shap']:,} | "
            f"{r.median('ours'):.3f} | {r.median('shap'):.3f} | "
            f"{median_ratio(r.times, 'shap', 'ours'):.1f}x |"
        )


# ---------------------------------------------------------------- item 4


@dataclass
class Digits:
    model: CountingModel
    x: Tensor  # held-out digits to explain, (n, 1, 8, 8) in [0, 1]
    target: Tensor  # class predicted on each
    accuracy: float
    train_s: float


def train_digits(n_explain: int, device: torch.device, epochs: int = 15) -> Digits:
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x_all = torch.tensor(images / 16.0, dtype=torch.float32, device=device).view(-1, 1, 8, 8)
    y_all = torch.tensor(labels, device=device)
    order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(0)).to(device)
    train, test = order[:1400], order[1400:]
    model = digits_cnn().to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in train[torch.randperm(len(train), device=device)].split(64):
            loss = nn.functional.cross_entropy(model(x_all[batch]), y_all[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    train_s = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        predicted = model(x_all[test]).argmax(dim=1)
    accuracy = float((predicted == y_all[test]).float().mean())
    x = x_all[test[:n_explain]]
    return Digits(CountingModel(model), x, predicted[:n_explain], accuracy, train_s)


@dataclass
class Explained:
    name: str
    attributions: Tensor
    rows_per_digit: float
    seconds: float
    areas: Tensor  # (digits,), masking-curve area per digit


def digit_methods(
    digits: Digits, budget_small: int, budget_large: int, kernel_digits: int
) -> dict[str, tuple[Callable[[Tensor, Tensor], Tensor], int]]:
    """name -> (explain(x, target), how many digits it explains)."""
    from captum.attr import KernelShap, ShapleyValueSampling

    # Captum warns that a batch trains one surrogate per example: that is what we want.
    warnings.filterwarnings("ignore", message="You are providing multiple inputs for Lime")
    model, n, d = digits.model, len(digits.x), 64
    mask = default_feature_mask((1, 1, 8, 8)).to(digits.x.device)

    def graph_method(method: type, k: int) -> Callable[[Tensor, Tensor], Tensor]:
        return lambda x, t: method(model).attribute(
            x, baselines=0, target=t, perturbations_per_eval=d, k=k
        )

    def svs(budget: int) -> Callable[[Tensor, Tensor], Tensor]:
        n_samples = max(1, round((budget - 1) / d))  # 1 + n_samples * d rows per digit
        return lambda x, t: ShapleyValueSampling(model).attribute(
            x, 0, t, feature_mask=mask, n_samples=n_samples, perturbations_per_eval=d
        )

    def kernel(budget: int) -> Callable[[Tensor, Tensor], Tensor]:
        return lambda x, t: KernelShap(model).attribute(
            x, 0, t, feature_mask=mask, n_samples=budget, perturbations_per_eval=1024
        )

    def random(x: Tensor, t: Tensor) -> Tensor:
        return torch.rand(x.shape, generator=torch.Generator().manual_seed(0)).to(x.device)

    small, large = f"{budget_small:,} rows", f"{budget_large:,} rows"
    return {
        "random ranking": (random, n),
        "L-Shapley k=1": (graph_method(LShapley, 1), n),
        "C-Shapley k=1": (graph_method(CShapley, 1), n),
        f"KernelShap, {small}": (kernel(budget_small), n),
        f"ShapleyValueSampling, {small}": (svs(budget_small), n),
        "C-Shapley k=2": (graph_method(CShapley, 2), n),
        f"ShapleyValueSampling, {large}": (svs(budget_large), n),
        f"KernelShap, {large}": (kernel(budget_large), kernel_digits),
    }


def explain_digits(
    digits: Digits, name: str, explain: Callable[[Tensor, Tensor], Tensor], count: int
) -> Explained:
    x, target = digits.x[:count], digits.target[:count]
    torch.manual_seed(0)
    digits.model.rows = 0
    start = time.perf_counter()
    attributions = explain(x, target)
    seconds = time.perf_counter() - start
    curve = masking_curve(
        digits.model.model,
        x,
        attributions,
        feature_mask=default_feature_mask((1, 1, 8, 8)).to(x.device),
        baselines=0,
        target=target,
    )
    areas = torch.tensor([curve_area(row, DEFAULT_FRACTIONS) for row in curve])
    return Explained(name, attributions, digits.model.rows / count, seconds, areas)


def mean_and_error(values: Tensor) -> str:
    if values.numel() < 2:
        return f"{float(values.mean()):.2f}"
    error = float(values.std()) / values.numel() ** 0.5
    return f"{float(values.mean()):.2f} ± {error:.2f}"


def print_masking(results: list[Explained], digits: Digits, subset: int) -> None:
    print(
        f"\n### 4. Masking-curve area on digits (CNN test accuracy {digits.accuracy:.3f}, "
        f"trained in {digits.train_s:.1f} s; lower is better)\n"
    )
    n = len(digits.x)
    print(
        f"| method | rows per digit | explain s | area, {n} digits | area, first {subset} digits |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        everyone = mean_and_error(r.areas) if r.areas.numel() == n else "—"
        print(
            f"| {r.name} | {r.rows_per_digit:,.0f} | {r.seconds:.2f} | {everyone} | "
            f"{mean_and_error(r.areas[:subset])} |"
        )


def print_claim(c_shapley: Explained, kernel_shap: Explained) -> None:
    """Paired comparison of C-Shapley and KernelShap on the digits both explained."""
    count = min(c_shapley.areas.numel(), kernel_shap.areas.numel())
    difference = c_shapley.areas[:count] - kernel_shap.areas[:count]
    mean = float(difference.mean())
    verdict = "holds" if mean < 0 else "does not hold"
    if count > 1:
        error = float(difference.std()) / count**0.5
        strength = "more than" if abs(mean) > 2 * error else "within"
        spread = f" ± {error:.2f}"
        note = f"{strength} 2 standard errors"
    else:
        spread, note = "", "one digit, no error estimate"
    wins = int((difference < 0).sum())
    print(
        f"- {c_shapley.name} vs {kernel_shap.name} ({count} digits): area difference "
        f"{mean:+.2f}{spread}, C-Shapley lower on {wins}/{count} digits: the claim {verdict} "
        f"({note})."
    )


def masking_benchmark(n_digits: int, kernel_digits: int, device: torch.device) -> None:
    digits = train_digits(n_digits, device)
    grid = GridGraph(8, 8)
    budget_small = len(l_shapley_plan(grid, 1))
    budget_large = len(c_shapley_plan(grid, 2))
    methods = digit_methods(digits, budget_small, budget_large, kernel_digits)
    results = [
        explain_digits(digits, name, explain, count) for name, (explain, count) in methods.items()
    ]
    print_masking(results, digits, kernel_digits)
    by_name = {r.name: r for r in results}
    print("\nThe paper's claim, C-Shapley beats KernelShap at equal rows:\n")
    print_claim(by_name["C-Shapley k=1"], by_name[f"KernelShap, {budget_small:,} rows"])
    print_claim(by_name["C-Shapley k=2"], by_name[f"KernelShap, {budget_large:,} rows"])


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds per case (items 1-3)")
    parser.add_argument("--digits", type=int, default=30, help="held-out digits to explain")
    parser.add_argument(
        "--kernel-digits",
        type=int,
        default=10,
        help="digits for KernelShap at C-Shapley k=2's budget (about 7 s each on CPU)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    parser.add_argument("--quick", action="store_true", help="a ~1 minute smoke run")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.digits, args.kernel_digits = 1, 6, 1
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")
    start = time.perf_counter()

    results = [measure(case, args.repeats, device) for case in speed_cases(device)]
    print_overhead(results)
    print_captum(results)
    print_shap(results)
    masking_benchmark(args.digits, min(args.kernel_digits, args.digits), device)
    print(f"\nTotal {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
