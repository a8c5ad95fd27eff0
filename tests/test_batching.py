"""Rows per call, cost forecast and progress (engine/batching.py), plans at 224 x 224,
budgets of the graph methods and the few-segments warning."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch

import captum_graphshap as cg
from captum_graphshap.engine import batching, call_sizes
from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.engine.plan import MemberCoalitions
from captum_graphshap.graphs import GridGraph, LineGraph
from captum_graphshap.plans import stencils
from captum_graphshap.plans.l_c_shapley import c_shapley_plan, c_shapley_regression_plan
from captum_graphshap.plans.linear import popcount


class Recorder(torch.nn.Module):
    """A linear model that records the rows of every call; ``pause`` seconds per call."""

    def __init__(self, features: int, pause: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(features, 2)
        self.pause = pause
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.append(x.shape[0])
        if self.pause:
            time.sleep(self.pause)  # a fixed cost per call: bigger calls are faster per row
        return self.linear(x.reshape(x.shape[0], -1))


def test_explicit_perturbations_per_eval_is_honoured_exactly():
    model = Recorder(16)
    x = torch.rand(3, 16)
    cg.LShapley(model).attribute(x, target=0, k=2, perturbations_per_eval=7, show_progress=False)
    assert model.sizes[:-1] == [7 * 3] * (len(model.sizes) - 1)
    assert 0 < model.sizes[-1] <= 7 * 3


class ModelClock:
    """Call times of a model costing ``fixed`` seconds per call plus ``per_row`` per row,
    up to ``best`` rows per call (slower per row beyond): the timings the sizing sees."""

    def __init__(self, fixed: float, per_row: float, best: int) -> None:
        self.fixed, self.per_row, self.best = fixed, per_row, best

    def __call__(self, device: torch.device) -> ModelClock:
        self.pending: list = []
        return self

    def begin(self) -> None:
        return None

    def end(self, units: int) -> list[tuple[int, float]]:
        slowdown = 1.0 if units <= self.best else 1.5
        return [(units, self.fixed + self.per_row * units * slowdown)]


@pytest.mark.filterwarnings("ignore::captum_graphshap.engine.batching.CostForecast")
def test_automatic_calls_grow_while_faster_and_settle(monkeypatch):
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 12 * 8)  # 8 rows to start
    monkeypatch.setattr(batching, "_Clock", ModelClock(fixed=1e-3, per_row=1e-5, best=256))
    model = Recorder(12)
    x = torch.rand(1, 12)
    phi = cg.ExactShapley(model).attribute(x, target=0, show_progress=False)
    # two timed calls per size, each size the double of the last, while per-row time
    # drops by 8%; 512 rows are slower per row than 256, so it settles on 256
    sizes = model.sizes
    assert sizes[:12] == [8, 8, 16, 16, 32, 32, 64, 64, 128, 128, 256, 256]
    assert sizes[12:14] == [512, 512] and set(sizes[14:-1]) == {256}
    # what the real clock measures: a fixed cost per call makes growth pay
    real = Recorder(10, pause=0.02)
    monkeypatch.undo()
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 10 * 8)
    cg.ExactShapley(real).attribute(torch.rand(1, 10), target=0, show_progress=False)
    assert real.sizes[:4] == [8, 8, 16, 16] and max(real.sizes) >= 32
    fixed = Recorder(12)
    reference = cg.ExactShapley(fixed).attribute(x, target=0, perturbations_per_eval=2**12)
    assert torch.allclose(phi, reference, atol=1e-6)


@pytest.mark.filterwarnings("ignore::captum_graphshap.engine.batching.CostForecast")
def test_later_runs_on_the_same_model_start_at_the_size_found(monkeypatch):
    """A settled size is remembered per model and row layout: the next call (or the
    next plan of a method) starts there, without probing; another model does not."""
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 12 * 8)
    monkeypatch.setattr(batching, "_Clock", ModelClock(fixed=1e-3, per_row=1e-5, best=256))
    call_sizes.forget_all()
    model, x = Recorder(12), torch.rand(2, 12)
    first = cg.ExactShapley(model).attribute(x, target=0, show_progress=False)
    assert model.sizes[:2] == [8, 8]  # 4 coalitions of two examples
    model.sizes.clear()
    again = cg.ExactShapley(model).attribute(x[:1], target=0, show_progress=False)
    # the clock is per unit: 256 units of two examples were fastest, 512 rows
    assert set(model.sizes[:-1]) == {512}  # rows per call, for one example as for two
    torch.testing.assert_close(again, first[:1])
    other = Recorder(12)
    cg.ExactShapley(other).attribute(x[:1], target=0, show_progress=False)
    assert other.sizes[:2] == [8, 8]


@pytest.mark.filterwarnings("ignore::captum_graphshap.engine.batching.CostForecast")
def test_a_run_that_ran_out_of_work_leaves_a_size_to_grow_from(monkeypatch):
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 12 * 8)
    monkeypatch.setattr(batching, "_Clock", ModelClock(fixed=1e-3, per_row=1e-5, best=256))
    call_sizes.forget_all()
    model, x = Recorder(12), torch.rand(1, 12)
    pairs = (torch.arange(12) // 2)[None]  # 6 features: 64 rows, too few to finish probing
    cg.ExactShapley(model).attribute(x, target=0, feature_mask=pairs, show_progress=False)
    assert max(model.sizes) < 256
    grown_to = max(model.sizes)
    model.sizes.clear()
    cg.ExactShapley(model).attribute(x, target=0, show_progress=False)
    assert model.sizes[0] >= grown_to and 256 in model.sizes  # growth goes on from there


def test_a_model_that_is_gone_leaves_nothing_behind():
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    call_sizes.forget_all()
    model, x = Model(), torch.rand(2, 3)
    key = call_sizes.sizing_key(model, x.device, (x,))
    call_sizes.remember(key, call_sizes.LearntSize(64, final=True))
    assert call_sizes.recall(key) == call_sizes.LearntSize(64, final=True)
    call_sizes.remember(key, call_sizes.LearntSize(512, final=False))  # a lower bound
    assert call_sizes.recall(key) == call_sizes.LearntSize(64, final=True)
    assert call_sizes.recall(call_sizes.sizing_key(model, x.device, (x.double(),))) is None
    del model
    assert call_sizes.recall(key) is None  # its weak reference is dead
    assert call_sizes.sizing_key(lambda v: v, x.device, (x,)) is not None

    class Slotted:  # an object without weak references: not remembered
        __slots__ = ()

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return v

    assert call_sizes.sizing_key(Slotted(), x.device, (x,)) is None


class NoisyClock(ModelClock):
    """:class:`ModelClock` with one size that looks slow (a busy host, say)."""

    def __init__(self, slow_size: int) -> None:
        super().__init__(fixed=1e-3, per_row=1e-5, best=256)
        self.slow_size = slow_size

    def end(self, units: int) -> list[tuple[int, float]]:
        ((size, seconds),) = super().end(units)
        return [(size, seconds * (3.0 if units == self.slow_size else 1.0))]


@pytest.mark.filterwarnings("ignore::captum_graphshap.engine.batching.CostForecast")
def test_one_slow_size_does_not_stop_the_growth(monkeypatch):
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 12 * 8)
    monkeypatch.setattr(batching, "_Clock", NoisyClock(slow_size=32))
    model = Recorder(12)
    cg.ExactShapley(model).attribute(torch.rand(1, 12), target=0, show_progress=False)
    # 32 rows look slower than 16, but 64 are faster again: growth goes on to
    # 256, the fastest size, and settles there after 512 is slower
    assert model.sizes[:8] == [8, 8, 16, 16, 32, 32, 64, 64]
    assert set(model.sizes[14:-1]) == {256}


@pytest.mark.filterwarnings("ignore::captum_graphshap.engine.batching.CostForecast")
def test_automatic_calls_stay_under_the_memory_cap(monkeypatch):
    monkeypatch.setattr(batching, "START_ELEMENTS_PER_CALL", 10 * 4)
    monkeypatch.setattr(batching, "CPU_INPUT_BYTES", 10 * 4 * 32)  # 32 float rows of 10
    monkeypatch.setattr(batching, "_Clock", ModelClock(fixed=1e-3, per_row=1e-5, best=2**20))
    model = Recorder(10)
    cg.ExactShapley(model).attribute(torch.rand(1, 10), target=0, show_progress=False)
    assert max(model.sizes) == 32


def test_deterministic_mode_keeps_the_first_size():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        pacer = batching.Pacer(
            units=10_000,
            width=1,
            coalitions=10_000,
            step=8,
            adaptive=True,
            bytes_per_unit=64,
            device=torch.device("cpu"),
            show_progress=False,
            desc="",
        )
    finally:
        torch.use_deterministic_algorithms(previous)
    for _ in range(6):
        pacer.begin()
        pacer.done(pacer.step)
    assert pacer.step == 8 and pacer.settled


def long_forecast(monkeypatch):
    monkeypatch.setattr(batching, "AUTO_PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(batching, "FORECAST_ROWS", 100)


def test_forecast_is_a_warning_without_a_bar(monkeypatch, capsys):
    long_forecast(monkeypatch)
    model = Recorder(10)
    with pytest.warns(batching.CostForecast) as record:
        cg.ExactShapley(model).attribute(
            torch.rand(1, 10), target=0, perturbations_per_eval=100, show_progress=False
        )
    text = str(record[0].message)
    assert "1,024 coalitions" in text and "100 rows per call" in text and "rows/s" in text
    assert capsys.readouterr().err == ""


def test_forecast_of_rows_names_their_examples(monkeypatch):
    """Rows that each belong to one example (per-example plans) are counted as rows of
    the batch's examples, not as 'coalitions x 1 example(s)'."""
    long_forecast(monkeypatch)
    model = Recorder(10)
    x = torch.rand(4, 10)
    game, _ = prepare_game(model, (x,), None, 0, None, None, 25)  # 100 rows a call
    rows = torch.rand(400, 10) > 0.5
    with pytest.warns(batching.CostForecast) as record:
        game.evaluate_rows(torch.arange(400) % 4, rows, desc="rows test")
    text = str(record[0].message)
    assert text.startswith("rows test: ") and "model rows of 4 example(s)" in text
    assert "coalitions x" not in text


