"""The coalition engine against a naive loop: one model call per (example, coalition)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.engine.dedup import unique_coalitions


class TwoInputModel(nn.Module):
    """Tuple input, a per-example tensor argument and a plain float argument."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x1, x2, scale, offset=0.0):
        h = torch.tanh(self.a(x1.flatten(1)) + self.b(x2.flatten(1)))
        return (h * scale[:, None] + offset).reshape(-1, 2, 2)


def naive_values(model, inputs, baselines, masks, coalitions, args, target):
    """v[n, m] by building every perturbed example on its own."""
    batch = inputs[0].shape[0]
    out = torch.empty(batch, coalitions.shape[0], dtype=torch.float64)
    for n in range(batch):
        for m, coalition in enumerate(coalitions):
            row = []
            for x, b, mask in zip(inputs, baselines, masks):
                mask_n = mask[n if mask.shape[0] > 1 else 0].expand(x.shape[1:])
                base_n = b[n if b.shape[0] > 1 else 0].expand(x.shape[1:])
                keep = coalition[mask_n]
                row.append(torch.where(keep, x[n], base_n).unsqueeze(0))
            call_args = [a[n : n + 1] if isinstance(a, torch.Tensor) else a for a in args]
            with torch.no_grad():
                y = model(*row, *call_args)[0]
            t = target[n] if isinstance(target, list) else target
            out[n, m] = float(y[t] if t is not None else y)
    return out


def random_coalitions(count, d, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, d, generator=generator) < 0.5


@pytest.mark.parametrize("ppe", [None, 1, 3])
@pytest.mark.parametrize("per_example_mask", [False, True])
def test_engine_matches_naive_loop_on_tuple_inputs(ppe, per_example_mask):
    torch.manual_seed(1)
    model = TwoInputModel().double()
    batch = 3
    x1 = torch.randn(batch, 2, 3, dtype=torch.float64)
    x2 = torch.randn(batch, 4, dtype=torch.float64)
    scale = torch.rand(batch, dtype=torch.float64) + 0.5
    b1 = torch.randn(1, 2, 3, dtype=torch.float64)
    b2 = torch.randn(batch, 4, dtype=torch.float64)
    if per_example_mask:
        m1 = torch.randint(0, 5, (batch, 2, 3))
        m2 = torch.randint(0, 5, (batch, 4))
        m1[:, 0, 0] = 4  # every example reaches id 4 somewhere
    else:
        m1 = torch.tensor([[[0, 0, 1], [2, 2, 1]]])  # shared by the batch
        m2 = torch.tensor([[3, 4, 4, 0]])  # id 0 spans both tensors
    target = [(0, 1), (1, 0), (1, 1)]
    coalitions = torch.cat([random_coalitions(9, 5), random_coalitions(3, 5)])  # repeats
    game, is_tuple = prepare_game(model, (x1, x2), (b1, b2), target, (scale, 0.25), (m1, m2), ppe)
    assert is_tuple
    got = game.evaluate(coalitions)
    want = naive_values(
        model,
        (x1, x2),
        (b1, b2),
        (m1, m2),
        coalitions,
        (scale, 0.25),
        target,
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # The same values through the per-example row path.
    example = torch.arange(batch).repeat_interleave(coalitions.shape[0])
    rows = game.evaluate_rows(example, coalitions.repeat(batch, 1))
    torch.testing.assert_close(rows.view(batch, -1), want, rtol=0, atol=1e-12)


def test_each_distinct_coalition_is_evaluated_once_and_calls_respect_ppe():
    calls: list[int] = []

    def model(x):
        calls.append(x.shape[0])
        return x.sum(dim=1)

    x = torch.randn(4, 6)
    coalitions = torch.cat([random_coalitions(20, 6)] * 3)
    distinct = unique_coalitions(coalitions)[0].shape[0]
    game, _ = prepare_game(model, x, perturbations_per_eval=5)
    game.evaluate(coalitions)
    assert sum(calls) == distinct * 4
    assert max(calls) <= 5 * 4
    calls.clear()
    example = torch.tensor([0, 1, 1, 3, 0, 1])
    rows = torch.stack(
        [coalitions[0], coalitions[1], coalitions[1], coalitions[2], coalitions[0], coalitions[3]]
    )
    game.evaluate_rows(example, rows)
    assert sum(calls) == 4


def test_integer_token_inputs_with_pad_baseline_and_attention_mask():
    torch.manual_seed(0)
    embedding = nn.Embedding(50, 8)
    head = nn.Linear(8, 2)

    def model(tokens, attention):
        h = embedding(tokens) * attention[..., None]
        return head(h.sum(dim=1))

    tokens = torch.randint(1, 50, (2, 5))
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).float()
    mask = torch.tensor([[0, 0, 1, 2, 3]])  # a word of two sub-word tokens
    coalitions = random_coalitions(7, 4, seed=3)
    game, _ = prepare_game(model, tokens, 0, 1, attention, mask)
    got = game.evaluate(coalitions)
    want = naive_values(
        model,
        (tokens,),
        (torch.zeros(1, 5, dtype=torch.long),),
        (mask,),
        coalitions,
        (attention,),
        1,
    )
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_references_average_single_reference_games():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    x = torch.randn(2, 4, dtype=torch.float64)
    refs = torch.randn(5, 4, dtype=torch.float64)
    coalitions = random_coalitions(6, 4)
    game, _ = prepare_game(model, x, references=refs, perturbations_per_eval=2)
    got = game.evaluate(coalitions)
    per_reference = [
        prepare_game(model, x, baselines=r[None])[0].evaluate(coalitions) for r in refs
    ]
    torch.testing.assert_close(got, torch.stack(per_reference).mean(0), rtol=0, atol=1e-12)
    rows = game.evaluate_rows(torch.tensor([1, 0]), coalitions[:2])
    torch.testing.assert_close(rows, got[[1, 0], [0, 1]], rtol=0, atol=1e-12)


