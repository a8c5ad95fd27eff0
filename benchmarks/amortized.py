"""Amortized against per-example explanation: error against total model evaluations, and speed.

Side by side in one run, on held-out examples the explainer never saw,
against exact Shapley values (``ExactShapley``):

* tabular, d = 12 correlated Gaussian inputs, random MLPs (ReLU and tanh by
  default; ``--models`` adds GELU, SiLU, softplus and a second ReLU; seeds
  fixed, not tuned): ``AmortizedShapley.fit(budget=64)`` on 3,000 and 20,000
  examples against ``PairedKernelShap(budget=64 | 128)``; ``--fresh K``
  instead draws K MLPs from seeds no one chose (activation, width, depth,
  LayerNorm; printed with each) and ends with the distribution of the
  explainer's error over the default's (win rate, median, worst, the losses);
* images, 16 x 16 synthetic strokes, d = 16 patches of 4 x 4 pixels, a
  random CNN with max-pooling: fit on ``--images`` images at 64 each
  against the default at 64 and 128;
* ``--only digits`` (not in the default run): scikit-learn's 8 x 8 digits
  under ``estimators.digits``' trained CNN, 16 patches of 2 x 2 pixels,
  training and validation images shifted copies of two disjoint sets of digits,
  neither held out;
* for each: the labels' own error (what the explainer must beat), the
  efficiency gap, the intervals' coverage of the exact values, and the
  wall time of explaining the held-out examples against
  ``PairedKernelShap(budget=256)``.

Errors are the mean over examples of ``||phi_hat - phi|| / ||phi||``.

Run:  python benchmarks/amortized.py [--quick] [--sizes 3000,20000] [--images 20000]
          [--estimator fastshap|kernel|permutation] [--seed 0] [--test 200] [--test-images 100]
          [--only tabular|images|digits] [--models relu,tanh,gelu,silu,softplus,relu2]
          [--fresh 8]
          [--device cuda] [--throughput 100000] [--exact-labels] [--label-budget 64]

``--exact-labels`` (tabular) fits on exact Shapley values and ``--label-budget
1024`` on nearly exact ones: the explainer network's own ceiling, what it
reaches when the labels carry no noise.

``--throughput N`` explains N fresh images with the fitted image explainer
(in calls of ``--throughput-batch``) and prints explained images per second
and per hour, beside the per-example default at 256 on the same device.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
from _timing import timed
from torch import Tensor, nn

from captum_graphshap import AmortizedShapley, ExactShapley, PairedKernelShap
from captum_graphshap.amortized.networks import TabularMLP


def correlated_inputs(count: int, d: int, seed: int, covariance_seed: int = 7) -> Tensor:
    """Gaussian rows with a random covariance (pairwise correlations up to ~0.8).

    The covariance comes from ``covariance_seed`` alone, so training and held-out
    rows (different ``seed``) share one distribution.
    """
    g = torch.Generator().manual_seed(covariance_seed)
    mixing = torch.randn(d, d, generator=g) / d**0.5
    covariance = mixing @ mixing.T + 0.3 * torch.eye(d)
    factor = torch.linalg.cholesky(covariance)
    data = torch.Generator().manual_seed(seed + 1)
    return torch.randn(count, d, generator=data) @ factor.T


def random_mlp(d: int, activation: type[nn.Module], seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(d, 64), activation(), nn.Linear(64, 64), activation(), nn.Linear(64, 1)
    ).eval()


FRESH_ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Softplus, nn.Tanh,
)  # fmt: skip


def fresh_mlp(d: int, seed: int) -> tuple[str, nn.Module]:
    """A random MLP drawn from ``seed``: activation, width 32-128, 2-3 hidden layers,
    LayerNorm or not; its name says which."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda n: int(torch.randint(n, (1,), generator=g))  # noqa: E731
    activation = FRESH_ACTIVATIONS[pick(len(FRESH_ACTIVATIONS))]
    width, depth, norm = (32, 64, 128)[pick(3)], 2 + pick(2), bool(pick(2))
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for index in range(depth):
        layers += [nn.Linear(d if index == 0 else width, width)]
        layers += [nn.LayerNorm(width)] if norm else []
        layers += [activation()]
    name = f"{activation.__name__} {depth}x{width}{' LayerNorm' if norm else ''} #{seed}"
    return name, nn.Sequential(*layers, nn.Linear(width, 1)).eval()