@pytest.mark.parametrize("show_progress", [None, True])
def test_forecast_goes_to_the_bar_when_one_is_shown(monkeypatch, capsys, show_progress):
    long_forecast(monkeypatch)
    model = Recorder(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", batching.CostForecast)
        cg.ExactShapley(model).attribute(
            torch.rand(1, 10), target=0, perturbations_per_eval=100, show_progress=show_progress
        )
    err = capsys.readouterr().err
    assert "Shapley Values attribution: " in err  # Captum's label
    assert "1,024 coalitions, 100 rows/call" in err
    assert "1024/1024 model rows" in err  # the bar counts every row once, and says so


def test_short_work_shows_no_bar_by_default(capsys):
    model = Recorder(10)
    cg.ExactShapley(model).attribute(torch.rand(1, 10), target=0)
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------ plans


def test_member_rows_are_the_members():
    members = torch.tensor([3, 0, 2, 5, 1])
    offsets = torch.tensor([0, 1, 1, 4, 5])  # {3}, {}, {0, 2, 5}, {1}
    complement = torch.tensor([False, True, False, True])
    store = MemberCoalitions(members, offsets, 6, complement)
    expected = torch.zeros(4, 6, dtype=torch.bool)
    expected[0, 3] = True
    expected[1] = True  # the complement of nothing
    expected[2, [0, 2, 5]] = True
    expected[3] = True
    expected[3, 1] = False
    assert torch.equal(store.take(torch.arange(4)), expected)
    assert torch.equal(store.take(torch.tensor([2, 2, 0])), expected[[2, 2, 0]])
    empty = MemberCoalitions(torch.zeros(0, dtype=torch.long), torch.zeros(3, dtype=torch.long), 4)
    assert not empty.take(torch.arange(2)).any()


def test_linear_time_unique_and_popcount_equal_the_general_ones():
    generator = torch.Generator().manual_seed(0)
    for high in (50, 2**40):
        values = torch.randint(0, high, (5000,), generator=generator)
        got, want = stencils.unique_small(values), torch.unique(values, return_inverse=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    codes = torch.randint(0, 2**12, (10_000,), generator=generator)
    slow = sum(((codes >> bit) & 1) for bit in range(12))
    assert torch.equal(popcount(codes, 12), slow)


def test_pixel_grid_224_plans_are_built_not_refused():
    start = time.process_time()
    plan = c_shapley_plan(GridGraph(224, 224), 1)
    assert len(plan) == 1_141_983  # the count the old 2^20 limit refused
    assert isinstance(plan.coalitions, MemberCoalitions) and plan.coalitions.width == 5
    assert time.process_time() - start < 30  # about 0.65 s of CPU when the machine is quiet


# ------------------------------------------------------------------ budgets


class Counting(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(d, 1)
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return torch.tanh(self.linear(x.reshape(x.shape[0], -1))) * 2


@pytest.mark.parametrize("cls", [cg.LShapley, cg.CShapley, cg.MyersonValue])
def test_graph_budget_refuses_with_the_count_before_any_model_call(cls):
    model = Counting(12)
    x = torch.rand(1, 12)
    count = int(cls(Counting(12)).attribute(x, target=0, return_evaluations=True)[1][0])
    with pytest.raises(ValueError, match=f"{count:,} model evaluations per example.*budget=10"):
        cls(model).attribute(x, target=0, budget=10)
    assert model.rows == 0
    phi = cls(model).attribute(x, target=0, budget=count)  # exactly enough
    assert model.rows == count and phi.shape == x.shape


def test_graph_budget_degrades_to_the_regression_variant_that_fits():
    x = torch.rand(2, 1, 6, 6)
    model = Counting(36)
    full = len(c_shapley_plan(GridGraph(6, 6), 2))
    budget = 100
    assert full > budget
    out = cg.CShapley(model).attribute(
        x, target=0, k=2, budget=budget, over_budget="kernel", return_evaluations=True
    )
    # squares of side 1 and 2 (36 + 25) and the empty and full sets: k' = 2 fits
    assert len(c_shapley_regression_plan(GridGraph(6, 6), 2)) == 63
    assert out.n_evaluations.tolist() == [63, 63]
    reference = cg.CShapley(Counting(36)).attribute(x, target=0, max_size=2, estimator="kernel")
    assert torch.allclose(out.attributions, reference, atol=1e-10)
    totals = out.attributions.sum(dim=(1, 2, 3))
    gain = (model(x) - model(torch.zeros_like(x)))[:, 0]
    assert torch.allclose(totals, gain.detach(), atol=1e-5)  # efficiency
    # a budget of 40 leaves only single pixels (36 + 2)
    small = cg.LShapley(Counting(36)).attribute(
        x, target=0, budget=40, over_budget="kernel", return_evaluations=True
    )
    assert small.n_evaluations.tolist() == [38, 38]
    with pytest.raises(ValueError, match="even its kernel variant"):
        cg.LShapley(Counting(36)).attribute(x, target=0, budget=20, over_budget="kernel")


def test_graph_budget_arguments_are_checked():
    model = Counting(6)
    x = torch.rand(1, 6)
    with pytest.raises(ValueError, match="over_budget must be one of"):
        cg.CShapley(model).attribute(x, target=0, budget=10, over_budget="sample")
    with pytest.raises(ValueError, match="needs budget="):
        cg.CShapley(model).attribute(x, target=0, over_budget="kernel")
    with pytest.raises(TypeError, match="budget must be an int"):
        cg.CShapley(model).attribute(x, target=0, budget=1.5)
    assert model.rows == 0


def test_budget_counts_references():
    x = torch.rand(1, 8)
    references = torch.rand(3, 8)
    plan = len(c_shapley_plan(LineGraph(8), 1))
    with pytest.raises(ValueError, match=f"{3 * plan:,} model evaluations"):
        cg.CShapley(Counting(8)).attribute(
            x, target=0, k=1, references=references, budget=3 * plan - 1
        )


# ------------------------------------------------------------------ superpixels


def test_superpixels_of_noise_warn_when_there_are_few_segments():
    pytest.importorskip("skimage")
    noise = np.random.default_rng(0).random((64, 64, 3))
    with pytest.warns(UserWarning, match="only 1 segment"):
        cg.SuperpixelGraph.slic(noise, n_segments=20)
    labels = np.arange(64 * 64).reshape(64, 64) // 512  # 8 bands
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cg.SuperpixelGraph.from_segments(labels).num_nodes == 8


def test_cuda_memory_counts_the_allocators_unused_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the memory a call may take is the driver's free memory plus the caching
    allocator's reserved, unused blocks (a model's freed activations): the driver
    alone says 1 GiB here, the allocator can hand out 5."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 6 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 2 * 2**30)
    cuda = torch.device("cuda")
    assert batching.available_memory(cuda) == 5 * 2**30
    assert batching.input_bytes_cap(cuda) == int(5 * 2**30 * batching.MEMORY_FRACTION)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 2 * 2**30)
    assert batching.input_bytes_cap(cuda) == int(2**30 * batching.MEMORY_FRACTION)
