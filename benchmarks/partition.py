"""OwenValue against SHAP's PartitionExplainer at equal evaluations, and when a hierarchy pays.

Both explain the same game on the same binary tree: SHAP gets the tree as a
linkage matrix (``Hierarchy.to_linkage``) in a ``maskers.Partition`` over
feature indicators (a row of ones, a background of zeros), and a wrapper that
rebuilds the input from the indicators, so a coalition means the same input
for both; SHAP's ``max_evals`` equals our ``budget``. Model rows are counted
by wrapping the model. Cases:

* (a) text: the MiniLM zero-shot sentiment classifier on sentences of 30-60
  tokens, one feature per token, tree = sentences / words / tokens;
* (b) images: torchvision resnet18 (random init, no download) on a 224 x 224
  image, SLIC 200 superpixels (tree: colour agglomeration) and the 16 x 16
  patch grid (196 patches, tree: alternating halves);
* (c) tabular: a small MLP trained on scikit-learn's breast-cancer data (30
  features, bundled), tree = correlation clustering of the training set;
* accuracy at d = 16 (the first 16 breast-cancer features): how far the exact
  Owen value sits from the exact Shapley value, against PairedKernelShap's
  error at the same evaluations;
* scale: 224 x 224 pixels (d = 50,176) with ``budget=4000`` (peak memory), and
  the walk's own cost on a 2,048-token prompt with ``budget=2000``.

Prints a table per case: rows, wall seconds, ours / SHAP time, max |ours - SHAP|.

Run:  python benchmarks/partition.py [--quick]
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from _timing import timed
from torch import Tensor

from captum_graphshap import (
    ExactShapley,
    GridGraph,
    Hierarchy,
    OwenValue,
    PairedKernelShap,
    SuperpixelGraph,
)
from captum_graphshap.plans.owen import winter_coalition_count


class Counted:
    """The model, counting the rows it sees."""

    def __init__(self, inner: Callable[..., Tensor]) -> None:
        self.inner = inner
        self.rows = 0

    def __call__(self, *args: Any) -> Tensor:
        self.rows += args[0].shape[0]
        with torch.no_grad():
            return self.inner(*args)


@dataclass
class Case:
    """One example's game: the model, the input, its baseline, the feature mask, the tree."""

    model: Counted
    x: Tensor
    baseline: Tensor
    mask: Tensor
    target: int
    hierarchy: Hierarchy
    extra: tuple[Any, ...] = ()


def shap_partition(case: Case, budget: int) -> tuple[np.ndarray, float]:
    """SHAP's PartitionExplainer on one example's indicator game: values per feature, seconds."""
    import shap

    d = case.hierarchy.num_features
    flat = case.mask.expand(case.x.shape)[0].reshape(-1)

    def indicator_model(z: np.ndarray) -> np.ndarray:
        keep = torch.as_tensor(z, dtype=torch.bool)[:, flat].reshape(-1, *case.x.shape[1:])
        rows = torch.where(keep, case.x, case.baseline)
        args = tuple(a.expand(rows.shape[0], *a.shape[1:]) for a in case.extra)
        return case.model(rows, *args)[:, case.target].double().numpy()

    masker = shap.maskers.Partition(np.zeros((1, d)), clustering=case.hierarchy.to_linkage())
    explainer = shap.PartitionExplainer(indicator_model, masker)
    start = time.perf_counter()
    values = explainer(np.ones((1, d)), max_evals=budget, silent=True, batch_size=50).values[0]
    return values, time.perf_counter() - start


def ours(case: Case, budget: int) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    phi = OwenValue(case.model).attribute(
        case.x,
        baselines=case.baseline,
        target=case.target,
        feature_mask=case.mask,
        hierarchy=case.hierarchy,
        budget=budget,
        additional_forward_args=case.extra or None,
    )
    seconds = time.perf_counter() - start
    flat_mask = case.mask.expand(case.x.shape)[0].reshape(-1)
    per_feature = torch.zeros(case.hierarchy.num_features, dtype=torch.float64)
    per_feature[flat_mask] = phi[0].reshape(-1).double()
    return per_feature.numpy(), seconds


