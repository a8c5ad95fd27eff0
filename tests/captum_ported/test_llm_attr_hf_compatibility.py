# Ported from pytorch/captum, tests/attr/test_llm_attr_hf_compatibility.py, at
# commit faac08773131888714b15709b28494ebeea7f6eb (the newest in the mirror;
# Captum 0.9.0's sdist ships no tests), run against Captum 0.9.0's LLMAttribution.
#
# Changes:
# - The Shapley cases, with the classes swapped: ShapleyValueSampling ->
#   captum_graphshap.ShapleySampling, ShapleyValues ->
#   captum_graphshap.ExactShapley; the FeatureAblation row is dropped.
# - A second parametrisation: the wrapper is Captum's LLMAttribution or
#   captum_graphshap.llm.LLMShapley.
# - The model and tokenizer: Captum downloads
#   hf-internal-testing/tiny-random-LlamaForCausalLM; the tests here run
#   offline, so the model is a LlamaForCausalLM of the same kind (2 layers,
#   random weights under BaseTest's seed) built in-process from a LlamaConfig,
#   and the tokenizer is the all-MiniLM-L6-v2 one this project ships offline
#   (captum_graphshap.apps.minilm.minilm_path, the [text] extra). The cases are
#   skipped when transformers or that package is missing, as Captum's are
#   without transformers.
# - TestTokenizerHFCompatibility (Captum's token pretty-printing for the Llama
#   tokenizer, no attribution method) is not ported.
# - The shebang line is dropped.
# - Cases that differ from our contract are marked xfail in ./conftest.py (one table).
# Everything else is Captum's test code as it is.
#
# BSD 3-Clause License
#
# Copyright (c) 2019, PyTorch team
# All rights reserved.
#
# Redistribution and use in source and binary forms, with or without
# modification, are permitted provided that the following conditions are met:
#
# * Redistributions of source code must retain the above copyright notice, this
#   list of conditions and the following disclaimer.
#
# * Redistributions in binary form must reproduce the above copyright notice,
#   this list of conditions and the following disclaimer in the documentation
#   and/or other materials provided with the distribution.
#
# * Neither the name of the copyright holder nor the names of its
#   contributors may be used to endorse or promote products derived from
#   this software without specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
# AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
# IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
# DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
# FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
# DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
# SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
# CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
# OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
# OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.


from typing import Any, cast, Dict, Optional, Type

import torch
from captum.attr import LLMAttribution, PerturbationAttribution, TextTemplateInput
from captum_graphshap import ExactShapley, ShapleySampling
from captum_graphshap.llm import LLMShapley
from parameterized import parameterized, parameterized_class
from torch import Tensor

from ._captum_helpers import BaseTest

HAS_HF = True
try:
    from captum_graphshap.apps.minilm import minilm_path
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    minilm_path()
except (ImportError, FileNotFoundError):
    HAS_HF = False


def tiny_random_llama(tokenizer: Any) -> "LlamaForCausalLM":
    """A LlamaForCausalLM like hf-internal-testing/tiny-random-LlamaForCausalLM."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    return LlamaForCausalLM(config)


def _class_name(cls: type, num: int, params: Dict[str, Any]) -> str:
    cached = "cached" if params["use_cached_outputs"] else "uncached"
    return f"{cls.__name__}_{params['Wrapper'].__name__}_{params['device']}_{cached}"


@parameterized_class(
    ("device", "use_cached_outputs", "Wrapper"),
    [
        (device, cached, wrapper)
        for wrapper in (LLMAttribution, LLMShapley)
        for device in (("cpu", "cuda") if torch.cuda.is_available() else ("cpu",))
        for cached in (True, False)
    ],
    class_name_func=_class_name,
)
class TestLLMAttrHFCompatibility(BaseTest):
    device: str
    use_cached_outputs: bool
    Wrapper: Type[LLMAttribution]

    def setUp(self) -> None:
        if not HAS_HF:
            self.skipTest("transformers package not found, skipping tests")
        super().setUp()

    @parameterized.expand(
        [
            (
                AttrClass,
                n_samples,
            )
            for AttrClass, n_samples in zip(
                (ShapleySampling, ExactShapley),  # AttrClass
                (1000, None),  # n_samples
            )
        ]
    )
    def test_llm_attr_hf_compatibility(
        self,
        AttrClass: Type[PerturbationAttribution],
        n_samples: Optional[int],
    ) -> None:
        attr_kws: Dict[str, int] = {}
        if n_samples is not None:
            attr_kws["n_samples"] = n_samples

        tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
        llm = tiny_random_llama(tokenizer)

        llm.to(self.device)  # type: ignore[arg-type]
        llm.eval()
        llm_attr = self.Wrapper(AttrClass(llm), tokenizer)

        inp = TextTemplateInput("{} b {} {} e {}", ["a", "c", "d", "f"])
        res = llm_attr.attribute(
            inp,
            "m n o p q",
            use_cached_outputs=self.use_cached_outputs,
            **attr_kws,  # type: ignore
        )
        self.assertEqual(res.seq_attr.shape, (4,))
        self.assertEqual(res.input_tokens, ["a", "c", "d", "f"])
        self.assertEqual(res.seq_attr.device.type, self.device)
        self.assertEqual(cast(Tensor, res.token_attr).device.type, self.device)