def test_per_reference_values_and_single_reference_rows():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    refs = torch.randn(5, 4, dtype=torch.float64)
    coalitions = random_coalitions(7, 4, seed=3)
    coalitions = torch.cat([coalitions, coalitions[:2]])  # repeats exercise deduplication
    game, _ = prepare_game(model, x, references=refs, perturbations_per_eval=3)
    single = [prepare_game(model, x, baselines=r[None])[0].evaluate(coalitions) for r in refs]
    want = torch.stack(single, dim=-1)  # (N, M, B)
    torch.testing.assert_close(
        game.evaluate(coalitions, per_reference=True), want, rtol=0, atol=1e-12
    )
    example = torch.tensor([0, 2, 1, 2, 0, 1, 1, 0, 2])
    reference = torch.tensor([4, 0, 3, 3, 1, 2, 0, 4, 4])
    rows = game.evaluate_rows(example, coalitions, reference_index=reference)
    torch.testing.assert_close(rows, want[example, torch.arange(9), reference], rtol=0, atol=1e-12)
    baseline_game, _ = prepare_game(model, x)
    torch.testing.assert_close(
        baseline_game.evaluate(coalitions, per_reference=True)[..., 0],
        baseline_game.evaluate(coalitions),
        rtol=0,
        atol=0,
    )


