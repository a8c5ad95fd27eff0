"""captum_graphshap.distributed: explain_dataset on a local Ray session of 2 CPUs.

One Ray session serves the module (Ray's start-up is the slow part). The
distributed results are compared, to the last bit, with the single-process
calls of the same explainer on the same micro-batches.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch.utils.data import TensorDataset

import captum_graphshap as cg
from captum_graphshap.distributed import batch_seed, explain_dataset, read_explanations
from captum_graphshap.distributed.shards import shard_path

from .optional_deps import optional

N, D, SHARD, BATCH = 14, 6, 4, 3  # 4 shards, the last one partial; 2 micro-batches per shard


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(N, D, generator=generator), torch.randint(0, 3, (N,), generator=generator)


def single_process(explainer, x, y, seed=None, **kwargs):
    """The same micro-batches, in one process, with the documented seeds."""
    pieces = []
    for start in range(0, N, SHARD):
        for first in range(start, min(start + SHARD, N), BATCH):
            last = min(first + BATCH, start + SHARD, N)
            extra = dict(kwargs)
            if seed is not None:
                extra["generator"] = torch.Generator().manual_seed(batch_seed(seed, first))
            pieces.append(explainer.attribute(x[first:last], target=y[first:last], **extra))
    return pieces


@pytest.fixture(scope="module")
def ray_session():
    ray = optional("ray")
    optional("pyarrow")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_two_actors_equal_the_single_process_result_for_an_exact_method(ray_session, tmp_path):
    model = make_model()
    x, y = make_data()
    ids = [f"example-{i}" for i in range(N)]
    run = explain_dataset(
        lambda device: cg.ExactShapley(model.to(device)),
        TensorDataset(x, y),
        tmp_path,
        ids=ids,
        shard_size=SHARD,
        batch_size=BATCH,
        num_actors=2,
    )
    assert run.num_actors == 2 and run.device == "cpu"
    assert run.shards_written == (0, 1, 2, 3) and run.shards_skipped == ()
    assert run.examples_written == N
    out = read_explanations(tmp_path)
    assert out["id"] == ids
    expected = torch.cat(single_process(cg.ExactShapley(model), x, y))
    assert out["attributions"].dtype == expected.dtype
    assert torch.equal(out["attributions"], expected)  # to the last bit
    # and they are Shapley values: efficiency, sum = f(x)[y] - f(0)[y]
    gap = (model(x) - model(torch.zeros_like(x))).gather(1, y[:, None])[:, 0]
    torch.testing.assert_close(out["attributions"].sum(1), gap, atol=1e-5, rtol=1e-5)


def test_seeded_sampling_resumes_after_a_lost_shard_and_survives_an_actor_crash(
    ray_session, tmp_path
):
    model = make_model()
    x, y = make_data()
    options = {"n_samples": 4, "return_uncertainty": True}
    folder = tmp_path / "out"

    def factory(device):
        return cg.ShapleySampling(model.to(device))

    first = explain_dataset(
        factory, {"inputs": x, "target": y}, folder, attribute_kwargs=options,
        shard_size=SHARD, batch_size=BATCH, seed=11, num_actors=2,
    )  # fmt: skip
    assert first.shards_written == (0, 1, 2, 3)
    reference = single_process(cg.ShapleySampling(model), x, y, seed=11, **options)
    out = read_explanations(folder)
    assert torch.equal(out["id"], torch.arange(N))
    assert torch.equal(out["attributions"], torch.cat([r.attributions for r in reference]))
    assert torch.equal(out["half_width"], torch.cat([r.half_width for r in reference]))

    # an interrupted job: shard 1 is lost; the rerun's actor dies on its first forward
    shard_path(folder, 1).unlink()
    kept = shard_path(folder, 2).stat().st_mtime_ns
    flag = tmp_path / "crashed"

    def crashing_factory(device):
        def forward(inputs):
            if not flag.exists():
                flag.write_text("once")
                os._exit(1)  # the actor's process dies; Ray restarts it and retries
            return model(inputs)

        return cg.ShapleySampling(forward)

    second = explain_dataset(
        crashing_factory, {"inputs": x, "target": y}, folder, attribute_kwargs=options,
        shard_size=SHARD, batch_size=BATCH, seed=11, num_actors=2,
    )  # fmt: skip
    assert flag.exists()  # the crash happened
    assert second.shards_written == (1,) and second.shards_skipped == (0, 2, 3)
    assert shard_path(folder, 2).stat().st_mtime_ns == kept  # not rewritten
    again = read_explanations(folder)
    assert torch.equal(again["attributions"], out["attributions"])
    assert torch.equal(again["half_width"], out["half_width"])


def test_a_finished_run_is_not_redone_and_other_settings_are_refused(tmp_path):
    pytest.importorskip("pyarrow")
    from captum_graphshap.distributed.shards import ShardSettings, check_manifest, write_shard

    settings = ShardSettings(N, SHARD, BATCH, None)
    check_manifest(tmp_path, settings, overwrite=False)
    for shard in range(settings.n_shards):
        start, stop = settings.bounds(shard)
        write_shard(
            tmp_path, shard, range(start, stop), {"attributions": torch.ones(stop - start, D)}
        )
    model = make_model()
    x, y = make_data()
    run = explain_dataset(  # everything is on disk: Ray is not even needed
        lambda: cg.ExactShapley(model), TensorDataset(x, y), tmp_path,
        shard_size=SHARD, batch_size=BATCH,
    )  # fmt: skip
    assert run.shards_written == () and run.shards_skipped == (0, 1, 2, 3)
    assert read_explanations(tmp_path)["attributions"].shape == (N, D)
    with pytest.raises(ValueError, match="overwrite=True"):
        explain_dataset(lambda: cg.ExactShapley(model), x, tmp_path, shard_size=5)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"shard_size": 0}, ValueError, "shard_size"),
        ({"batch_size": 2.5}, ValueError, "batch_size"),
        ({"ids": [1, 2]}, ValueError, "one id per example"),
        ({"ids": [0] * N}, ValueError, "unique"),
        ({"attribute_kwargs": {"generator": None}}, ValueError, "seed="),
        ({"seed": "1"}, TypeError, "seed"),
        ({"max_retries": -1}, ValueError, "max_retries"),
    ],
)
def test_bad_arguments_are_refused_before_ray_starts(tmp_path, kwargs, error, match):
    x, _ = make_data()
    with pytest.raises(error, match=match):
        explain_dataset(lambda: cg.ExactShapley(make_model()), x, tmp_path, **kwargs)
    assert not (tmp_path / "_manifest.json").exists()


def test_bad_datasets_are_refused(tmp_path):
    with pytest.raises(TypeError, match="map-style dataset"):
        explain_dataset(lambda: None, 3, tmp_path)
    with pytest.raises(ValueError, match="'inputs' column"):
        explain_dataset(lambda: None, {"x": torch.ones(2, 2)}, tmp_path)
    with pytest.raises(ValueError, match="may have 'target'"):
        explain_dataset(lambda: None, [{"inputs": torch.ones(2), "label": 1}], tmp_path)
    with pytest.raises(TypeError, match="explainer_factory"):
        explain_dataset(None, torch.ones(2, 2), tmp_path)


def test_without_ray_the_import_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    monkeypatch.setitem(sys.modules, "ray.data", None)
    with pytest.raises(ImportError, match=r"captum-graphshap\[ray\]"):
        explain_dataset(lambda: cg.ExactShapley(make_model()), torch.ones(3, D), tmp_path)


def test_explain_batch_in_a_ray_data_pipeline_equals_the_single_process_result(ray_session):
    import numpy as np
    import ray.data

    from captum_graphshap.distributed import ExplainBatch

    model = make_model()
    x, y = make_data()
    rows = [{"inputs": x[i].numpy(), "target": int(y[i]), "id": i} for i in range(N)]
    explained = ray.data.from_items(rows).map_batches(
        ExplainBatch,
        fn_constructor_kwargs={"explainer_factory": lambda device: cg.ExactShapley(model)},
        batch_size=BATCH,
        compute=ray.data.ActorPoolStrategy(size=2),
        num_cpus=1,
    )
    out = sorted(explained.take_all(), key=lambda row: row["id"])
    phi = torch.as_tensor(np.stack([row["attributions"] for row in out]))
    expected = cg.ExactShapley(model).attribute(x, target=y)
    torch.testing.assert_close(phi, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="ExplainBatch"):
        explain_dataset(lambda: cg.ExactShapley(model), ray.data.from_items(rows), "unused")


def test_explain_batch_adds_the_returned_fields_and_refuses_reserved_arguments():
    from captum_graphshap.distributed import ExplainBatch

    model = make_model()
    x, y = make_data()
    udf = ExplainBatch(
        lambda: cg.ShapleySampling(model),
        {"n_samples": 4, "return_uncertainty": True},
        device="cpu",
    )
    batch = {"inputs": x[:3].numpy(), "target": y[:3].numpy()}
    out = udf(batch)
    assert set(out) == {"inputs", "target", "attributions", "half_width"}
    assert out["attributions"].shape == (3, D) and out["half_width"].shape == (3, D)
    gap = (model(x[:3]) - model(torch.zeros(3, D))).gather(1, y[:3, None])[:, 0]
    torch.testing.assert_close(torch.as_tensor(out["attributions"]).sum(1), gap.detach())
    with pytest.raises(ValueError, match="'pixels' column"):
        ExplainBatch(lambda: cg.ExactShapley(model), input_column="pixels", device="cpu")(batch)
    with pytest.raises(ValueError, match="generator"):
        ExplainBatch(lambda: cg.ExactShapley(model), {"generator": None}, device="cpu")
