"""Captum's wrappers with our classes: LLMAttribution, NoiseTunnel, DataLoaderAttribution.

The LLM is the tiny GPT-2 of captum_graphshap.apps.toy_task (shipped weights) on a task with a
known answer: the next token is the letter after the marker ``#``.
"""

from __future__ import annotations

import pytest
import torch
from captum.attr import DataLoaderAttribution as CaptumDataLoaderAttribution
from captum.attr import (
    FeatureAblation,
    LLMAttribution,
    NoiseTunnel,
    ShapleyValues,
    TextTemplateInput,
    TextTokenInput,
)
from torch.utils.data import DataLoader, TensorDataset

import captum_graphshap as cg
from captum_graphshap.wrappers import DataLoaderAttribution

from .optional_deps import optional

optional("transformers")

from captum_graphshap.apps import toy_task as llm_task  # noqa: E402  (needs transformers)

#: (class, options): every class whose output shape fits LLMAttribution
LLM_METHODS = [
    (cg.ExactShapley, {}),
    (cg.ShapleySampling, {"n_samples": 30}),
    (cg.PairedKernelShap, {"n_samples": 120}),
    (cg.BayesShap, {"n_samples": 120}),
    # tokens outside a neighbourhood keep their values: a prompt padded everywhere else is
    # out of distribution for this model (tests/test_llm.py, benchmarks/llm.py)
    (cg.LShapley, {"k": 1, "context": "input"}),
    (cg.CShapley, {"k": 1, "context": "input"}),
    (cg.MyersonValue, {}),
]
PER_TOKEN = {cg.ExactShapley, cg.ShapleySampling, cg.LShapley, cg.CShapley, cg.MyersonValue}


@pytest.fixture(scope="module")
def model():
    trained = llm_task.trained_model(250)
    assert llm_task.accuracy(trained) > 0.95  # the task is learnt: the answer is known
    return trained


@pytest.fixture(scope="module")
def tokenizer():
    return llm_task.LetterTokenizer()


def prompts(count):
    ids, answers = llm_task.make_batch(count, torch.Generator().manual_seed(7))
    for row, answer in zip(ids.tolist(), answers.tolist()):
        text = " ".join(llm_task.VOCAB[i] for i in row)
        yield text, llm_task.VOCAB[answer], row.index(1) + 1  # answer's position


@pytest.mark.parametrize("cls, options", LLM_METHODS, ids=[c.__name__ for c, _ in LLM_METHODS])
def test_llm_attribution_finds_the_answer_token(model, tokenizer, cls, options):
    explainer = LLMAttribution(cls(model), tokenizer)
    found = 0
    for text, answer, position in prompts(6):
        extra = dict(options)
        if "n_samples" in extra:
            extra["generator"] = torch.Generator().manual_seed(0)
        result = explainer.attribute(
            TextTokenInput(text, tokenizer), target=answer, forward_in_tokens=False, **extra
        )
        assert result.seq_attr.shape == (llm_task.PROMPT_LENGTH,)
        if cls in PER_TOKEN:
            assert result.token_attr.shape == (1, llm_task.PROMPT_LENGTH)
        else:
            assert result.token_attr is None  # Captum gives KernelShap no per-token mode
        found += int(result.seq_attr.argmax()) == position
    assert found >= 5


def test_exact_shapley_in_llm_attribution_equals_captums_shapley_values(model, tokenizer):
    text = "c # h a d"  # 5 tokens: Captum's ShapleyValues walks 5! orderings
    ours = LLMAttribution(cg.ExactShapley(model), tokenizer).attribute(
        TextTokenInput(text, tokenizer), target="h", forward_in_tokens=False
    )
    theirs = LLMAttribution(ShapleyValues(model), tokenizer).attribute(
        TextTokenInput(text, tokenizer), target="h", forward_in_tokens=False
    )
    torch.testing.assert_close(ours.seq_attr, theirs.seq_attr, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.token_attr, theirs.token_attr, atol=1e-4, rtol=1e-4)


def test_template_segments_form_the_features(model, tokenizer):
    template = "{} {} # {} {}"
    inp = TextTemplateInput(template, values=["c f", "a", "h", "k d"])
    result = LLMAttribution(cg.LShapley(model), tokenizer).attribute(
        inp, target="h", forward_in_tokens=False, k=1
    )
    assert result.seq_attr.shape == (4,)
    assert int(result.seq_attr.argmax()) == 2


