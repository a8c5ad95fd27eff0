"""A fuzzing harness: random uneven trees, budgets, models and prompts, with hostile edges.

Each property is checked on examples hypothesis draws: trees up to four
levels deep with groups of 1-12 and single leaves among them, budgets from
2 to past the exact count, additive, pairwise and tanh-MLP models, prompts
against a language model's context. They assert what no answer may break:

* no example costs more model rows than ``budget=``;
* the spend is at least 0.8 of ``min(budget, exact count)``;
* efficiency holds (the values add up to f(x) - f(b));
* at the exact count (and past it) the value is the exact Winter value;
* on games of order two, against any baseline, the Owen and Winter values are
  the closed-form Shapley values (a reference independent of our exact plan);
* examples explained together equal each explained alone (per-example
  hierarchies without a budget are exact; with one, from the same seed);
* bad input is refused before any model call.

Bounded in time: the examples are few and derandomised on CI (the same
cases every run); ``GRAPHSHAP_FUZZ_EXAMPLES=500`` fuzzes harder locally,
with fresh draws.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from captum_graphshap import Hierarchy, OwenValue
from captum_graphshap.plans.owen import winter_coalition_count

EXAMPLES = int(os.environ.get("GRAPHSHAP_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 30,
    deadline=None,
    derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
#: exact counts above this are left to the budgeted cases (the exact plan is the reference)
MAX_EXACT = 3000


def _nested(draw: st.DrawFn, ids: list[int], depth: int) -> object:
    """Ids split into groups of 1-12 (a group of one is a single leaf), ``depth`` levels."""
    if len(ids) == 1:
        return ids[0]
    if depth == 0:
        return ids
    parts, start = [], 0
    while start < len(ids):
        size = draw(st.integers(1, min(12, len(ids) - start)))
        parts.append(_nested(draw, ids[start : start + size], depth - 1))
        start += size
    return parts if len(parts) > 1 else ids


@st.composite
def uneven_trees(draw: st.DrawFn, max_features: int = 14) -> Hierarchy:
    d = draw(st.integers(2, max_features))
    ids = draw(st.permutations(list(range(d))))
    return Hierarchy.from_nested(_nested(draw, list(ids), draw(st.integers(1, 4))), d)


def budget_for(draw: st.DrawFn, exact: int) -> int:
    """Tiny, a share of the exact count, one below it, at it, or past it."""
    kind = draw(st.sampled_from(["tiny", "fifth", "half", "below", "exact", "past"]))
    if kind == "tiny":
        return draw(st.integers(2, 24))
    share = {"fifth": 0.2, "half": 0.5, "below": 1.0, "exact": 1.0, "past": 1.5}[kind]
    return max(2, int(exact * share) - (kind == "below"))


def model_for(kind: str, d: int, seed: int):
    """``(N, d) -> (N, 2)`` float64: additive, pairwise or a tanh MLP."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, 2, generator=g, dtype=torch.float64)
    if kind == "additive":
        return lambda z: z @ w
    if kind == "pairwise":
        pair = torch.randn(d, d, generator=g, dtype=torch.float64) / d
        return lambda z: z @ w + ((z @ pair) * z).sum(1, keepdim=True)
    hidden = torch.randn(d, 16, generator=g, dtype=torch.float64)
    out = torch.randn(16, 2, generator=g, dtype=torch.float64)
    return lambda z: torch.tanh(z @ hidden) @ out


class Counted:
    """A model that counts the rows it sees, or refuses to be called at all."""

    def __init__(self, model=None):
        self.model, self.rows = model, 0

    def __call__(self, z):
        if self.model is None:
            raise AssertionError("the model was called before the input was refused")
        self.rows += z.shape[0]
        return self.model(z)


