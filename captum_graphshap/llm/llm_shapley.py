"""``LLMShapley``: Captum's LLM attribution, with many coalitions per model call.

Captum's :class:`~captum.attr.LLMAttribution` calls the language model once per
perturbed prompt (its forward takes one prompt). ``LLMShapley`` keeps its call
and its :class:`~captum.attr.LLMAttributionResult` (so ``plot_token_attr`` and
``plot_seq_attr`` work) and replaces the forward: the perturbed prompts of a
chunk of coalitions, each followed by the target tokens, are right-padded into
one batch with an attention mask and scored in one forward pass. Any method of
this package can be wrapped; L-/C-Shapley get the prompt's graph
(:func:`~captum_graphshap.llm.prompt_graph`), and Bivariate Shapley returns its
interaction matrices next to the univariate values.
"""

from __future__ import annotations

from typing import Any

import torch
from captum.attr import (
    FeatureAblation,
    LLMAttribution,
    LLMAttributionResult,
    PerturbationAttribution,
    ShapleyValues,
    ShapleyValueSampling,
    TextTokenInput,
)
from torch import Tensor

from ..attr.bivariate_shapley import BivariateShapley
from ..attr.graph_family import GraphAttribution
from .prompt_graph import prompt_graph


class LLMBivariateResult(LLMAttributionResult):
    """An ``LLMAttributionResult`` with Bivariate Shapley's matrices.

    ``seq_attr``/``token_attr`` hold the univariate (exact, sampled or
    L-Shapley) values the same evaluations give, so every Captum plot works;
    ``seq_interactions[i, j]`` is ``E2[i, j]``, the importance of prompt
    feature ``i`` when ``j`` is present, for the answer's log-probability,
    and ``token_interactions[t]`` the same for answer token ``t``.
    """

    seq_interactions: Tensor
    token_interactions: Tensor | None