def print_summary(summary: list[tuple[str, int, float, float, float]]) -> None:
    """Each fit's error over the default's at equal (64) and double (128) cost: win
    rates, median and worst ratios, and the models where it loses."""
    for size in sorted({row[1] for row in summary}):
        rows = [row for row in summary if row[1] == size]
        for column, budget in ((3, 64), (4, 128)):
            ratios = torch.tensor([row[2] / row[column] for row in rows])
            losses = [
                f"{row[0]} {row[2] / row[column]:.2f}x" for row in rows if row[2] > row[column]
            ]
            print(
                f"fit on {size}: amortized / default at {budget}: at or below 1 on "
                f"{int((ratios <= 1).sum())} of {len(rows)}, median {float(ratios.median()):.2f}x, "
                f"worst {float(ratios.max()):.2f}x; above 1: {', '.join(losses) or 'none'}"
            )


def stroke_images(count: int, seed: int) -> Tensor:
    """``(count, 1, 16, 16)`` images of two random strokes each, blurred, in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    grid = torch.stack(torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij"), -1)
    images = torch.zeros(count, 16, 16)
    for _ in range(2):
        ends = torch.rand(count, 2, 2, generator=g) * 15
        a, b = ends[:, 0, None, None, :], ends[:, 1, None, None, :]
        t = (((grid - a) * (b - a)).sum(-1) / (b - a).pow(2).sum(-1).clamp_min(1e-6)).clamp(0, 1)
        distance = (grid - (a + t[..., None] * (b - a))).norm(dim=-1)
        width = 0.8 + torch.rand(count, 1, 1, generator=g)
        images = torch.maximum(images, torch.exp(-((distance / width) ** 2)))
    return images[:, None]


def digit_images(count: int, test_count: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """Scikit-learn's 8 x 8 digits: ``test_count`` held out as they are; ``count``
    training images and ``count // 10`` validation images (at most 1,000) drawn from
    two disjoint pools of the others, each shifted by up to a pixel each way (zeros
    shifted in), so 1,797 digits give any number. The validation pool is its own:
    shifted copies of training digits would calibrate the intervals on near
    duplicates (they covered 0.68 of the exact values at 0.9 that way)."""
    from sklearn.datasets import load_digits

    pixels = torch.tensor(load_digits().data / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(pixels), generator=g)
    test = pixels[order[:test_count]]
    middle = test_count + (len(pixels) - test_count) // 5  # a fifth of the rest validates

    def shifted(pool: Tensor, size: int) -> Tensor:
        picked = nn.functional.pad(pool[torch.randint(len(pool), (size,), generator=g)], (1,) * 4)
        shifts = torch.randint(3, (size, 2), generator=g)
        rows = (shifts[:, 0, None] + torch.arange(8))[:, :, None]  # (size, 8, 1)
        columns = (shifts[:, 1, None] + torch.arange(8))[:, None, :]
        return picked[torch.arange(size)[:, None, None], 0, rows, columns][:, None]

    validation = shifted(pixels[order[test_count:middle]], min(1000, max(20, count // 10)))
    return shifted(pixels[order[middle:]], count), validation, test


def patch_mask() -> Tensor:
    rows = torch.arange(16) // 4
    return (rows[:, None] * 4 + rows[None, :])[None, None]


def random_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    ).eval()  # fmt: skip


def per_feature(values: Tensor, mask: Tensor | None) -> Tensor:
    """``(N, d)`` from attributions in the inputs' shape (one element per feature)."""
    if mask is None:
        return values.double()
    flat, ids = values.reshape(values.shape[0], -1).double(), mask.reshape(-1)
    d = int(ids.max()) + 1
    first = torch.stack([(ids == k).nonzero()[0, 0] for k in range(d)])
    return flat[:, first]


