"""captum_graphshap.distributed: explain_dataset on a local Ray session of 2 CPUs.

One Ray session serves the module (Ray's start-up is the slow part). The
distributed results are compared, to the last bit, with the single-process
calls of the same explainer on the same micro-batches.
"""

from __future__ import annotations

import copy
import json
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


def written_on_disk(folder, model, dataset, ids=None, **attribute_kwargs):
    """A finished run of ExactShapley written in this process (what the actors would write)."""
    from captum_graphshap.distributed.fingerprint import explainer_record, run_manifest
    from captum_graphshap.distributed.shards import (
        ShardSettings,
        check_manifest,
        explain_range,
        record_explainer,
        write_shard,
    )

    settings = ShardSettings(N, SHARD, BATCH, None)
    ids = list(range(N)) if ids is None else ids
    manifest = run_manifest(settings, attribute_kwargs, ids, dataset)
    check_manifest(folder, manifest, overwrite=False)
    explainer = cg.ExactShapley(model)
    record = explainer_record(explainer)
    assert record_explainer(folder, record) is None
    stamp = {"run": manifest["fingerprint"], "explainer": record["fingerprint"]}
    for shard in range(settings.n_shards):
        start, stop = settings.bounds(shard)
        fields = explain_range(
            explainer, dataset, start, stop, settings, attribute_kwargs, torch.device("cpu")
        )
        write_shard(folder, shard, ids[start:stop], fields, stamp)
    return manifest, record


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

    # an interrupted job: shard 1 is lost, shard 3 truncated (a copy cut short), shard 0
    # empty; the rerun's actor dies on its first forward
    shard_path(folder, 1).unlink()
    data = shard_path(folder, 3).read_bytes()
    shard_path(folder, 3).write_bytes(data[: len(data) // 2])
    shard_path(folder, 0).write_bytes(b"")
    with pytest.raises(ValueError, match=r"shard-000000\.parquet' is damaged: empty"):
        read_explanations(folder)  # refused, naming the file: not pyarrow's ArrowInvalid
    kept = shard_path(folder, 2).stat().st_mtime_ns
    flag = tmp_path / "crashed"

    def crashing_factory(device):
        def crash(module, inputs):
            if not flag.exists():
                flag.write_text("once")
                os._exit(1)  # the actor's process dies; Ray restarts it and retries

        crashing = copy.deepcopy(model).to(device)  # the same model: class and parameters
        crashing.register_forward_pre_hook(crash)
        return cg.ShapleySampling(crashing)

    damaged = r"(?s)shard-000000\.parquet: empty.*shard-000003\.parquet: not readable"
    with pytest.warns(UserWarning, match=damaged):
        second = explain_dataset(
            crashing_factory, {"inputs": x, "target": y}, folder, attribute_kwargs=options,
            shard_size=SHARD, batch_size=BATCH, seed=11, num_actors=2,
        )  # fmt: skip
    assert flag.exists()  # the crash happened
    assert second.shards_written == (0, 1, 3) and second.shards_skipped == (2,)
    assert second.rerun == (0, 3)
    assert shard_path(folder, 2).stat().st_mtime_ns == kept  # not rewritten
    again = read_explanations(folder)
    assert torch.equal(again["attributions"], out["attributions"])
    assert torch.equal(again["half_width"], out["half_width"])

    # another explainer class on the same folder: its actor refuses before writing anything
    shard_path(folder, 2).unlink()
    with pytest.raises(ValueError, match=r"explainer class \S*ShapleySampling vs \S*ExactShapley"):
        explain_dataset(
            lambda device: cg.ExactShapley(model.to(device)), {"inputs": x, "target": y},
            folder, attribute_kwargs=options, shard_size=SHARD, batch_size=BATCH, seed=11,
            num_actors=1,
        )  # fmt: skip
    assert not shard_path(folder, 2).exists()


def test_a_finished_run_is_not_redone_and_other_settings_are_refused(tmp_path):
    optional("ray")
    optional("pyarrow")
    model = make_model()
    x, y = make_data()
    written_on_disk(tmp_path, model, TensorDataset(x, y))
    run = explain_dataset(  # everything is on disk: Ray is not even needed
        lambda: cg.ExactShapley(model), TensorDataset(x, y), tmp_path,
        shard_size=SHARD, batch_size=BATCH,
    )  # fmt: skip
    assert run.shards_written == () and run.shards_skipped == (0, 1, 2, 3) and run.rerun == ()
    expected = torch.cat(single_process(cg.ExactShapley(model), x, y))
    assert torch.equal(read_explanations(tmp_path)["attributions"], expected)
    with pytest.raises(ValueError, match=r"settings differ: .*shard_size 4 vs 5.*overwrite=True"):
        explain_dataset(
            lambda: cg.ExactShapley(model), TensorDataset(x, y), tmp_path, shard_size=5,
            batch_size=BATCH,
        )  # fmt: skip


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


# ------------------------------------------------- fingerprints and verified shards (no Ray)


def explain(folder, model, dataset, **kwargs):
    """explain_dataset with this file's sizes; Ray only starts if a shard is left to do."""
    options = {"shard_size": SHARD, "batch_size": BATCH, **kwargs}
    return explain_dataset(lambda: cg.ExactShapley(model), dataset, folder, **options)


def test_resuming_with_another_target_ids_or_data_is_refused_naming_what_differs(tmp_path):
    optional("ray")
    optional("pyarrow")
    model = make_model()
    x, _ = make_data()
    written_on_disk(tmp_path, model, x, target=0)
    manifest = json.loads((tmp_path / "_manifest.json").read_text())
    shards = sorted(tmp_path.glob("shard-*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in shards]
    # the same run: resumed (here: nothing left to do)
    assert explain(tmp_path, model, x, attribute_kwargs={"target": 0}).shards_skipped == (
        0,
        1,
        2,
        3,
    )
    with pytest.raises(
        ValueError, match=r"attribute_kwargs differ: target 0 vs 2 .*overwrite=True"
    ):
        explain(tmp_path, model, x, attribute_kwargs={"target": 2})
    with pytest.raises(ValueError, match=r"attribute_kwargs differ: n_samples absent vs 8"):
        explain(tmp_path, model, x, attribute_kwargs={"target": 0, "n_samples": 8})
    with pytest.raises(ValueError, match=r"attribute_kwargs differ: baselines absent vs .*tensor"):
        explain(tmp_path, model, x, attribute_kwargs={"target": 0, "baselines": x[:1]})
    other = x.clone()
    other[5, 2] += 1e-6  # one value of one example
    with pytest.raises(ValueError, match=r"the data differ \(sha256 [0-9a-f]{12}\.\.\. vs"):
        explain(tmp_path, model, other, attribute_kwargs={"target": 0})
    with pytest.raises(ValueError, match="the data differ"):  # the same values, float64
        explain(tmp_path, model, x.double(), attribute_kwargs={"target": 0})
    with pytest.raises(ValueError, match=r"the ids differ \(14 ids"):
        explain(
            tmp_path, model, x, ids=[f"row-{i}" for i in range(N)], attribute_kwargs={"target": 0}
        )
    with pytest.raises(ValueError, match="the ids differ"):
        explain(tmp_path, model, x, ids=list(range(1, N + 1)), attribute_kwargs={"target": 0})
    # nothing was touched by the refused calls
    assert json.loads((tmp_path / "_manifest.json").read_text()) == manifest
    assert [p.stat().st_mtime_ns for p in shards] == stamps


def test_the_data_hash_depends_on_the_examples_not_on_how_the_dataset_is_given():
    from captum_graphshap.distributed.fingerprint import data_digest

    x, y = make_data()
    pairs = data_digest(TensorDataset(x, y), N)
    assert data_digest({"inputs": x, "target": y}, N) == pairs
    assert data_digest([(x[i], y[i]) for i in range(N)], N) == pairs
    assert data_digest(TensorDataset(x, (y + 1) % 3), N) != pairs  # other targets
    assert data_digest(TensorDataset(x[[1, 0, *range(2, N)]], y), N) != pairs  # two swapped
    assert data_digest(x, N) != data_digest({"inputs": x, "target": y}, N)


def test_an_earlier_manifest_or_shards_without_one_are_refused_with_the_fix(tmp_path):
    optional("ray")
    optional("pyarrow")
    model = make_model()
    x, y = make_data()
    old = {"n_examples": N, "shard_size": SHARD, "batch_size": BATCH, "seed": None}
    (tmp_path / "_manifest.json").write_text(json.dumps(old))  # what 0.1 wrote
    with pytest.raises(ValueError, match=r"earlier captum_graphshap.*overwrite=True"):
        explain(tmp_path, model, TensorDataset(x, y))
    loose = tmp_path / "loose"
    written_on_disk(loose, model, TensorDataset(x, y))
    (loose / "_manifest.json").unlink()
    with pytest.raises(ValueError, match=r"shard files but no _manifest.json"):
        explain(loose, model, TensorDataset(x, y))
    # overwrite=True is the fix: the old manifest is replaced by this run's
    from captum_graphshap.distributed.fingerprint import run_manifest
    from captum_graphshap.distributed.shards import ShardSettings, check_manifest

    manifest = run_manifest(ShardSettings(N, SHARD, BATCH, None), {}, list(range(N)), x)
    check_manifest(tmp_path, manifest, overwrite=True)
    assert json.loads((tmp_path / "_manifest.json").read_text()) == manifest


def test_another_explainer_class_or_model_is_refused_naming_it(tmp_path):
    from captum_graphshap.distributed.fingerprint import explainer_record
    from captum_graphshap.distributed.shards import record_explainer

    model = make_model()
    exact = explainer_record(cg.ExactShapley(model))
    assert record_explainer(tmp_path, exact) is None  # the first actor stores it
    assert record_explainer(tmp_path, explainer_record(cg.ExactShapley(model))) is None
    assert (
        record_explainer(tmp_path, explainer_record(cg.ExactShapley(copy.deepcopy(model)))) is None
    )
    message = record_explainer(tmp_path, explainer_record(cg.ShapleySampling(model)))
    assert "explainer class captum_graphshap" in message and "ExactShapley vs" in message
    assert "ShapleySampling" in message and "overwrite=True" in message
    retrained = copy.deepcopy(model)
    with torch.no_grad():
        retrained[0].bias[0] += 1e-3
    message = record_explainer(tmp_path, explainer_record(cg.ExactShapley(retrained)))
    assert "the parameters of the model (torch.nn.modules.container.Sequential) differ" in message
    other = torch.nn.Sequential(torch.nn.Linear(D, 3))
    message = record_explainer(tmp_path, explainer_record(cg.ExactShapley(model.forward)))
    assert "model (forward_func) torch.nn.modules.container.Sequential vs torch" in message
    assert message.split(" vs ")[1].startswith("torch.nn.modules.container.Sequential.forward")
    message = record_explainer(tmp_path, explainer_record(cg.ExactShapley(other)))
    assert "parameters of the model" in message  # same class, other weights


def damage(path, how):
    data = path.read_bytes()
    path.write_bytes(b"" if how == "empty" else data[: len(data) // 2])


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_read_explanations_refuses_a_damaged_shard_naming_the_file(tmp_path, how):
    optional("pyarrow")
    written_on_disk(tmp_path, make_model(), make_data()[0], target=1)
    damage(shard_path(tmp_path, 2), how)
    reason = "empty" if how == "empty" else "not readable Parquet"
    with pytest.raises(ValueError, match=rf"shard-000002\.parquet' is damaged: {reason}"):
        read_explanations(tmp_path)


def test_verification_keeps_sound_shards_and_names_why_others_go(tmp_path):
    optional("pyarrow")
    from captum_graphshap.distributed.shards import ShardSettings, verify_shards, write_shard

    model = make_model()
    x, _ = make_data()
    manifest, record = written_on_disk(tmp_path, model, x, target=1)
    settings = ShardSettings(N, SHARD, BATCH, None)
    run, explainer = manifest["fingerprint"], record["fingerprint"]
    clean = read_explanations(tmp_path)
    ids = list(range(N))
    assert verify_shards(tmp_path, settings, ids, run, explainer) == ({0, 1, 2, 3}, {})

    damage(shard_path(tmp_path, 0), "empty")
    damage(shard_path(tmp_path, 1), "truncated")
    stamp = {"run": "0" * 64, "explainer": explainer}  # another run's shard
    write_shard(tmp_path, 2, ids[8:12], {"attributions": clean["attributions"][8:12]}, stamp)
    stamp = {"run": run, "explainer": explainer}  # this run's, one row short
    write_shard(tmp_path, 3, ids[12:13], {"attributions": clean["attributions"][12:13]}, stamp)
    kept, damaged = verify_shards(tmp_path, settings, ids, run, explainer)
    assert kept == set()
    assert damaged[0] == "empty (0 bytes)"
    assert damaged[1].startswith("not readable Parquet")
    assert damaged[2].startswith("written by another run")
    assert damaged[3] == "1 rows where the shard has 2"
    assert sorted(tmp_path.glob("shard-*")) == []  # deleted, to be re-run

    written_on_disk(tmp_path / "again", model, x, target=1)
    kept, damaged = verify_shards(tmp_path / "again", settings, ids[::-1], run, explainer)
    assert damaged == {s: "other ids than the examples of its positions" for s in range(4)}


def test_amortized_labels_made_on_ray_actors_train_the_explainer(ray_session, tmp_path):
    """AmortizedShapley's labels on two actors (ShapleyLabels through explain_dataset),
    to the last bit those of one process with the documented seeds, then fit on them."""
    from captum_graphshap.amortized import ShapleyLabels

    model = make_model()
    x, _ = make_data()
    target = torch.zeros(N, dtype=torch.long)
    options = {"budget": 16, "return_input_shape": False, "baselines": 0.0}
    explain_dataset(
        lambda device: ShapleyLabels(model.to(device)),
        TensorDataset(x, target),
        tmp_path,
        attribute_kwargs=options,
        shard_size=SHARD,
        batch_size=BATCH,
        seed=7,
        num_actors=2,
    )
    labels = read_explanations(tmp_path)["attributions"]
    expected = torch.cat(single_process(ShapleyLabels(model), x, target, seed=7, **options))
    assert torch.equal(labels, expected)
    explainer = cg.AmortizedShapley(model)
    validation = torch.randn(30, D, generator=torch.Generator().manual_seed(3))
    report = explainer.fit(
        x, baselines=0.0, target=0, budget=16, labels=labels, validation=validation,
        epochs=5, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert report.examples == N
    phi = explainer.attribute(x)
    gap = (model(x) - model(torch.zeros(1, D)))[:, 0]
    torch.testing.assert_close(phi.sum(1), gap.detach(), atol=1e-5, rtol=0)
