"""``LLMShapley``: Captum's LLM attribution, with many coalitions per model call.

Captum's :class:`~captum.attr.LLMAttribution` calls the language model once per
perturbed prompt (its forward takes one prompt). ``LLMShapley`` keeps its call
and its :class:`~captum.attr.LLMAttributionResult` (so ``plot_token_attr`` and
``plot_seq_attr`` work) and replaces the forward: the perturbed prompts of a
chunk of coalitions, each followed by the target tokens, are right-padded into
one batch with an attention mask and scored in one forward pass. Any method of
this package can be wrapped; L-/C-Shapley see the prompt's features as a line.
"""

from __future__ import annotations

from typing import Any

import torch
from captum.attr import (
    FeatureAblation,
    LLMAttribution,
    PerturbationAttribution,
    ShapleyValues,
    ShapleyValueSampling,
)
from torch import Tensor


class LLMShapley(LLMAttribution):
    """Token or segment attribution of a generative LM's answer, batched.

    The same call as :class:`captum.attr.LLMAttribution`:
    ``LLMShapley(method, tokenizer).attribute(inp, target=..., **method_options)``
    with ``inp`` a ``TextTokenInput`` or ``TextTemplateInput``, returning an
    ``LLMAttributionResult`` with ``seq_attr`` (the target's log-probability,
    or probability with ``attr_target="prob"``) and, for Shapley-family
    methods, ``token_attr`` (one row per target token).

    The answer is scored in sequence form (prompt and target in one pass, as
    Captum's ``forward_in_tokens=False``), which is exact for a causal LM
    without sampling; ``forward_in_tokens`` is accepted and ignored.

    Use::

        explainer = LLMShapley(LShapley(model), tokenizer)
        result = explainer.attribute(TextTokenInput(prompt, tokenizer), target="h", k=1)
        result.seq_attr  # one value per prompt token

    (``tests/test_captum_wrappers.py`` runs this on a GPT-2 trained in-process.)
    """

    SUPPORTED_METHODS = (PerturbationAttribution,)
    SUPPORTED_PER_TOKEN_ATTR_METHODS = (FeatureAblation, ShapleyValueSampling, ShapleyValues)

    def _get_target_tokens(self, inp: Any, target: Any = None, gen_args: Any = None) -> Tensor:
        tokens = super()._get_target_tokens(inp, target, gen_args)
        # The method expands tensor arguments whose first size is the batch's (1) once
        # per coalition, as Captum does: a one-token target arrives repeated.
        self._target_length = int(tokens.numel())
        return tokens

    def _forward_func(
        self,
        perturbed_tensor: Tensor | None,
        inp: Any,
        target_tokens: Tensor,
        use_cached_outputs: bool = False,
        _inspect_forward: Any = None,
        forward_in_tokens: bool = True,
    ) -> Tensor:
        """``(P,)`` scores of P perturbed prompts (``(P, 1 + T)`` per token), one forward."""
        prompts = self._prompt_ids(perturbed_tensor, inp)
        length = getattr(self, "_target_length", target_tokens.numel())
        target = target_tokens.reshape(-1)[:length].to(self.device)
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        total = lengths + target.numel()
        width = int(total.max())
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=self.device)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = prompt
            ids[row, len(prompt) : len(prompt) + target.numel()] = target
        attention = (torch.arange(width, device=self.device)[None, :] < total[:, None]).long()
        with torch.no_grad():
            logits = self.model(input_ids=ids, attention_mask=attention).logits
        if logits.dim() == 4:  # (P, 1, L, V) from some models
            logits = logits[:, 0]
        # logits at position j predict token j + 1: the answer's T tokens
        positions = lengths[:, None] - 1 + torch.arange(target.numel(), device=self.device)
        picked = torch.log_softmax(
            logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1])), dim=-1
        )
        token_log_probs = picked.gather(2, target.expand(len(prompts), -1)[..., None])[..., 0]
        total_log_prob = token_log_probs.sum(dim=1)
        if self.include_per_token_attr:
            scores = torch.cat([total_log_prob[:, None], token_log_probs], dim=1)
        else:
            scores = total_log_prob
        return scores if self.attr_target == "log_prob" else torch.exp(scores)

    def _prompt_ids(self, perturbed_tensor: Tensor | None, inp: Any) -> list[Tensor]:
        """Token ids of each perturbed prompt (they may differ in length, e.g. templates)."""
        if perturbed_tensor is None:
            perturbed_tensor = inp.to_tensor()
        rows = []
        for row in perturbed_tensor:
            model_input = self._format_model_input(inp.to_model_input(row[None]))
            rows.append(model_input["input_ids"][0].to(self.device))
        return rows