def spread(estimate: Tensor, exact: Tensor) -> str:
    """The relative errors' median and the pooled error ``sum ||e|| / sum ||phi||``: the
    mean of :func:`error` weighs examples with tiny values (a nearly blank image) most."""
    per_example = (estimate - exact).norm(dim=1) / exact.norm(dim=1).clamp_min(1e-12)
    pooled = (estimate - exact).norm(dim=1).sum() / exact.norm(dim=1).sum()
    return f"{float(per_example.median()):>8.4g} {float(pooled):>8.4g}"


def error(estimate: Tensor, exact: Tensor) -> float:
    return float(((estimate - exact).norm(dim=1) / exact.norm(dim=1).clamp_min(1e-12)).mean())


def compare(name: str, model: nn.Module, train: Tensor, test: Tensor, mask: Tensor | None,
            args: argparse.Namespace, network: nn.Module | None = None,
            validation: Tensor | None = None) -> AmortizedShapley:  # fmt: skip
    """Fit on ``train``, explain ``test``, print the table."""
    kwargs = {"baselines": 0.0, "target": 0}
    device = torch.device(args.device)
    model, train, test = model.to(device), train.to(device), test.to(device)
    mask = None if mask is None else mask.to(device)
    exact = ExactShapley(model).attribute(test, feature_mask=mask, show_progress=False, **kwargs)
    exact = per_feature(exact, mask)
    gap = (model(test)[:, 0] - model(torch.zeros_like(test[:1]))[:, 0]).detach().double()
    explainer = AmortizedShapley(model, feature_mask=mask, explainer=network)
    labels, estimator, what = None, args.estimator, f"at {args.label_budget}"
    if args.exact_labels:  # the explainer's ceiling: its error with noise-free labels
        labels = ExactShapley(model).attribute(
            train, feature_mask=mask, show_progress=False, **kwargs
        )  # fmt: skip
        labels, estimator, what = per_feature(labels, mask), "kernel", "exact labels"
    start = time.perf_counter()
    report = explainer.fit(
        train, budget=args.label_budget, generator=torch.Generator().manual_seed(args.seed),
        label_estimator=estimator, exact_examples=0, epochs=args.epochs, labels=labels,
        validation=None if validation is None else validation.to(device), **kwargs,
    )  # fmt: skip
    fit_time = time.perf_counter() - start
    explainer.attribute(test[:2], **kwargs)  # warm-up (kernels, allocator)
    results = []
    amortized_time = timed(
        lambda: results.append(explainer.attribute(test, return_uncertainty=True, **kwargs)),
        device,
    )
    result = results[0]
    phi = per_feature(result.attributions, mask)
    lower, upper = per_feature(result.lower, mask), per_feature(result.upper, mask)
    rows = [(f"amortized (fit on {len(train)}, {what})", report.evaluations, error(phi, exact))]
    spreads = [spread(phi, exact)]
    for budget in (64, 128, 256):

        def run_default(budget: int = budget) -> Tensor:
            return PairedKernelShap(model).attribute(
                test, feature_mask=mask, budget=budget,
                generator=torch.Generator().manual_seed(1), **kwargs,
            )  # fmt: skip

        defaults: list[Tensor] = []
        seconds = timed(lambda: defaults.append(run_default()), device)  # noqa: B023
        default = defaults[0]
        rows.append(
            (
                f"PairedKernelShap(budget={budget})",
                budget * len(test),
                error(per_feature(default, mask), exact),
            )
        )
        spreads.append(spread(per_feature(default, mask), exact))
        if budget == 256:
            default_time = seconds
            args.default_per_second = len(test) / seconds
    print(
        f"\n== {name}: train {len(train)}, held-out test {len(test)}, "
        f"labels {report.label_estimator} {what}, "
        f"seed {args.seed}"
    )
    print(
        f"device {device}; {'method':<34} {'model evaluations':>18} {'rel. error':>11} "
        f"{'median':>8} {'pooled':>8}"
    )
    for (label, cost, err), more in zip(rows, spreads):
        print(f"{label:<34} {cost:>18,} {err:>11.4g} {more}")
    print(f"held-out RMSE against fresh labels {report.label_rmse:.3g}; fit {fit_time:.1f} s")
    print(
        f"efficiency: max |sum phi - (f(x) - f(b))| = {float((phi.sum(1) - gap).abs().max()):.2e}"
    )
    covered = float(((lower <= exact) & (exact <= upper)).double().mean())
    print(f"interval coverage of the exact values (confidence 0.9): {covered:.3f}")
    print(f"explain {len(test)} held-out: amortized {amortized_time * 1e3:.1f} ms, "
          f"PairedKernelShap(budget=256) {default_time * 1e3:.1f} ms, "
          f"ratio {default_time / amortized_time:.0f}x")  # fmt: skip
    beats = rows[0][2] <= rows[1][2]
    args.summary.append((name, len(train), rows[0][2], rows[1][2], rows[2][2]))
    print(
        f"amortized error <= default at 64: {beats}; <= default at 128: {rows[0][2] <= rows[2][2]}"
    )
    return explainer