@FUZZ
@given(
    data=st.data(),
    tree=uneven_trees(),
    kind=st.sampled_from(["additive", "pairwise", "mlp"]),
    seed=st.integers(0, 2**16),
)
def test_budgeted_walk_spends_within_budget_efficiently_and_exactly_at_the_count(
    data, tree, kind, seed
):
    exact = winter_coalition_count(tree)
    assume(exact <= MAX_EXACT)
    budget = budget_for(data.draw, exact)
    d = tree.num_features
    f = model_for(kind, d, seed)
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    model = Counted(f)
    result = OwenValue(model).attribute(
        x,
        target=1,
        hierarchy=tree,
        budget=budget,
        generator=torch.Generator().manual_seed(seed),
        return_evaluations=True,
    )
    spent = result.n_evaluations
    assert (spent <= budget).all() and model.rows <= 3 * budget, (spent, budget, model.rows)
    assert (spent >= 0.8 * min(budget, exact)).all(), (spent, budget, exact)
    gap = f(x)[:, 1] - f(torch.zeros_like(x))[:, 1]
    torch.testing.assert_close(result.attributions.sum(1), gap, atol=1e-9, rtol=0)
    if budget >= exact:
        reference = OwenValue(f).attribute(x, target=1, hierarchy=tree)
        torch.testing.assert_close(result.attributions, reference, atol=1e-9, rtol=0)


@FUZZ
@given(
    trees=st.lists(uneven_trees(max_features=9), min_size=2, max_size=3),
    kind=st.sampled_from(["pairwise", "mlp"]),
    seed=st.integers(0, 2**16),
    budget=st.integers(2, 200),
)
def test_per_example_hierarchies_equal_single_runs(trees, kind, seed, budget):
    d = max(t.num_features for t in trees)
    # the same features for every example: the missing ids join each root as leaves
    trees = [Hierarchy.from_nested([*t.to_nested(), *range(t.num_features, d)], d) for t in trees]
    assume(max(winter_coalition_count(t) for t in trees) <= MAX_EXACT)
    f = model_for(kind, d, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(trees), d, generator=g, dtype=torch.float64)
    # without a budget: exact, each example its own tree's Winter value
    together = OwenValue(f).attribute(x, target=0, hierarchy=trees)
    alone = torch.cat(
        [OwenValue(f).attribute(x[i : i + 1], target=0, hierarchy=t) for i, t in enumerate(trees)]
    )
    torch.testing.assert_close(together, alone, atol=1e-10, rtol=0)

    # with one: the same seed gives an example the same orderings in any batch
    def budgeted(inputs, hierarchy):
        generator = torch.Generator().manual_seed(seed)
        return OwenValue(f).attribute(
            inputs, target=0, hierarchy=hierarchy, budget=budget, generator=generator
        )

    alone = torch.cat([budgeted(x[i : i + 1], t) for i, t in enumerate(trees)])
    torch.testing.assert_close(budgeted(x, trees), alone, atol=1e-10, rtol=0)


@FUZZ
@given(
    tree=uneven_trees(max_features=8),
    bad=st.sampled_from(
        ["budget0", "budget1", "budget_float", "missing_id", "repeated_id", "extra_id", "too_many"]
    ),
)
def test_bad_input_is_refused_before_any_model_call(tree, bad):
    d = tree.num_features
    x = torch.ones(2, d, dtype=torch.float64)
    nested = tree.to_nested()
    leaves = list(tree.leaves)
    arguments: dict[str, object] = {"hierarchy": tree}
    if bad.startswith("budget"):
        arguments["budget"] = {"budget0": 0, "budget1": 1, "budget_float": 2.5}[bad]
    elif bad == "missing_id":
        assume(d >= 3)
        arguments["hierarchy"] = leaves[:-1]
    elif bad == "repeated_id":
        arguments["hierarchy"] = [nested, leaves[0]]
    elif bad == "extra_id":
        arguments["hierarchy"] = [nested, d + 3]
    else:  # exact plan of 2^21 coalitions and no budget
        x = torch.ones(2, 21, dtype=torch.float64)
        arguments["hierarchy"] = list(range(21))
    with pytest.raises((ValueError, TypeError)):
        OwenValue(Counted()).attribute(x, **arguments)