def compare(name: str, case: Case, budget: int) -> dict[str, Any]:
    model = case.model
    model.rows = 0
    mine, t_ours = ours(case, budget)
    rows_ours = model.rows
    model.rows = 0
    theirs, t_shap = shap_partition(case, budget)
    rows_shap = model.rows
    row = {
        "case": name,
        "budget": budget,
        "rows ours": rows_ours,
        "rows SHAP": rows_shap,
        "ours s": t_ours,
        "SHAP s": t_shap,
        "ours/SHAP": t_ours / t_shap,
        "max|diff|": float(np.abs(mine - theirs).max()),
        "scale": float(np.abs(theirs).max()),
        "ours": mine,
        "shap": theirs,
    }
    print(
        f"{name:34s} budget {budget:6d}  rows {rows_ours:6d} / {rows_shap:6d}  "
        f"ours {t_ours:7.2f}s  SHAP {t_shap:7.2f}s  ratio {t_ours / t_shap:5.2f}  "
        f"max|diff| {row['max|diff|']:.2e} (max|phi| {row['scale']:.2e})",
        flush=True,
    )
    return row


# ------------------------------------------------------------------ cases


def case_text(quick: bool) -> None:
    from captum_graphshap.apps.minilm import ZeroShotSentiment
    from captum_graphshap.text import token_hierarchy

    classifier = ZeroShotSentiment.from_minilm("cpu").eval()
    texts = [
        "The film opens with a quiet, patient scene in a kitchen. Then it never finds its "
        "footing again, and the actors seem as lost as the audience by the end.",
        "I expected very little from this sequel, yet the writing is sharp, the jokes land, "
        "and the final act is genuinely moving. A rare surprise!",
    ][: 1 if quick else 2]
    model = Counted(classifier)
    pad = classifier.tokenizer.pad_token_id
    for text in texts:
        encoding = classifier.tokenize(text)
        ids, attention = encoding["input_ids"], encoding["attention_mask"]
        inner = ids[:, 1:-1]  # tokens without [CLS]/[SEP]: one feature each

        def with_specials(tokens: Tensor, attention: Tensor, ids: Tensor = ids) -> Tensor:
            rows = tokens.shape[0]
            full = torch.cat([ids[:, :1].expand(rows, 1), tokens, ids[:, -1:].expand(rows, 1)], 1)
            return classifier(full, attention.expand(rows, -1))

        model.inner = with_specials
        (h,) = token_hierarchy(encoding, [text])
        d = inner.shape[1]
        mask = torch.arange(d)[None]
        baseline = torch.full_like(inner, pad)
        count = winter_coalition_count(h)
        for budget in (200, count) if not quick else (200,):
            case = Case(model, inner, baseline, mask, 1, h, (attention,))
            compare(f"(a) MiniLM, {d} tokens", case, budget)