class LLMShapley(LLMAttribution):
    """Token or segment attribution of a generative LM's answer, batched.

    The same call as :class:`captum.attr.LLMAttribution`:
    ``LLMShapley(method, tokenizer).attribute(inp, target=..., **method_options)``
    with ``inp`` a ``TextTokenInput`` or ``TextTemplateInput`` and ``target``
    a string or a tensor of token ids, returning an ``LLMAttributionResult``
    with ``seq_attr`` (the answer's log-probability, or probability with
    ``attr_target="prob"``) and, for Shapley-family methods, ``token_attr``
    (one row per answer token: its own log-probability).

    The answer is scored in sequence form (prompt and target in one pass, as
    Captum's ``forward_in_tokens=False``), which is exact for a causal LM
    without sampling; ``forward_in_tokens`` is accepted and ignored. Token
    prompts are perturbed as one tensor; template prompts are formatted and
    tokenised per coalition (a tokenizer need not split a text at segment
    boundaries), then padded into one batch.

    Graph methods (``LShapley``, ``CShapley``, ``MyersonValue``, and
    ``BivariateShapley`` with ``k=``) get ``graph=prompt_graph(inp)`` unless
    a graph is given: a line over the tokens, or over the template's
    segments in the order they appear in the prompt (which may differ from
    the order of ``values``).

    ``BivariateShapley`` (``(1, d, d)`` per output, a shape
    ``LLMAttribution`` cannot hold) returns an :class:`LLMBivariateResult`.

    Example:
        >>> import torch
        >>> from captum.attr import TextTokenInput
        >>> from captum_graphshap import LShapley
        >>> from captum_graphshap.llm import LLMShapley, toy_task
        >>> model, tokenizer = toy_task.trained_model(steps=5), toy_task.LetterTokenizer()
        >>> result = LLMShapley(LShapley(model), tokenizer).attribute(
        ...     TextTokenInput("c # h a d", tokenizer), target="h", k=1
        ... )
        >>> result.seq_attr.shape, result.token_attr.shape
        (torch.Size([5]), torch.Size([1, 5]))
    """

    SUPPORTED_METHODS = (PerturbationAttribution,)
    SUPPORTED_PER_TOKEN_ATTR_METHODS = (
        FeatureAblation,
        ShapleyValueSampling,
        ShapleyValues,
        BivariateShapley,
    )

    def attribute(
        self,
        inp: Any,
        target: str | Tensor | None = None,
        num_trials: int = 1,
        gen_args: dict[str, Any] | None = None,
        use_cached_outputs: bool = True,
        _inspect_forward: Any = None,
        forward_in_tokens: bool = True,
        **kwargs: Any,
    ) -> LLMAttributionResult:
        """Captum's ``LLMAttribution.attribute``; ``kwargs`` go to the wrapped method."""
        method = self.attr_method
        if kwargs.get("graph") is None and (
            isinstance(method, GraphAttribution)
            or (isinstance(method, BivariateShapley) and kwargs.get("k") is not None)
        ):
            kwargs["graph"] = prompt_graph(inp)
        if not isinstance(method, BivariateShapley):
            return super().attribute(
                inp,
                target,
                num_trials,
                gen_args,
                use_cached_outputs,
                _inspect_forward,
                forward_in_tokens,
                **kwargs,
            )
        return self._attribute_bivariate(inp, target, num_trials, gen_args, **kwargs)

    def _attribute_bivariate(
        self, inp: Any, target: Any, num_trials: int, gen_args: Any, **kwargs: Any
    ) -> LLMBivariateResult:
        target_tokens = self._get_target_tokens(inp, target, gen_args=gen_args)
        outputs = 1 + len(target_tokens)
        n = inp.n_itp_features
        matrix = torch.zeros(outputs, n, n, device=self.device)
        shapley = torch.zeros(outputs, n, device=self.device)
        for _ in range(num_trials):
            result = self.attr_method.attribute(
                inp.to_tensor().to(self.device),
                additional_forward_args=(inp, target_tokens),
                return_shapley=True,
                **kwargs,
            )
            matrix += result.attributions.reshape(matrix.shape).to(matrix.dtype)
            shapley += result.shapley.reshape(shapley.shape).to(shapley.dtype)
        matrix, shapley = matrix / num_trials, shapley / num_trials
        # features of a masked template: scatter both axes of the matrix
        matrix = inp.format_attr(inp.format_attr(matrix).transpose(-1, -2)).transpose(-1, -2)
        shapley = inp.format_attr(shapley)
        from captum.attr._core.llm_attr import _convert_ids_to_pretty_tokens

        result = LLMBivariateResult(
            seq_attr=shapley[0],
            token_attr=shapley[1:],
            input_tokens=inp.values,
            output_tokens=_convert_ids_to_pretty_tokens(target_tokens, self.tokenizer),
            inp=inp,
        )
        result.seq_interactions = matrix[0]
        result.token_interactions = matrix[1:]
        return result

    def _get_target_tokens(self, inp: Any, target: Any = None, gen_args: Any = None) -> Tensor:
        if target is not None and not isinstance(target, (str, Tensor)):
            raise TypeError(
                "target must be a string or a tensor of token ids (Captum's convention), "
                f"got {type(target).__name__}."
            )
        tokens = super()._get_target_tokens(inp, target, gen_args).reshape(-1)
        if tokens.numel() == 0:
            raise ValueError("target has no tokens: give a non-empty string or token ids.")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"target token ids must be integers, got dtype {tokens.dtype}.")
        # The method expands tensor arguments whose first size is the batch's (1) once
        # per coalition, as Captum does: a one-token target arrives repeated.
        self._target_length = int(tokens.numel())
        return tokens.long()

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
        ids, lengths = self._prompt_ids(perturbed_tensor, inp)
        length = getattr(self, "_target_length", target_tokens.numel())
        target = target_tokens.reshape(-1)[:length].to(self.device)
        count, steps = ids.shape[0], target.numel()
        width = ids.shape[1] + steps
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        full = torch.full((count, width), pad, dtype=torch.long, device=self.device)
        full[:, : ids.shape[1]] = ids
        answer = lengths[:, None] + torch.arange(steps, device=self.device)  # (P, T)
        full.scatter_(1, answer, target.expand(count, -1))
        attention = (torch.arange(width, device=self.device) < (lengths + steps)[:, None]).long()
        with torch.no_grad():
            logits = self.model(input_ids=full, attention_mask=attention).logits
        if logits.dim() == 4:  # (P, 1, L, V) from some models
            logits = logits[:, 0]
        # logits at position j predict token j + 1: the answer's T tokens
        picked = logits.gather(1, (answer - 1)[..., None].expand(-1, -1, logits.shape[-1]))
        log_probs = torch.log_softmax(picked.float(), dim=-1)
        token_log_probs = log_probs.gather(2, target.expand(count, -1)[..., None])[..., 0]
        total_log_prob = token_log_probs.sum(dim=1)
        if self.include_per_token_attr:
            scores = torch.cat([total_log_prob[:, None], token_log_probs], dim=1)
        else:
            scores = total_log_prob
        return scores if self.attr_target == "log_prob" else torch.exp(scores)

    def _prompt_ids(self, perturbed_tensor: Tensor | None, inp: Any) -> tuple[Tensor, Tensor]:
        """Right-padded ``(P, L)`` token ids of the perturbed prompts and their lengths."""
        if perturbed_tensor is None:
            perturbed_tensor = inp.to_tensor()
        if isinstance(inp, TextTokenInput):  # one tensor operation for every coalition
            ids = self._format_model_input(inp.to_model_input(perturbed_tensor))["input_ids"]
            ids = ids.to(self.device)
            lengths = torch.full((ids.shape[0],), ids.shape[1], device=self.device)
            return ids, lengths
        rows = [
            self._format_model_input(inp.to_model_input(row[None]))["input_ids"][0]
            for row in perturbed_tensor
        ]
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad)
        lengths = torch.tensor([len(row) for row in rows])
        return ids.to(self.device), lengths.to(self.device)