@FUZZ
@given(
    rows=st.integers(2, 12),
    d=st.integers(1, 6),
    where=st.sampled_from(["nan", "inf", "-inf"]),
    seed=st.integers(0, 2**16),
)
def test_background_with_nan_or_inf_is_refused(rows, d, where, seed):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(rows, d))
    data[rng.integers(rows), rng.integers(d)] = float(where)
    with pytest.raises(ValueError, match="NaN or infinite"):
        Hierarchy.from_background(data)


@settings(max_examples=EXAMPLES or 12, deadline=None, derandomize=not EXAMPLES)
@given(
    context=st.sampled_from([8, 12, 16]),
    prompt=st.integers(1, 18),
    new_tokens=st.integers(1, 8),
    name=st.sampled_from(["gpt2", "llama"]),
)
def test_prompts_against_the_context_are_refused_before_any_model_call(
    context, prompt, new_tokens, name
):
    pytest.importorskip("transformers")
    from captum.attr import TextTokenInput

    import captum_graphshap as cg
    from captum_graphshap.apps import toy_task
    from captum_graphshap.llm import LLMShapley

    from .tiny_lms import tiny_gpt2, tiny_llama

    model = (tiny_gpt2 if name == "gpt2" else tiny_llama)(max_positions=context)
    calls = []
    forward = model.forward

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    tokenizer = toy_task.LetterTokenizer()
    text = " ".join(["c", "#", "h", "a", "d"] * 4)
    inp = TextTokenInput(" ".join(text.split()[:prompt]), tokenizer)
    explainer = LLMShapley(cg.LShapley(model), tokenizer)
    answer = "h a b".split()[: min(3, new_tokens)]
    for target, gen_args, length in (
        (None, {"max_new_tokens": new_tokens, "do_sample": False}, new_tokens),
        (" ".join(answer), None, len(answer)),
    ):
        calls.clear()
        if prompt + length > context:
            with pytest.raises(ValueError, match="context of"):
                explainer.attribute(inp, target=target, gen_args=gen_args, k=1)
            assert calls == []
        elif prompt <= 6:  # small enough to run quickly
            result = explainer.attribute(inp, target=target, gen_args=gen_args, k=1)
            assert calls and result.token_attr.shape[1] == prompt


@FUZZ
@given(
    tree=uneven_trees(),
    seed=st.integers(0, 2**16),
    past=st.booleans(),
)
def test_owen_and_winter_values_of_games_of_order_two_are_their_shapley_values(tree, seed, past):
    """A closed form, not our exact plan, as the reference: ``f(u) = w.u + u'Au``
    against a baseline ``b`` is a game of order two, every pairwise interaction split
    in half by any hierarchy (the quotient game of two groups is their unanimity game,
    and within a group the share is a one-member unanimity game), so the Owen and
    Winter values equal the Shapley values ``D (w + 2 A_s b) + D (A_s D)``,
    ``D = x - b``, ``A_s = (A + A') / 2``; exactly, and by the budgeted walk at or past
    the exact count."""
    exact_count = winter_coalition_count(tree)
    assume(exact_count <= MAX_EXACT)
    d = tree.num_features
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    a = torch.randn(d, d, generator=g, dtype=torch.float64) / d
    x = torch.randn(2, d, generator=g, dtype=torch.float64)
    b = torch.randn(1, d, generator=g, dtype=torch.float64)

    def f(z: torch.Tensor) -> torch.Tensor:
        return (z @ w + ((z @ a) * z).sum(1))[:, None]

    symmetric = (a + a.T) / 2
    gap = x - b
    want = gap * (w + 2 * b @ symmetric) + gap * (gap @ symmetric)
    options = {"budget": exact_count + (7 if past else 0), "generator": g} if seed % 2 else {}
    got = OwenValue(f).attribute(x, baselines=b, target=0, hierarchy=tree, **options)
    torch.testing.assert_close(got, want, atol=1e-10 * float(want.abs().max()), rtol=0)