def resnet_case() -> tuple[Counted, Tensor]:
    """torchvision's resnet18, random init (no download), and a smooth 224 x 224 image."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = Counted(resnet18(num_classes=10).eval())
    y, x_grid = torch.meshgrid(
        torch.linspace(-1, 1, 224), torch.linspace(-1, 1, 224), indexing="ij"
    )
    image = torch.stack([torch.sin(3 * x_grid), torch.cos(2 * y), x_grid * y])[None]
    return model, image


def case_images(quick: bool) -> None:
    model, image = resnet_case()
    patches, patch_mask = GridGraph.patches(224, 224, 16)
    mask = patch_mask[None, None]
    case = Case(model, image, torch.zeros_like(image), mask, 0, patches.hierarchy())
    compare("(b) resnet18, 16x16 patches (196)", case, 120 if quick else 500)


def case_slic(quick: bool) -> None:
    model, image = resnet_case()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        superpixels = SuperpixelGraph.slic(image[0], n_segments=200, compactness=10.0)
    segments = superpixels.feature_mask[None, None]
    tree = superpixels.hierarchy(image[0])
    case = Case(model, image, torch.zeros_like(image), segments, 0, tree)
    compare(f"(b) resnet18, SLIC ({superpixels.num_nodes})", case, 120 if quick else 500)


def breast_cancer_mlp(columns: slice) -> tuple[torch.nn.Module, Tensor, Tensor]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x = torch.tensor(data.data[:, columns], dtype=torch.float64)
    x = (x - x.mean(0)) / x.std(0)
    y = torch.tensor(data.target)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
    ).double()
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(150):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(net(x[:400]), y[:400]).backward()
        optimiser.step()
    return net.eval(), x[:400], x[400:]


def case_tabular(quick: bool) -> None:
    net, train, test = breast_cancer_mlp(slice(None))
    model = Counted(net)
    h = Hierarchy.from_background(train.numpy())
    count = winter_coalition_count(h)
    baseline = train.mean(0, keepdim=True)
    mask = torch.arange(30)[None]
    print(f"(c) breast cancer: correlation tree of depth {h.depth}, exact count {count:,}")
    for row in range(2 if quick else 5):
        exact = (
            OwenValue(net)
            .attribute(test[row : row + 1], baselines=baseline, target=1, hierarchy=h)[0]
            .numpy()
        )
        case = Case(model, test[row : row + 1], baseline, mask, 1, h)
        result = compare(f"(c) breast-cancer MLP, 30 features #{row}", case, min(count, 2000))
        scale = np.abs(exact).sum()
        print(
            f"    at budget {result['budget']}, L1 error to the exact Owen value ({count:,} "
            f"evaluations) / its L1 norm: ours {np.abs(result['ours'] - exact).sum() / scale:.3f}, "
            f"SHAP {np.abs(result['shap'] - exact).sum() / scale:.3f}",
            flush=True,
        )


def case_accuracy(quick: bool) -> None:
    """At d = 16: Owen value vs exact Shapley, and PairedKernelShap's error at the same budget."""
    net, train, test = breast_cancer_mlp(slice(0, 16))
    rows = test[: 10 if quick else 40]
    baseline = train.mean(0, keepdim=True)
    exact = ExactShapley(net).attribute(rows, baselines=baseline, target=1)
    norm = exact.norm(dim=1)
    for name, h in (
        ("correlation tree", Hierarchy.from_background(train.numpy())),
        ("balanced over ids", Hierarchy.balanced(16)),
    ):
        count = winter_coalition_count(h)
        owen = OwenValue(net).attribute(rows, baselines=baseline, target=1, hierarchy=h)
        errors = []
        for seed in range(3 if quick else 10):
            kernel = PairedKernelShap(net).attribute(
                rows,
                baselines=baseline,
                target=1,
                budget=count,
                generator=torch.Generator().manual_seed(seed),
            )
            errors.append(((kernel - exact).norm(dim=1) / norm).mean().item())
        owen_error = ((owen - exact).norm(dim=1) / norm).mean().item()
        print(
            f"d = 16, {name:18s} {count:4d} evaluations: Owen vs Shapley rel. error "
            f"{owen_error:.3f}; PairedKernelShap at the same evaluations {np.mean(errors):.3f} "
            f"(+- {np.std(errors):.3f} over seeds)",
            flush=True,
        )


def case_leftover(quick: bool) -> None:
    """The budgeted walk's error to the exact Owen value, leftovers shared equally or by profile."""
    net, train, test = breast_cancer_mlp(slice(None))
    baseline = train.mean(0, keepdim=True)
    torch.manual_seed(0)
    wide = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
    ).double()
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(4),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 3),
    ).double()
    patches, patch_mask = GridGraph.patches(32, 32, 4)
    settings = [
        (
            "breast cancer, correlation tree",
            net,
            test[:10],
            baseline,
            None,
            Hierarchy.from_background(train.numpy()),
            1,
            (100, 500, 2000, 8000),
        ),
        (
            "breast cancer, balanced",
            net,
            test[:10],
            baseline,
            None,
            Hierarchy.balanced(30),
            1,
            (60, 200, 400),
        ),
        (
            "MLP over 64 positions, line",
            wide,
            torch.randn(10, 64, dtype=torch.float64),
            torch.zeros(1, 64, dtype=torch.float64),
            None,
            Hierarchy.balanced(64),
            1,
            (100, 400, 1500),
        ),
        (
            "CNN, 8 x 8 patches of 32 x 32",
            cnn,
            torch.randn(4, 3, 32, 32, dtype=torch.float64),
            0.0,
            patch_mask[None, None],
            patches.hierarchy(),
            0,
            (100, 400, 1500),
        ),
    ]
    for name, model, rows, base, mask, tree, target, budgets in settings[: 2 if quick else 4]:
        options = dict(baselines=base, target=target, feature_mask=mask, hierarchy=tree)
        exact = OwenValue(model).attribute(rows, **options).flatten(1)
        for budget in budgets:
            errors = []
            for share in ("equal", "profile"):
                phi = OwenValue(model).attribute(rows, budget=budget, leftover=share, **options)
                error = (phi.flatten(1) - exact).abs().sum(1) / exact.abs().sum(1)
                errors.append(float(error.mean()))
            print(
                f"leftover: {name:32s} budget {budget:5d}: L1 error / L1 norm, equal "
                f"{errors[0]:.3f}, profile {errors[1]:.3f}",
                flush=True,
            )