class TrunkExplainer(nn.Module):
    """ViT-Shapley's idea on a CNN: a copy of the explained model's convolutions,
    fine-tuned, whose 4 x 4 map has one position per patch; an MLP over every
    patch's channels; the root mean square of each patch's pixels as the gate."""

    def __init__(self, model: nn.Module, d: int = 16) -> None:
        super().__init__()
        self.trunk = copy.deepcopy(model[:6]).train()  # to the second pooling: (N, 16, 4, 4)
        self.head = nn.Sequential(
            nn.Linear(16 * d, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, d)
        )
        self.register_buffer(
            "pooling", (patch_mask().reshape(-1) == torch.arange(d)[:, None]).float() / 16
        )

    def forward(self, image: Tensor) -> Tensor:
        maps = self.trunk(image).flatten(2)  # (N, 16 channels, 16 positions = patches)
        gate = (image.flatten(1).pow(2) @ self.pooling.T).sqrt()
        return self.head(maps.flatten(1)) * gate


def image_network(kind: str, model: nn.Module | None = None) -> nn.Module | None:
    """The image explainer to fit: None for the default (PatchCNN), else a TabularMLP or
    a copy of the model's convolutions (``trunk``)."""
    if kind == "default":
        return None
    if kind == "trunk":
        assert model is not None
        return TrunkExplainer(model)
    hidden = {"tabular": 128, "tabular512": 512}[kind]
    flat = patch_mask().reshape(-1)
    return TabularMLP(flat, torch.zeros(flat.numel()), 16, 1, hidden=hidden)


