"""``LLMShapley``: Captum's LLM attribution, with many coalitions per model call.

Captum's :class:`~captum.attr.LLMAttribution` calls the language model once per
perturbed prompt (its forward takes one prompt). ``LLMShapley`` keeps its call,
its arguments and its :class:`~captum.attr.LLMAttributionResult` (so
``plot_token_attr`` and ``plot_seq_attr`` work), and replaces the forward: the
perturbed prompts of a chunk of coalitions go through the model together,
scored as Captum scores one (``forward_in_tokens=True``: answer token by answer
token; ``False``: prompt and answer in one pass), so the values are Captum's.
Any method of this package can be wrapped; L-/C-Shapley get the prompt's graph
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
    TextTemplateInput,
    TextTokenInput,
)
from torch import Tensor

from .._warnings import warn_caller
from ..attr.base import GameAttribution
from ..attr.bivariate_shapley import BivariateShapley
from ..attr.graph_family import GraphAttribution
from ..engine.chunk_runner import is_out_of_memory
from .model_api import (
    cache_keyword,
    context_length,
    is_causal_cache,
    is_causal_lm,
    logits_kept,
    returned_cache,
)
from .prefix_cache import MIN_PROMPT_TOKENS, shared_prefix_scores
from .prompt_graph import prompt_graph

_EMPTY_PROMPT = (
    "inp: a perturbed prompt tokenises to no tokens (a template of placeholders only, "
    "every segment at an empty baseline, and a tokenizer that adds no start token), so "
    "no position predicts the answer's first token. Give the template fixed text (e.g. "
    "'Q: {} {}'), non-empty baselines (TextTemplateInput(..., baselines=[...])), or a "
    "tokenizer that adds a start token."
)


#: Rows per model call without ``perturbations_per_eval``: about this many prompt
#: tokens (256 prompts of 256 tokens; a 1B decoder's key/value cache of them takes
#: 1.5 GiB in bf16). Out of memory still halves the call.
TOKENS_PER_CALL = 2**16
#: With the shared prompt prefix (``LLMShapley.share_prompt_prefix``) a call takes
#: this many times the rows, still scored at most ``TOKENS_PER_CALL`` prompt tokens'
#: rows a forward: more rows to sort by shared prefix, fewer tokens each.
SHARED_PREFIX_ROWS = 8
#: ``max_new_tokens`` of Captum's ``DEFAULT_GEN_ARGS``, used when ``gen_args`` is None
CAPTUM_MAX_NEW_TOKENS = 25


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

    The answer is scored as Captum's ``LLMAttribution`` scores it, for the same
    arguments, so the values are Captum's: with ``forward_in_tokens=True`` (the
    default) token by token, each answer token from the prompt and the answer
    tokens before it (with ``use_cached_outputs``, the default, a transformers
    causal LM takes prompt and answer in one forward, the causal mask giving
    each answer token the logits stepping would, and another model's prompt
    cache serves the answer tokens: the same values; Captum 0.9.0's cached
    path differs from its own uncached one under transformers 5, see
    docs/guide/captum_users.md); with ``forward_in_tokens=False`` prompt and answer in one
    forward, which is
    faster for long answers and equal for a causal LM (Captum calls it an
    approximation). Either way the prompts of a chunk of coalitions share the
    forward passes: those of one length form one unpadded batch, so no model
    needs to be causal or to honour an attention mask. Token prompts are
    perturbed as one tensor (one length); template prompts are formatted and
    tokenised per coalition (a tokenizer need not split a text at segment
    boundaries), then grouped by length. With ``use_cached_outputs`` a
    transformers causal LM's prompts (32 tokens or more) are scored after their
    common prefix's key/value cache, computed once per chunk
    (``captum_graphshap.llm.prefix_cache``): L-/C-Shapley's prompts differ
    from one reference only in a window, and a permutation sampler's nested
    coalitions share prefixes among themselves (computed block by block,
    once per distinct prefix), so about half their tokens are not
    recomputed; ``share_prompt_prefix = False`` turns this off.

    A prompt that tokenises to no tokens (a template of placeholders only, all
    at an empty baseline, with a tokenizer that adds no start token) leaves no
    position to predict the answer from: it is refused with a ``ValueError``
    before any model call.

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
        >>> from captum_graphshap.apps import toy_task
        >>> from captum_graphshap.llm import LLMShapley
        >>> model, tokenizer = toy_task.trained_model(steps=5), toy_task.LetterTokenizer()
        >>> result = LLMShapley(LShapley(model), tokenizer).attribute(
        ...     TextTokenInput("c # h a d", tokenizer), target="h", k=1
        ... )
        >>> result.seq_attr.shape, result.token_attr.shape
        (torch.Size([5]), torch.Size([1, 5]))
    """

    SUPPORTED_METHODS = (PerturbationAttribution,)
    #: the forward takes a chunk of coalitions per call (Captum's takes one prompt;
    #: the engine starts those at one coalition per call, see ``takes_one_prompt``)
    batches_coalitions = True
    SUPPORTED_PER_TOKEN_ATTR_METHODS = (
        FeatureAblation,
        ShapleyValueSampling,
        ShapleyValues,
        BivariateShapley,
    )
    #: transformers causal LMs score a chunk's prompts on their shared prefix's
    #: key/value cache, computed once (``captum_graphshap.llm.prefix_cache``),
    #: with ``use_cached_outputs``; False scores every prompt in full
    share_prompt_prefix = True

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
        self._check_prompts_not_empty(inp)
        prompt_tokens = self._check_context(inp)
        self._forward_rows: int | None = None
        if isinstance(method, GameAttribution) and kwargs.get("perturbations_per_eval") is None:
            # rows of a prompt cost its tokens: size calls by tokens, not by the
            # (tiny) coalition tensor the engine sizes its calls by otherwise
            rows = max(1, TOKENS_PER_CALL // max(1, prompt_tokens))
            kwargs["perturbations_per_eval"] = rows
            if self._shares_prefix(use_cached_outputs, prompt_tokens):
                kwargs["perturbations_per_eval"] = rows * SHARED_PREFIX_ROWS
                self._forward_rows = rows
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
        scoring = (use_cached_outputs, _inspect_forward, forward_in_tokens)
        return self._attribute_bivariate(inp, target, num_trials, gen_args, scoring, **kwargs)

    def _shares_prefix(self, use_cached_outputs: bool, prompt_tokens: int) -> bool:
        """Whether prompts of ``prompt_tokens`` tokens may be scored on their shared
        prefix's cache (then calls take more rows, forwards no more than before)."""
        return (
            self.share_prompt_prefix
            and use_cached_outputs
            and prompt_tokens >= MIN_PROMPT_TOKENS
            and is_causal_lm(self.model)
        )

    def _attribute_bivariate(
        self,
        inp: Any,
        target: Any,
        num_trials: int,
        gen_args: Any,
        scoring: tuple[Any, ...],
        **kwargs: Any,
    ) -> LLMBivariateResult:
        target_tokens = self._get_target_tokens(inp, target, gen_args=gen_args)
        outputs = 1 + len(target_tokens)
        n = inp.n_itp_features
        matrix = torch.zeros(outputs, n, n, device=self.device)
        shapley = torch.zeros(outputs, n, device=self.device)
        for _ in range(num_trials):
            result = self.attr_method.attribute(
                inp.to_tensor().to(self.device),
                additional_forward_args=(inp, target_tokens, *scoring),
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
        if target is None:
            # generation past the context fails inside generate (GPT-2: an index
            # error) or after it has run the model: refuse before
            self._check_context(inp, answer=self._tokens_to_generate(inp, gen_args))
        tokens = super()._get_target_tokens(inp, target, gen_args).reshape(-1)
        if tokens.numel() == 0:
            raise ValueError("target has no tokens: give a non-empty string or token ids.")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"target token ids must be integers, got dtype {tokens.dtype}.")
        self._check_context(inp, answer=int(tokens.numel()))
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
        """``(P,)`` scores of P perturbed prompts (``(P, 1 + T)`` per token), batched.

        Prompts of equal length go through the model together, unpadded, so each
        row sees exactly the sequence Captum's one-prompt forward sees: the values
        do not rely on the model being causal or honouring an attention mask.
        """
        ids, lengths = self._prompt_ids(perturbed_tensor, inp)
        length = getattr(self, "_target_length", target_tokens.numel())
        target = target_tokens.reshape(-1)[:length].to(self.device)
        if bool((lengths == 0).any()):
            raise ValueError(_EMPTY_PROMPT)
        token_log_probs = torch.empty(ids.shape[0], target.numel(), device=self.device)
        # one group per distinct prompt length (one for token prompts); templates
        # whose segments tokenise to other lengths give a few groups, not one per row
        for size in lengths.unique().tolist():
            rows = (lengths == size).nonzero()[:, 0]
            prompts = ids[rows, :size]
            if forward_in_tokens:
                scores = self._score_token_by_token(prompts, target, use_cached_outputs)
            else:
                scores = self._score_in_one_pass(prompts, target, use_cached_outputs)
            token_log_probs[rows] = scores.to(token_log_probs.dtype)
        total_log_prob = token_log_probs.sum(dim=1)
        if self.include_per_token_attr:
            log_probs = torch.cat([total_log_prob[:, None], token_log_probs], dim=1)
        else:
            log_probs = total_log_prob
        probs = torch.exp(log_probs)
        if _inspect_forward is not None and forward_in_tokens:
            # Captum's callback, once per prompt: (prompt, response, probabilities)
            response = self.tokenizer.decode(target)
            for row in range(ids.shape[0]):
                prompt = self.tokenizer.decode(ids[row, : int(lengths[row])])
                _inspect_forward(prompt, response, probs[row].reshape(-1).tolist())
        return log_probs if self.attr_target == "log_prob" else probs

    def _logits(self, outputs: Any) -> Tensor:
        logits = outputs.logits
        if logits.dim() == 4:  # (P, 1, L, V) from some models (Llama 4), as in Captum
            logits = logits[:, 0]
        return logits

    def _answer_scores(self, outputs: Any, target: Tensor) -> Tensor:
        """``(P, T)`` log-probabilities of the answer from a forward that ends with it."""
        # the last T + 1 positions (or all): the T before the last predict the answer
        logits = self._logits(outputs)[:, -(target.numel() + 1) : -1]
        return _answer_log_probs(logits, target)

    def _score_in_one_pass(
        self, prompts: Tensor, target: Tensor, share_prefix: bool = False
    ) -> Tensor:
        """``(P, T)`` log-probabilities of the answer, prompt and answer in one forward.

        Captum's ``forward_in_tokens=False`` for P prompts of one length; logits
        only at the T positions that predict the answer where the model allows.
        With ``share_prefix`` (``use_cached_outputs``) a transformers causal LM
        computes the prompts' shared prefix once where that saves tokens
        (:func:`~captum_graphshap.llm.prefix_cache.shared_prefix_scores`).
        Forwards take at most the rows ``attribute`` sized them for; out of
        memory halves those (and keeps them halved for the calls after).
        """
        rows = getattr(self, "_forward_rows", None)
        while True:
            try:
                return self._scored_in_parts(prompts, target, share_prefix, rows)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                # attribute gave this call several forwards' rows (the shared
                # prefix's sort): halving the call would not shrink its forwards
                if rows is None or rows <= 1 or not is_out_of_memory(error):
                    raise
                rows = self._forward_rows = rows // 2
                warn_caller(
                    f"out of memory in a forward call; retrying with {rows} rows per "
                    "forward (halved).",
                    RuntimeWarning,
                )
                if prompts.is_cuda:
                    torch.cuda.empty_cache()

    def _scored_in_parts(
        self, prompts: Tensor, target: Tensor, share_prefix: bool, rows: int | None
    ) -> Tensor:
        """:meth:`_score_in_one_pass` with forwards of at most ``rows`` rows."""
        if share_prefix and self.share_prompt_prefix and is_causal_lm(self.model):
            shared = shared_prefix_scores(
                self.model, prompts, target, self._answer_scores, max_rows=rows
            )
            if shared is not None:
                return shared
        scores = []
        for part in prompts.split(rows or prompts.shape[0]):
            full = torch.cat([part, target.expand(part.shape[0], -1)], dim=1)
            with torch.no_grad():
                outputs = self.model.forward(
                    input_ids=full,
                    attention_mask=torch.ones_like(full),
                    **logits_kept(self.model, target.numel() + 1),
                )
            scores.append(self._answer_scores(outputs, target))
        return torch.cat(scores)

    def _score_token_by_token(
        self, prompts: Tensor, target: Tensor, use_cached_outputs: bool
    ) -> Tensor:
        """``(P, T)`` log-probabilities of the answer, token t from the prompt and ``target[:t]``.

        Captum's ``forward_in_tokens=True`` (the default) for P prompts of one
        length at once. With ``use_cached_outputs``, a transformers causal LM
        (:func:`~captum_graphshap.llm.model_api.is_causal_lm`) takes prompt and
        answer in one forward, whose causal mask gives each answer token the
        logits stepping would; for other models the prompt goes through the
        model once and its key/value cache serves every answer token: a
        transformers decoder (its cache a ``transformers.Cache``, appended
        tokens masked causally) takes the answer's first T - 1 tokens in one
        more forward after it, so a long prompt with a short answer costs about
        one pass; another model's cache is fed one new token per step.
        Without it, each step recomputes the whole sequence, as Captum does.
        """
        count, steps = prompts.shape[0], target.numel()
        if not use_cached_outputs:
            return self._score_uncached(prompts, target)
        if is_causal_lm(self.model):
            # teacher forcing: the causal mask gives each answer token the logits
            # stepping would, in one forward instead of two
            return self._score_in_one_pass(prompts, target, share_prefix=True)
        keyword = cache_keyword(self.model)
        with torch.no_grad():
            outputs = self.model.forward(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                use_cache=True,
                **logits_kept(self.model, 1),
            )
            cache = returned_cache(outputs)
            if cache is None:  # a model without a cache: recompute each step
                return self._score_uncached(prompts, target)
            first = _answer_log_probs(self._logits(outputs)[:, -1:], target[:1])
            if steps == 1:
                return first
            answer = target[:-1].expand(count, -1)
            if is_causal_cache(cache):
                outputs = self.model.forward(
                    input_ids=answer,
                    attention_mask=torch.ones(
                        count,
                        prompts.shape[1] + steps - 1,
                        dtype=prompts.dtype,
                        device=prompts.device,
                    ),
                    use_cache=True,
                    **{keyword: cache},
                )
                rest = _answer_log_probs(self._logits(outputs), target[1:])
                return torch.cat([first, rest], dim=1)
            columns = [first]
            for step in range(1, steps):
                # Captum 0.9.0 steps with the model's generation helpers
                # instead; under transformers 5 those no longer advance
                # cache_position, and it re-feeds the whole sequence.
                outputs = self.model.forward(
                    input_ids=answer[:, step - 1 : step],
                    attention_mask=torch.ones(
                        count,
                        prompts.shape[1] + step,
                        dtype=prompts.dtype,
                        device=prompts.device,
                    ),
                    use_cache=True,
                    **{keyword: returned_cache(outputs)},
                )
                columns.append(
                    _answer_log_probs(self._logits(outputs)[:, -1:], target[step : step + 1])
                )
        return torch.cat(columns, dim=1)

    def _score_uncached(self, prompts: Tensor, target: Tensor) -> Tensor:
        """``(P, T)``: token t scored from a forward over the prompt and ``target[:t]``."""
        count = prompts.shape[0]
        columns = []
        with torch.no_grad():
            for step in range(target.numel()):
                ids = torch.cat([prompts, target[:step].expand(count, -1)], dim=1)
                outputs = self.model.forward(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    use_cache=False,
                    **logits_kept(self.model, 1),
                )
                columns.append(
                    _answer_log_probs(self._logits(outputs)[:, -1:], target[step : step + 1])
                )
        return torch.cat(columns, dim=1)

    def _check_prompts_not_empty(self, inp: Any) -> None:
        """Refuse, before any model call, a prompt that can tokenise to nothing."""
        if not isinstance(inp, TextTemplateInput) or callable(inp.baselines):
            return  # token prompts keep their length; callable baselines vary per call
        present = inp.to_tensor()
        for coalition in (torch.zeros_like(present), present):  # all absent, all present
            ids = self._format_model_input(inp.to_model_input(coalition))["input_ids"]
            if ids.numel() == 0:
                raise ValueError(_EMPTY_PROMPT)

    def _tokens_to_generate(self, inp: Any, gen_args: dict[str, Any] | None) -> int:
        """The most tokens ``generate`` may add: ``max_new_tokens`` (Captum's default
        25 without ``gen_args``), else what ``max_length`` leaves after the prompt."""
        settings = gen_args or {"max_new_tokens": CAPTUM_MAX_NEW_TOKENS}
        config = getattr(self.model, "generation_config", None)
        new = settings.get("max_new_tokens", getattr(config, "max_new_tokens", None))
        if new is not None:
            return int(new)
        total = settings.get("max_length", getattr(config, "max_length", None))
        if total is None:
            return 0
        prompt = self._format_model_input(inp.to_model_input())["input_ids"].shape[-1]
        return max(0, int(total) - int(prompt))

    def _check_context(self, inp: Any, answer: int = 0) -> int:
        """The prompt's tokens; refused, before any attribution's model call, when the
        prompt and answer pass the model's context.

        The longest perturbed prompt is the full one or, for a template, the one
        with each feature's longer text (:meth:`_longest_template_coalition`);
        ``answer`` tokens follow it (0 before the target is known).
        """
        if not hasattr(inp, "to_tensor"):
            return 1
        present = inp.to_tensor()
        coalitions = [present]
        if isinstance(inp, TextTemplateInput) and not callable(inp.baselines):
            coalitions += self._longest_template_coalition(inp, present)
        lengths = [self._prompt_length(inp, c) for c in coalitions]
        prompt = max(lengths)
        which = "the prompt" if prompt == lengths[0] else "the longest perturbed prompt"
        limit = context_length(self.model)
        if limit is not None and prompt + answer > limit:
            with_answer = f" and the answer's {answer}" if answer else ""
            raise ValueError(
                f"inp: {which} has {prompt} tokens{with_answer}, more than the model's "
                f"context of {limit} positions (its config's max_position_embeddings); "
                "shorten the prompt or the answer (gen_args' max_new_tokens when target is "
                f"generated: at most {max(limit - prompt, 0)} here), or use a model with a "
                "longer context."
            )
        return prompt

    def _prompt_length(self, inp: Any, coalition: Tensor) -> int:
        return int(self._format_model_input(inp.to_model_input(coalition))["input_ids"].shape[-1])

    def _longest_template_coalition(self, inp: Any, present: Tensor) -> list[Tensor]:
        """The template's prompt of all baselines, and the one with each feature whose
        value lengthens that prompt present: a value longer than its baseline and
        another's baseline longer than its value make a mixed prompt longer than
        both the full and the all-baseline one (a GPT-2 then failed mid-run on
        positions past its table, a Llama scored prompts past its context).
        Tokens are counted per feature, one tokenisation each."""
        absent = torch.zeros_like(present)
        base = self._prompt_length(inp, absent)
        longer = absent.clone()
        for feature in range(present.shape[-1]):
            alone = absent.clone()
            alone[..., feature] = 1
            longer[..., feature] = float(self._prompt_length(inp, alone) > base)
        return [absent, longer]

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


def _answer_log_probs(logits: Tensor, tokens: Tensor) -> Tensor:
    """``(P, T)`` log-probabilities of ``tokens[t]`` under ``logits[:, t]`` (``(P, T, V)``).

    The softmax runs in float32 at least: bf16 logits normalised in bf16 lose
    about two decimal digits of every log-probability.
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    log_probs = torch.log_softmax(logits.to(dtype), dim=-1)
    return log_probs.gather(2, tokens.expand(logits.shape[0], -1)[..., None])[..., 0]