def case_scale() -> None:
    """Memory of d = 50,176 with budget=4000, and the walk's own cost on 2,048 tokens."""
    torch.manual_seed(0)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    ).eval()
    image = torch.randn(1, 3, 224, 224)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    hierarchy = GridGraph(224, 224).hierarchy()
    built = time.perf_counter() - start
    with torch.no_grad():
        result = OwenValue(conv).attribute(
            image, target=0, hierarchy=hierarchy, budget=4000, return_evaluations=True
        )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"scale: 224x224 pixels (d = 50,176), budget=4000: {int(result.n_evaluations[0])} "
        f"evaluations, {seconds:.1f}s ({built:.1f}s building the tree), peak RSS {after:.0f} MiB "
        f"(process before: {before:.0f} MiB)",
        flush=True,
    )
    # the walk itself on 2,048 tokens: a model costing nothing, so the time is ours
    table = torch.randn(50, dtype=torch.float64)

    def cheap(ids: Tensor) -> Tensor:
        return table[ids].cumsum(1)[:, -1:] + torch.tanh(table[ids[:, :64]].sum(1, keepdim=True))

    ids = torch.randint(1, 50, (1, 2048))
    start = time.perf_counter()
    result = OwenValue(cheap).attribute(
        ids, baselines=0, target=0, budget=2000, return_evaluations=True
    )
    walk = time.perf_counter() - start
    print(
        f"scale: 2,048 tokens, budget=2000: {int(result.n_evaluations[0])} evaluations, "
        f"{walk:.2f}s with a model that costs nothing (plan, rows and estimate)",
        flush=True,
    )


def random_decoder(device: torch.device) -> torch.nn.Module:
    """A random-initialised 4-layer, 256-wide GPT-2 with a 2,048-token context (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=4,
        n_embd=256,
        n_head=4,
        n_positions=2048,
        vocab_size=1000,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config).eval().to(device)


def decoder_rows_per_second(device: torch.device, rows: int = 4) -> float:
    """Forward rows per second of :func:`random_decoder` on 2,048 tokens."""
    model = random_decoder(device)
    ids = torch.randint(0, 1000, (rows, 2048), device=device)
    with torch.no_grad():
        model(ids[:1])
        seconds = timed(lambda: model(ids), device)
    return rows / seconds


def case_prompt(device: torch.device, budget: int = 2000) -> None:
    """The whole 2,048-token explanation with budget=2000 (minutes on a CPU, seconds on a GPU)."""
    model = random_decoder(device)

    def next_token_logits(ids: Tensor) -> Tensor:
        hidden = model.transformer(input_ids=ids).last_hidden_state[:, -1]
        return model.lm_head(hidden)

    ids = torch.randint(1, 1000, (1, 2048), device=device)
    with torch.no_grad():
        target = int(next_token_logits(ids).argmax())
        result: Any = None

        def explain() -> None:
            nonlocal result
            result = OwenValue(next_token_logits).attribute(
                ids, baselines=0, target=target, budget=budget, return_evaluations=True
            )

        seconds = timed(explain, device)
    print(
        f"prompt: 2,048 tokens, random 4-layer 256-wide GPT-2 on {device}, budget={budget}: "
        f"{int(result.n_evaluations[0])} evaluations in {seconds:.1f}s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one example per case (~2 min)")
    parser.add_argument(
        "--cases",
        default="scale,tabular,accuracy,leftover,text,images,slic",
        help="comma-separated; scale first, as its peak memory is the process's; 'prompt' "
        "(not by default: about an hour on one CPU thread) explains the 2,048-token prompt",
    )
    parser.add_argument("--device", default="cpu", help="for the scale and prompt cases")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    cases = {
        "tabular": case_tabular,
        "accuracy": case_accuracy,
        "text": case_text,
        "images": case_images,
        "slic": case_slic,
        "leftover": case_leftover,
    }
    for name in args.cases.split(","):
        if name == "scale":
            case_scale()
            rate = decoder_rows_per_second(device)
            print(
                f"scale: a random 4-layer 256-wide GPT-2 runs {rate:.2f} rows/s of 2,048 tokens "
                f"on {device}: 2,000 evaluations alone take {2000 / rate:.0f}s",
                flush=True,
            )
        elif name == "prompt":
            case_prompt(device)
        else:
            cases[name](args.quick)


if __name__ == "__main__":
    main()