def throughput(explainer: AmortizedShapley, count: int, batch: int, device: torch.device,
               default_per_second: float) -> None:  # fmt: skip
    """Explained images per second and per hour, ``count`` fresh stroke images."""
    images = stroke_images(count, seed=13).to(device)
    kwargs = {"baselines": 0.0, "target": 0}
    explainer.attribute(images[:batch], **kwargs)  # warm-up at the call size

    def explain_all() -> None:
        for start in range(0, count, batch):
            explainer.attribute(images[start : start + batch], **kwargs)

    seconds = timed(explain_all, device)
    print(
        f"throughput on {device}: {count:,} images in calls of {batch:,}: {seconds:.2f} s, "
        f"{count / seconds:,.0f} images/s = {3600 * count / seconds:,.0f} images/hour "
        f"(PairedKernelShap(budget=256): {default_per_second:,.1f} images/s, "
        f"{3600 * default_per_second:,.0f} images/hour)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default="3000,20000")
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--test-images", type=int, default=100, help="2^16 rows each for exact")
    parser.add_argument(
        "--estimator", default=None,
        help="fit's label_estimator (default: the fit's own, 'potential' for the default network)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the fit's generator (labels, net)")
    parser.add_argument("--only", default="", help="tabular, images or digits")
    parser.add_argument("--models", default="relu,tanh", help="tabular models to run")
    parser.add_argument(
        "--fresh", type=int, default=0,
        help="tabular: this many random MLPs with seeds drawn afresh, instead of --models",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=None, help="None: the fit's default")
    parser.add_argument(
        "--label-budget", type=int, default=64, help="the fit's budget per example (64: the "
        "issue's; large: nearly exact labels, the explainer's own ceiling)",
    )  # fmt: skip
    parser.add_argument(
        "--exact-labels", action="store_true",
        help="fit on ExactShapley labels (2^d rows per example): the explainer's ceiling",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--throughput", type=int, default=0, help="images explained for speed")
    parser.add_argument("--throughput-batch", type=int, default=4096)
    parser.add_argument(
        "--image-explainers",
        default="default",
        help="comma-separated: default (PatchCNN), tabular (the tabular ensemble over the "
        "256 pixels), tabular512 (its members 512 wide), trunk (a fine-tuned copy of the "
        "model's convolutions)",
    )
    args = parser.parse_args()
    args.summary = []
    if args.device == "cpu":
        torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.images, args.test, args.test_images = [1000], 1000, 50, 20
    if args.only in ("", "tabular"):
        test = correlated_inputs(args.test, 12, seed=7)
        models = {
            "relu": (nn.ReLU, 101), "tanh": (nn.Tanh, 202), "gelu": (nn.GELU, 303),
            "silu": (nn.SiLU, 404), "softplus": (nn.Softplus, 505), "relu2": (nn.ReLU, 606),
        }  # fmt: skip
        chosen = [
            (f"tabular MLP ({activation.__name__})", random_mlp(12, activation, seed))
            for activation, seed in (models[key] for key in args.models.split(","))
        ]
        if args.fresh:  # seeds no one chose: drawn for this run, printed with each model
            seeds = torch.randint(10**6, (args.fresh,), generator=torch.Generator().manual_seed(
                int.from_bytes(os.urandom(4), "little")))  # fmt: skip
            chosen = [fresh_mlp(12, int(seed)) for seed in seeds]
        for name, model in chosen:
            for size in sizes:
                train = correlated_inputs(size, 12, seed=11 + size)
                compare(name, model, train, test, None, args)
    if args.only == "digits":  # not in the default run: its own model and data
        from estimators import digits

        model, _, _, mask, _ = digits(nn.ReLU, 0)
        train, validation, test = digit_images(
            args.images, min(args.test, args.test_images), seed=17
        )  # fmt: skip
        name = "digits CNN, 16 patches of 2 x 2"
        compare(name, model.eval(), train, test, mask, args, validation=validation)
    if args.only in ("", "images"):
        model = random_cnn(303)
        test = stroke_images(min(args.test, args.test_images), seed=5)
        train = stroke_images(args.images, seed=9)
        for kind in args.image_explainers.split(","):
            network = image_network(kind, model)
            name = f"image patches CNN, explainer {kind}"
            explainer = compare(name, model, train, test, patch_mask(), args, network)
        if args.throughput:
            throughput(explainer, args.throughput, args.throughput_batch,
                       torch.device(args.device), args.default_per_second)  # fmt: skip

    if len(args.summary) > 1:
        print()
        print_summary(args.summary)


if __name__ == "__main__":
    main()