def test_log_prob_value_explains_the_predicted_class():
    torch.manual_seed(0)
    model = nn.Linear(4, 3).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    coalitions = random_coalitions(5, 4)
    game, _ = prepare_game(model, x, value="log_prob")
    got = game.evaluate(coalitions)
    predicted = model(x).argmax(dim=1).tolist()
    log_softmax_model = lambda z: torch.log_softmax(model(z), dim=1)  # noqa: E731
    want = naive_values(
        log_softmax_model,
        (x,),
        (torch.zeros(1, 4, dtype=torch.float64),),
        (torch.arange(4)[None],),
        coalitions,
        (),
        predicted,
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("target", [1, torch.tensor(2), torch.tensor([0, 2]), [2, 1]])
def test_target_forms(target):
    model = nn.Linear(3, 3).double()
    x = torch.randn(2, 3, dtype=torch.float64)
    coalitions = random_coalitions(4, 3)
    game, _ = prepare_game(model, x, target=target)
    got = game.evaluate(coalitions)
    as_list = (
        [int(target)] * 2
        if isinstance(target, int) or (isinstance(target, torch.Tensor) and target.dim() == 0)
        else [int(t) for t in target]
    )
    want = naive_values(
        model,
        (x,),
        (torch.zeros(1, 3, dtype=torch.float64),),
        (torch.arange(3)[None],),
        coalitions,
        (),
        as_list,
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_progress_bar_is_shown(capsys):
    game, _ = prepare_game(lambda x: x.sum(1), torch.randn(2, 3), perturbations_per_eval=1)
    game.evaluate(random_coalitions(4, 3), show_progress=True, desc="testing-bar")
    assert "testing-bar" in capsys.readouterr().err


def test_unique_coalitions_wide_and_narrow():
    for d in (5, 70):
        c = random_coalitions(30, d)
        c = torch.cat([c, c[:7]])
        unique, inverse = unique_coalitions(c)
        assert unique.shape[0] == len({tuple(row.tolist()) for row in c})
        assert torch.equal(unique[inverse], c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
def test_perturbed_rows_are_bit_exact(dtype):
    """Rows hold exactly the input or the baseline value, whatever the build path."""
    seen = []

    def model(x):
        seen.append(x.clone())
        return x.flatten(1).double().sum(dim=1)

    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 3, 4, 4, generator=generator) * 1e3).to(dtype)
    baseline = (torch.randn(2, 3, 4, 4, generator=generator) * 1e-3).to(dtype)
    mask = torch.arange(16).reshape(1, 1, 4, 4) % 5
    coalitions = unique_coalitions(random_coalitions(9, 5))[0]
    game, _ = prepare_game(model, x, baseline, feature_mask=mask, perturbations_per_eval=4)
    game.evaluate(coalitions, distinct=True)
    rows = torch.cat(seen).view(-1, 2, 3, 4, 4)
    keep = coalitions[:, mask.reshape(-1)].view(-1, 1, 1, 4, 4)
    expected = torch.where(keep, x.unsqueeze(0), baseline.unsqueeze(0))
    assert rows.dtype == dtype
    assert torch.equal(rows, expected)


@pytest.mark.parametrize("d", [5, 70])
def test_row_deduplication_packed_and_wide(d):
    # d = 5 packs (example, coalition, reference) into one int64 code; d = 70 cannot
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(d, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    x = torch.randn(3, d, dtype=torch.float64)
    refs = torch.randn(4, d, dtype=torch.float64)
    game, _ = prepare_game(model, x, references=refs)
    coalitions = random_coalitions(6, d, seed=1)
    coalitions = torch.cat([coalitions, coalitions])
    example = torch.tensor([0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0])
    reference = torch.tensor([3, 0, 1, 2, 3, 0, 3, 0, 1, 2, 3, 1])
    rows = game.evaluate_rows(example, coalitions, reference_index=reference)
    want = game.evaluate(coalitions, per_reference=True)[example, torch.arange(12), reference]
    torch.testing.assert_close(rows, want, rtol=0, atol=1e-12)


def test_value_function_is_differentiable_and_handles_stacked_copies():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    game, _ = prepare_game(model, x, target=torch.tensor([1, 0]), value="log_prob")
    game.resolve_target()
    fn = game.value_function()
    values = fn(torch.cat([x, x]))
    want = torch.log_softmax(model(x), dim=1)[[0, 1], [1, 0]]
    torch.testing.assert_close(values, torch.cat([want, want]))
    (grad,) = torch.autograd.grad(values[:2].sum(), x)
    assert grad.abs().sum() > 0
