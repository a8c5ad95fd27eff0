"""LLMShapley scores the answer as Captum's LLMAttribution does, for the same arguments.

The reference model is Captum's own LLM test model (``DummyLLM`` of the ported
``tests/captum_ported/test_llm_attr.py``): a transformer encoder layer without a
causal mask that ignores the attention mask, so scoring the answer token by token
(Captum's default) and in one pass give different values, and padding would change
them. Also: Captum's LLM forward inside ``LLMAttribution`` starts at one coalition
per call without a warning, and a prompt that tokenises to nothing is refused before
any model call, for every class ``LLMShapley`` accepts.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from captum.attr import (
    FeatureAblation,
    KernelShap,
    Lime,
    LLMAttribution,
    RemoteLLMAttribution,
    ShapleyValues,
    ShapleyValueSampling,
    TextTemplateInput,
    TextTokenInput,
)

import captum_graphshap as cg
from captum_graphshap.apps import toy_task
from captum_graphshap.engine.chunk_runner import takes_one_prompt
from captum_graphshap.llm import LLMShapley

from .captum_ported.test_llm_attr import DummyLLM, DummyRemoteLLMProvider, DummyTokenizer
from .optional_deps import optional

#: segments of one or two words: prompts of a chunk have several lengths
TEMPLATE = TextTemplateInput("{} b {} {} e {}", ["a", "c x", "d", "f g"])


class Counted(DummyLLM):
    """Captum's test model, counting forward calls."""

    def __init__(self) -> None:
        super().__init__(deterministic_weights=True)
        self.calls = 0

    def forward(self, input_ids, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().forward(input_ids, *args, **kwargs)


@pytest.fixture
def llm() -> Counted:
    return Counted().eval()


@pytest.mark.parametrize("forward_in_tokens", [True, False])
@pytest.mark.parametrize("use_cached_outputs", [True, False])
@pytest.mark.parametrize("attr_target", ["log_prob", "prob"])
def test_exact_shapley_equals_captums_shapley_values_in_fewer_calls(
    llm, forward_in_tokens, use_cached_outputs, attr_target
):
    options = {"forward_in_tokens": forward_in_tokens, "use_cached_outputs": use_cached_outputs}
    theirs = LLMAttribution(ShapleyValues(llm), DummyTokenizer(), attr_target=attr_target)
    theirs_result = theirs.attribute(TEMPLATE, "m n o", **options)
    their_calls, llm.calls = llm.calls, 0
    ours = LLMShapley(cg.ExactShapley(llm), DummyTokenizer(), attr_target=attr_target)
    ours_result = ours.attribute(TEMPLATE, "m n o", **options)
    # float32 log-probabilities of about -20, summed in other orders: 1e-5
    torch.testing.assert_close(ours_result.seq_attr, theirs_result.seq_attr, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(
        ours_result.token_attr, theirs_result.token_attr, atol=1e-5, rtol=1e-4
    )
    # Captum: one call per coalition and answer token (or per coalition in one pass),
    # for 4! orderings; ours: one per answer token and prompt length, 16 coalitions
    assert llm.calls * 4 <= their_calls, (llm.calls, their_calls)


def test_token_by_token_is_the_default_and_differs_from_one_pass_on_a_non_causal_model(llm):
    explainer = LLMShapley(cg.ExactShapley(llm), DummyTokenizer())
    default = explainer.attribute(TEMPLATE, "m n o")
    tokens = explainer.attribute(TEMPLATE, "m n o", forward_in_tokens=True)
    one_pass = explainer.attribute(TEMPLATE, "m n o", forward_in_tokens=False)
    torch.testing.assert_close(default.seq_attr, tokens.seq_attr)
    # without a causal mask even the first answer token sees the answer in one pass
    assert (default.token_attr - one_pass.token_attr).abs().amax(dim=1).min() > 1e-4
    assert (default.seq_attr - one_pass.seq_attr).abs().max() > 1e-3


def test_paired_kernel_shap_equals_captums_kernel_shap_and_the_exact_values(llm):
    optional("sklearn")  # Captum's KernelShap fits its linear model with scikit-learn
    tokenizer = DummyTokenizer()
    exact = LLMAttribution(ShapleyValues(llm), tokenizer).attribute(TEMPLATE, "m n o")
    torch.manual_seed(0)
    kernel = LLMAttribution(KernelShap(llm), tokenizer).attribute(TEMPLATE, "m n o", n_samples=2500)
    ours = LLMShapley(cg.PairedKernelShap(llm), tokenizer).attribute(
        TEMPLATE, "m n o", n_samples=2500, generator=torch.Generator().manual_seed(0)
    )
    assert ours.token_attr is None and kernel.token_attr is None  # as Captum's KernelShap
    # both estimate the Shapley values; Captum's test holds KernelShap to 1e-3 here
    torch.testing.assert_close(ours.seq_attr, exact.seq_attr, atol=1e-3, rtol=0)
    torch.testing.assert_close(ours.seq_attr, kernel.seq_attr, atol=1e-3, rtol=0)


def test_cached_steps_equal_the_full_sequence_on_a_causal_lm():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=14, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    tokenizer = toy_task.LetterTokenizer()
    inp = TextTokenInput("c # h a d", tokenizer)
    reference = LLMAttribution(ShapleyValues(model), tokenizer).attribute(
        inp, target="h a b", forward_in_tokens=True, use_cached_outputs=False
    )
    for cached in (True, False):
        for in_tokens in (True, False):
            ours = LLMShapley(cg.ExactShapley(model), tokenizer).attribute(
                inp, target="h a b", forward_in_tokens=in_tokens, use_cached_outputs=cached
            )
            torch.testing.assert_close(ours.token_attr, reference.token_attr, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "cls, options",
    [(cg.ExactShapley, {}), (cg.LShapley, {"k": 1}), (cg.ShapleySampling, {"n_samples": 5})],
    ids=["ExactShapley", "LShapley", "ShapleySampling"],
)
def test_captums_llm_forward_starts_at_one_coalition_per_call_without_a_warning(llm, cls, options):
    def seeded():
        extra = dict(options)
        if "n_samples" in extra:
            extra["generator"] = torch.Generator().manual_seed(1)
        return extra

    explainer = LLMAttribution(cls(llm), DummyTokenizer())
    assert takes_one_prompt(explainer.attr_method.forward_func)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the RuntimeWarning of the fallback included
        result = explainer.attribute(TEMPLATE, "m n o", **seeded())
    one_per_call = explainer.attribute(TEMPLATE, "m n o", perturbations_per_eval=1, **seeded())
    batched = LLMShapley(cls(llm), DummyTokenizer()).attribute(TEMPLATE, "m n o", **seeded())
    torch.testing.assert_close(result.seq_attr, one_per_call.seq_attr, atol=0, rtol=0)
    torch.testing.assert_close(result.seq_attr, batched.seq_attr, atol=1e-5, rtol=1e-4)


def test_remote_llm_forward_is_recognised_too():
    provider = DummyRemoteLLMProvider(deterministic_logprobs=True)
    model = RemoteLLMAttribution.placeholder_model
    explainer = RemoteLLMAttribution(cg.ExactShapley(model), DummyTokenizer(), provider)
    assert takes_one_prompt(explainer.attr_method.forward_func)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = explainer.attribute(TextTemplateInput("{} b {}", ["a", "c"]), "m n")
    torch.testing.assert_close(result.seq_attr, torch.tensor([0.2, 0.4]))  # 2 tokens x 0.1, 0.2
    assert not takes_one_prompt(LLMShapley(cg.ExactShapley(model), DummyTokenizer())._forward_func)


#: every class LLMShapley accepts (any perturbation method): ours and Captum's
ACCEPTED = [
    cg.BayesShap,
    cg.BivariateShapley,
    cg.CShapley,
    cg.ExactShapley,
    cg.LShapley,
    cg.MyersonValue,
    cg.PairedKernelShap,
    cg.ShapleyResiduals,
    cg.ShapleySampling,
    cg.Shear,
    FeatureAblation,
    ShapleyValues,
    ShapleyValueSampling,
    KernelShap,
    Lime,
]


@pytest.mark.parametrize("cls", ACCEPTED, ids=[c.__name__ for c in ACCEPTED])
def test_a_prompt_of_no_tokens_is_refused_before_any_model_call(llm, cls):
    # placeholders only, every baseline empty, and a tokenizer without a start token:
    # the empty coalition's prompt has no token to predict the answer from
    inp = TextTemplateInput("{} {} {}", values=["c", "#", "h"])
    explainer = LLMShapley(cls(llm), toy_task.LetterTokenizer())
    with pytest.raises(ValueError, match="tokenises to no tokens"):
        explainer.attribute(inp, target="h")
    assert llm.calls == 0


@pytest.mark.parametrize(
    "cls, options, atol",
    [
        (cg.ExactShapley, {}, 1e-5),
        (cg.LShapley, {"k": 3}, 1e-5),
        (cg.PairedKernelShap, {"n_samples": 100}, 1e-3),
    ],
    ids=["ExactShapley", "LShapley", "PairedKernelShap"],
)
def test_placeholders_only_work_with_a_start_token_and_equal_captums_values(
    llm, cls, options, atol
):
    # Captum's test tokenizer starts every prompt with <sos>: no prompt is empty
    inp = TextTemplateInput("{} {} {}", values=["c", "d", "h"])
    if "n_samples" in options:
        options = {**options, "generator": torch.Generator().manual_seed(0)}
    ours = LLMShapley(cls(llm), DummyTokenizer()).attribute(inp, "m n", **options)
    theirs = LLMAttribution(ShapleyValues(llm), DummyTokenizer()).attribute(inp, "m n")
    assert torch.isfinite(ours.seq_attr).all()
    # k = 3 neighbourhoods cover the 3 segments (exact); the kernel is an estimate
    torch.testing.assert_close(ours.seq_attr, theirs.seq_attr, atol=atol, rtol=1e-4)