def test_noise_tunnel_averages_our_attributions_like_captums():
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    ours = NoiseTunnel(cg.ExactShapley(net)).attribute(
        x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=1
    )
    torch.manual_seed(1)
    theirs = NoiseTunnel(ShapleyValues(net)).attribute(
        x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=1
    )
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", [cg.ExactShapley, cg.ShapleySampling, cg.PairedKernelShap])
def test_dataloader_attribution_matches_the_feature_ablation_control(cls):
    # an additive model: every Shapley value is the ablation difference
    net = torch.nn.Linear(3, 1)
    data = DataLoader(
        TensorDataset(torch.randn(6, 3, generator=torch.Generator().manual_seed(2))), batch_size=2
    )
    control = CaptumDataLoaderAttribution(FeatureAblation(net)).attribute(data)
    ours = DataLoaderAttribution(cls(net)).attribute(data)
    torch.testing.assert_close(ours[0], control[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "cls, options",
    [
        (cg.ExactShapley, {}),
        (cg.ShapleySampling, {"n_samples": 20}),
        (cg.PairedKernelShap, {"n_samples": 64}),
        (cg.LShapley, {"k": 1}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_captum_metrics_take_our_attributions(cls, options):
    from captum.metrics import infidelity, sensitivity_max

    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(5))
    explainer = cls(net)
    attributions = explainer.attribute(x, target=1, **options)

    def perturb(inputs):
        noise = torch.randn(inputs.shape, generator=torch.Generator().manual_seed(6)) * 0.1
        return noise, inputs - noise

    score = infidelity(net, perturb, x, attributions, target=1)
    assert score.shape == (3,) and bool(torch.isfinite(score).all())
    sensitivity = sensitivity_max(explainer.attribute, x, target=1, **options)
    assert sensitivity.shape == (3,) and bool(torch.isfinite(sensitivity).all())


def test_bivariate_univariate_values_go_to_captum_metrics():
    from captum.metrics import infidelity

    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(8))
    matrix, shapley = cg.BivariateShapley(net).attribute(x, target=0, return_shapley=True)
    assert matrix.shape == (2, 4, 4)
    torch.testing.assert_close(shapley, cg.ExactShapley(net).attribute(x, target=0))

    def perturb(inputs):
        noise = torch.full_like(inputs, 0.05)
        return noise, inputs - noise

    assert bool(torch.isfinite(infidelity(net, perturb, x, shapley, target=0)).all())


class CallCounter(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.calls = 0
        self.config = model.config

    def forward(self, **kwargs):
        self.calls += 1
        return self.model(**kwargs)


@pytest.mark.parametrize("cls, options", LLM_METHODS, ids=[c.__name__ for c, _ in LLM_METHODS])
def test_llm_shapley_equals_llm_attribution_in_fewer_forwards(model, tokenizer, cls, options):
    from captum_graphshap.llm import LLMShapley

    text, answer, _ = next(prompts(1))
    extra = dict(options)
    results, calls = [], []
    for wrapper in (LLMAttribution, LLMShapley):
        counted = CallCounter(model)
        if "n_samples" in extra:
            extra["generator"] = torch.Generator().manual_seed(0)
        result = wrapper(cls(counted), tokenizer).attribute(
            TextTokenInput(text, tokenizer), target=answer, forward_in_tokens=False, **extra
        )
        results.append(result)
        calls.append(counted.calls)
    torch.testing.assert_close(results[1].seq_attr, results[0].seq_attr, atol=1e-4, rtol=1e-4)
    if results[0].token_attr is not None:
        torch.testing.assert_close(
            results[1].token_attr, results[0].token_attr, atol=1e-4, rtol=1e-4
        )
    assert calls[1] * 4 <= calls[0]  # coalitions share forward passes


def test_llm_shapley_batches_template_segments_of_different_lengths(model, tokenizer):
    from captum_graphshap.llm import LLMShapley

    template = "{} {} # {} {}"
    inp = TextTemplateInput(template, values=["c f", "a", "h", "k d"], baselines=["", "", "", ""])
    ours = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(inp, target="h")
    theirs = LLMAttribution(cg.ExactShapley(model), tokenizer).attribute(
        inp, target="h", forward_in_tokens=False
    )
    torch.testing.assert_close(ours.seq_attr, theirs.seq_attr, atol=1e-4, rtol=1e-4)
