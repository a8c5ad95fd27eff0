"""The GPU path: the same bits and values as on the CPU, HVPs under vmap, no host syncs.

Every test here is marked ``cuda`` and is skipped, with the reason shown by
``pytest -ra``, when no CUDA device is present. Run them alone with
``python -m pytest -m cuda -ra`` (``benchmarks/gpu.sh`` does).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import captum_graphshap as cg
from captum_graphshap.engine.coalition_game import prepare_game
from captum_graphshap.engine.derivatives import hessian_cross_contributions
from captum_graphshap.plans import walsh_gp, walsh_kernel

from .test_contract import CLASSES, RANDOMISED, options_for

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device here: the GPU path is not tested"
    ),
]

CUDA = torch.device("cuda")


def mlp(d: int, outputs: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, outputs)).double().eval()


def test_perturbed_rows_are_bit_exact_against_the_cpu():
    seen: dict[str, list[torch.Tensor]] = {"cpu": [], "cuda": []}
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 8, generator=generator) * 1e3
    baseline = torch.randn(2, 3, 8, 8, generator=generator) * 1e-3
    mask = (torch.arange(64).reshape(1, 1, 8, 8) % 7).expand(1, 3, 8, 8)
    coalitions = torch.rand(40, 7, generator=generator) < 0.5
    for device in ("cpu", "cuda"):

        def model(rows: torch.Tensor, device: str = device) -> torch.Tensor:
            seen[device].append(rows.detach().cpu().clone())
            return rows.flatten(1).sum(dim=1)

        game, _ = prepare_game(
            model,
            x.to(device),
            baseline.to(device),
            feature_mask=mask.to(device),
            perturbations_per_eval=6,
        )
        game.evaluate(coalitions.to(device), distinct=True)
    assert torch.equal(torch.cat(seen["cpu"]), torch.cat(seen["cuda"]))


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_every_class_gives_the_cpu_result_on_the_gpu(cls):
    d = 6
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for device in ("cpu", "cuda"):
        model = mlp(d).to(device)
        out = cls(model).attribute(x.to(device), target=1, **options_for(cls))
        assert out.device.type == device
        results[device] = out.cpu()
    tolerance = 1e-8 if cls not in RANDOMISED else 1e-7
    assert torch.allclose(results["cpu"], results["cuda"], atol=tolerance, rtol=0)


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        (cg.PairedKernelShap, {"estimator": "regression_mc", "budget": 40}),
        (cg.Shear, {"estimator": "regression_mc", "budget": 120}),
        (cg.ShapleySampling, {"control_variate": "taylor", "n_samples": 6, "antithetic": False}),
    ],
    ids=["regression_mc", "shear_regression_mc", "taylor_control_variate"],
)
def test_the_unbiased_estimators_give_the_cpu_result_on_the_gpu(cls, options):
    d = 6
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for device in ("cpu", "cuda"):
        model = mlp(d).to(device)
        generator = torch.Generator().manual_seed(0)  # draws on the CPU, moved once
        out = cls(model).attribute(x.to(device), target=1, generator=generator, **options)
        assert out.device.type == device
        results[device] = out.cpu()
    assert torch.allclose(results["cpu"], results["cuda"], atol=1e-7, rtol=0)


@pytest.mark.parametrize(
    ("cls", "d", "budget", "agree"),
    # the relative agreement each case holds. At the fewest pairs (d pairs: one residual
    # direction) every prior has the same likelihood, and LAPACK's and cuSOLVER's
    # rounding chose different ones (6e-4 and 3e-3 apart on two H200 runs) until ties
    # went to the grid's first prior (walsh_gp.LIKELIHOOD_TIE). Since the process krigs
    # on the complement of the linear parities (walsh_kriging) the others agree to
    # 2e-13 at most (H200); before, 1.5e-6 at 2,049 factorised rows
    [
        (cg.PairedKernelShap, 12, 26, 1e-8),  # the fewest pairs: redrawn designs
        # the process adjusted over the extra pairs; its 512 fitted pairs reweight the
        # triples, read from their table of patterns
        (cg.PairedKernelShap, 14, 1100, 1e-10),
        (cg.PairedKernelShap, 14, 4096, 1e-10),
        (cg.BayesShap, 14, 4200, 1e-10),  # the full posterior up to 2,048 pairs
        (cg.PairedKernelShap, 201, 600, 1e-8),  # orderings and single features' samples
        # the covariance from power sums (above 2 log2(rows) features), and the triples'
        # as one product (up to 24 features)
        (cg.PairedKernelShap, 24, 1024, 1e-10),
        # near the full design, where the projection matters most
        (cg.BayesShap, 7, 124, 1e-10),
        (cg.PairedKernelShap, 10, 900, 1e-10),
    ],
    ids=[
        "fewest_pairs",
        "adjusted_1100",
        "adjusted_4096",
        "bayes_4200",
        "filled_orderings",
        "power_sum_covariance",
        "bayes_near_full_design",
        "near_full_design",
    ],
)
def test_the_defaults_at_every_budget_give_the_cpu_result_on_the_gpu(cls, d, budget, agree):
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for device in ("cpu", "cuda"):
        model = mlp(d, outputs=1).to(device)
        generator = torch.Generator().manual_seed(0)  # designs drawn on the host, moved once
        out = cls(model).attribute(x.to(device), target=0, budget=budget, generator=generator)
        assert out.device.type == device
        results[device] = out.cpu()
    scale = results["cpu"].abs().max()
    apart = float((results["cpu"] - results["cuda"]).abs().max() / scale)
    assert apart <= agree, f"CPU and GPU {apart:.2e} apart (relative), held to {agree:.0e}"


def test_the_windows_of_a_patch_mask_give_the_cpu_result_on_the_gpu():
    """The default on an image of 5 x 5 patches: the local parities' windows are read
    off the mask (one copy of it to the host), and the estimate is the CPU's (written
    without a device to run it; held to the BayesShap case's agreement)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(4 * 5 * 5, 1),
    ).double().eval()  # fmt: skip
    rows = torch.arange(10)
    mask = ((rows[:, None] // 2) * 5 + rows[None, :] // 2).view(1, 1, 10, 10)
    x = torch.randn(2, 1, 10, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for device in ("cpu", "cuda"):
        out = cg.PairedKernelShap(model.to(device)).attribute(
            x.to(device), target=0, feature_mask=mask.to(device), budget=512,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        assert out.device.type == device
        results[device] = out.cpu()
    scale = results["cpu"].abs().max()
    assert torch.allclose(results["cpu"], results["cuda"], atol=1e-5 * float(scale), rtol=0)


def test_a_nearly_full_gpu_gets_smaller_chunks_and_the_cpu_result():
    """With 2 GiB of the device left, the process's chunks shrink to a quarter of what
    is left (``walsh_kernel.work_floats``) instead of running out of memory, and the
    default at d = 49 on a 7 x 7 patch mask still gives the CPU's values; once the
    filler is freed, the allocator's cached block counts as room again."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 14 * 14, 1)
    ).double().eval()  # fmt: skip
    rows = torch.arange(14)
    mask = ((rows[:, None] // 2) * 7 + rows[None, :] // 2).view(1, 1, 14, 14)
    x = torch.randn(16, 1, 14, 14, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def explain(device: str) -> torch.Tensor:
        return cg.PairedKernelShap(model.to(device)).attribute(
            x.to(device), target=0, feature_mask=mask.to(device), budget=1024,
            generator=torch.Generator().manual_seed(0),
        ).cpu()  # fmt: skip

    want = explain("cpu")
    explain("cuda")  # libraries' handles and workspaces exist before the device is filled
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(CUDA)
    room = 2 * 2**30
    if free < 2 * room:
        pytest.skip(f"only {free / 2**30:.1f} GiB free on this GPU")
    filler = torch.empty(free - room, dtype=torch.uint8, device=CUDA)
    floats = walsh_kernel.work_floats(CUDA, walsh_gp.CHUNK_FLOATS)
    # the allocator rounds the filler's segment up: a few MiB more than ``room`` stay
    assert floats <= (room + 2**26) // 32 < walsh_gp.CHUNK_FLOATS["accelerator"]
    got = explain("cuda")
    del filler  # cached by the allocator, not returned to the driver: still room
    room_again = min(walsh_gp.CHUNK_FLOATS["accelerator"], (free - 2**26) // 32)
    assert walsh_kernel.work_floats(CUDA, walsh_gp.CHUNK_FLOATS) >= room_again
    torch.cuda.empty_cache()
    apart = float((got - want).abs().max() / want.abs().max())
    assert apart <= 1e-10, f"CPU and GPU {apart:.2e} apart (relative) in smaller chunks"


@pytest.mark.parametrize("budget", [None, 30])
def test_owen_values_give_the_cpu_result_on_the_gpu(budget):
    d = 10
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    hierarchy = [[0, 1, 2], [[3, 4], [5, 6, 7]], [8, 9]]
    results = {}
    for device in ("cpu", "cuda"):
        model = mlp(d, outputs=1).to(device)
        out = cg.OwenValue(model).attribute(
            x.to(device), target=0, hierarchy=hierarchy, budget=budget
        )
        assert out.device.type == device
        results[device] = out.cpu()
    assert torch.allclose(results["cpu"], results["cuda"], atol=1e-9, rtol=0)


def test_hessian_vector_products_under_vmap_on_the_gpu():
    d = 5
    x = torch.randn(2, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    etas = {}
    for device in ("cpu", "cuda"):
        model = nn.Sequential(nn.Linear(d, 6), nn.Softplus(), nn.Linear(6, 2)).double()
        torch.manual_seed(0)
        for p in model.parameters():
            nn.init.normal_(p)
        model = model.to(device)
        game, _ = prepare_game(model, x.to(device), 0.0, target=1)
        deltas = tuple(t - b[0] for t, b in zip(game.inputs, game.backgrounds))
        eta = hessian_cross_contributions(
            game.value_function(), game.inputs, deltas, game.features.masks, d
        )
        assert eta.device.type == device
        etas[device] = eta.cpu()
    # a dense Hessian per example as the reference
    model = nn.Sequential(nn.Linear(d, 6), nn.Softplus(), nn.Linear(6, 2)).double()
    torch.manual_seed(0)
    for p in model.parameters():
        nn.init.normal_(p)
    for n in range(2):
        hessian = torch.autograd.functional.hessian(lambda v: model(v[None])[0, 1], x[n])
        expected = ((hessian + hessian.T) * x[n][:, None] * x[n][None, :]).abs()
        assert torch.allclose(etas["cpu"][n], expected, atol=1e-10)
    assert torch.allclose(etas["cpu"], etas["cuda"], atol=1e-10)


def _sync_sites(run) -> list[str]:
    """``file:line`` of each synchronising CUDA operation ``run`` makes (debug mode "warn")."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


def _syncs(run) -> int:
    return len(_sync_sites(run))


#: The host synchronisations one call may make, each once per call and each for a
#: reason: the inputs' finiteness check (format_inputs), whether rows may be built
#: with lerp (can_blend: every input's maxima read back at once), the model
#: outputs' finiteness after the evaluation loop (chunk_runner) and the
#: attributions' (guards). Targets, plans and the default graph mask are built
#: on the host and moved without blocking (pinned, non_blocking), or built on the
#: device; feature-mask checks read nothing back for the default masks.
ALLOWED_SYNC_FILES = {"_compat.py", "prepare.py", "chunk_runner.py", "guards.py"}
SYNCS_PER_CALL = {cg.ExactShapley: 4, cg.CShapley: 4, cg.LShapley: 4}


@pytest.mark.parametrize("cls", list(SYNCS_PER_CALL), ids=lambda c: c.__name__)
def test_no_host_synchronisation_inside_the_evaluation_loop(cls):
    """Syncs do not grow with the number of chunks: the loop itself makes none.

    The checks before the loop and the finiteness checks after it synchronise
    (:data:`SYNCS_PER_CALL`, at the sites of :data:`ALLOWED_SYNC_FILES`); the
    same call with four times as many chunks (a quarter of the rows per call)
    must not add a single one.
    """
    d = 10
    model = mlp(d, outputs=2).to(CUDA)
    x = torch.randn(2, d, dtype=torch.float64, device=CUDA)
    options = {"k": 1} if cls is not cg.ExactShapley else {}

    def run(per_eval: int) -> None:
        cls(model).attribute(
            x, target=0, perturbations_per_eval=per_eval, show_progress=False, **options
        )

    run(16)  # warm-up: caches, cuBLAS handles, plans
    few, many = _sync_sites(lambda: run(16)), _sync_sites(lambda: run(4))
    assert len(many) <= len(few), f"{len(many)} syncs with 4x the chunks against {len(few)}"
    # a site reported inside torch's own package ``__init__.py`` (seen once on an
    # H200 in the call with fewer chunks, not in the one with more: a one-off of
    # torch's, not per chunk) is not ours to bound
    ours = [site for site in few if not site.startswith("__init__.py:")]
    assert len(ours) <= SYNCS_PER_CALL[cls], f"{len(ours)} syncs in one call, at {few}"
    unexpected = [site for site in ours if site.split(":")[0] not in ALLOWED_SYNC_FILES]
    assert not unexpected, f"synchronising at {unexpected}"


def test_automatic_batching_adds_no_sync_per_chunk():
    """CUDA events, read without blocking, time the probing calls."""
    d = 12
    model = mlp(d, outputs=2).to(CUDA)
    x = torch.randn(1, d, dtype=torch.float64, device=CUDA)
    explainer = cg.ExactShapley(model)
    explainer.attribute(x, target=0, show_progress=False)  # warm-up
    syncs = _syncs(lambda: explainer.attribute(x, target=0, show_progress=False))
    fixed = _syncs(
        lambda: explainer.attribute(x, target=0, perturbations_per_eval=4096, show_progress=False)
    )
    assert syncs <= fixed + 2, (syncs, fixed)  # mem_get_info at the start, nothing per chunk


# ------------------------------------------------------------ paths added since the last GPU run


def test_labels_of_the_amortized_explainer_give_the_cpu_result_on_the_gpu():
    """Permutation labels (permutation_fill's orderings) and the default kernel labels:
    coalitions drawn on the host and moved, so the GPU's labels are the CPU's."""
    from captum_graphshap.amortized.labels import sampled_labels

    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for estimator, budget in (("permutation", 19), ("kernel", 24)):
        labels = {}
        for device in ("cpu", "cuda"):
            game, _ = prepare_game(mlp(7, outputs=1).to(device), x.to(device), 0.0, 0)
            out = sampled_labels(game, estimator, budget, torch.Generator().manual_seed(0))
            assert out.device.type == device
            labels[device] = out.cpu()
        torch.testing.assert_close(labels["cuda"], labels["cpu"], atol=1e-9, rtol=0)


def test_amortized_explainer_fits_and_explains_on_the_gpu():
    """Fit on the GPU: outputs there, sums equal to the output gap, an error against
    exact values like the CPU fit's (training rounds apart on the two devices), and a
    state saved on the GPU explains on the CPU."""
    d = 6
    x = torch.randn(800, d, generator=torch.Generator().manual_seed(0))
    test = torch.randn(40, d, generator=torch.Generator().manual_seed(5))
    errors, explainers = {}, {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 1)).eval().to(device)
        explainer = cg.AmortizedShapley(model)
        explainer.fit(
            x.to(device), baselines=0.0, target=0, budget=16, epochs=20,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        phi = explainer.attribute(test.to(device))
        assert phi.device.type == device
        gap = model(test.to(device))[:, 0] - model(torch.zeros(1, d, device=device))[:, 0]
        torch.testing.assert_close(phi.sum(1), gap.detach(), atol=1e-5, rtol=0)
        exact = cg.ExactShapley(model).attribute(test.to(device), baselines=0.0, target=0)
        errors[device] = float(((phi - exact).norm(dim=1) / exact.norm(dim=1)).mean())
        explainers[device] = (explainer, model)
    assert errors["cuda"] < 1.5 * errors["cpu"] + 0.02, errors
    explainer, model = explainers["cuda"]
    on_cpu = cg.AmortizedShapley(copy.deepcopy(model).cpu())
    on_cpu.load_state_dict(explainer.state_dict())
    torch.testing.assert_close(
        on_cpu.attribute(test), explainer.attribute(test.to(CUDA)).cpu(), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("budget", [9, 40])
def test_budgeted_owen_walk_for_every_output_gives_the_cpu_result_on_the_gpu(budget):
    """Without a target, one budgeted walk (exact and sampled splits) serves every output."""
    d = 12
    x = torch.randn(3, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    hierarchy = [[0, 1], list(range(2, 8)), [[8, 9], [10, 11]]]
    results = {}
    for device in ("cpu", "cuda"):
        model = mlp(d, outputs=3).to(device)
        out = cg.OwenValue(model).attribute(
            x.to(device), target=None, hierarchy=hierarchy, budget=budget,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        assert out.device.type == device and out.shape == (3, 3, d)
        gap = model(x.to(device)) - model(torch.zeros(1, d, dtype=x.dtype, device=device))
        torch.testing.assert_close(out.sum(-1), gap.detach(), atol=1e-9, rtol=0)
        results[device] = out.cpu()
    torch.testing.assert_close(results["cuda"], results["cpu"], atol=1e-9, rtol=0)


def test_blockwise_prefix_path_gives_the_one_pass_scores_on_the_gpu(monkeypatch):
    """A permutation sampler's nested prompts, scored block by block on shared caches
    (cheap blocks, so that the path is taken), against one pass and the CPU."""
    pytest.importorskip("transformers")
    from captum_graphshap.llm import LLMShapley
    from captum_graphshap.llm import prefix_cache as pc

    from .test_llm_prefix_cache import llama, nested_prompts

    monkeypatch.setattr(pc, "BLOCK_COST_TOKENS", {"cpu": 16, "cuda": 16})
    taken: list[int] = []
    monkeypatch.setattr(
        pc,
        "prefix_class_scores",
        lambda *args, _run=pc.prefix_class_scores: taken.append(1) or _run(*args),
    )
    prompts = nested_prompts(64, 2, seed=3)
    target = torch.tensor([3, 4, 5])
    scores = {}
    for device in ("cpu", "cuda"):
        model = llama(dtype=torch.float64).to(device)
        explainer = LLMShapley(cg.LShapley(model), None)
        with torch.no_grad():
            shared = pc.shared_prefix_scores(
                model, prompts.to(device), target.to(device), explainer._answer_scores
            )
            plain = explainer._score_in_one_pass(
                prompts.to(device), target.to(device), share_prefix=False
            )
        assert shared is not None and shared.device.type == device
        torch.testing.assert_close(shared, plain, atol=1e-9, rtol=0)
        scores[device] = shared.cpu()
    assert taken
    # the devices differ at 6e-8 (H100): Llama's rotary angles are float32 even in a
    # float64 model, and the GPU's sin/cos round apart from the CPU's
    torch.testing.assert_close(scores["cuda"], scores["cpu"], atol=1e-6, rtol=0)
