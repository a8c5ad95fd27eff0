"""``explain_dataset``: any attribution method over a dataset, on Ray Data actors."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._warnings import warn_caller
from .fingerprint import example_at, explainer_record, run_manifest
from .shards import (
    EXTRA_HINT,
    ShardSettings,
    call_factory,
    check_factory,
    check_manifest,
    check_positive,
    dataset_length,
    explain_range,
    read_explainer,
    record_explainer,
    remove_temporaries,
    shard_path,
    verify_shards,
    write_json,
    write_shard,
)

#: Where an actor leaves the message of an explainer that differs from the stored one
#: (Ray wraps an actor's exception in its own; the driver raises this message instead).
_CONFLICT = "_explainer_conflict.json"
#: a folder of attempt counts per shard, cleared at the start of every run
_ATTEMPTS = "_attempts"

#: ``attribute`` arguments that explain_dataset sets itself.
_RESERVED = ("inputs", "generator")


def require_ray() -> Any:
    """Import Ray Data, or raise an ImportError that names the ``[ray]`` extra."""
    try:
        import ray
        import ray.data
    except ImportError as error:
        raise ImportError(
            "captum_graphshap.distributed.explain_dataset runs on Ray Data, which is not "
            f"installed: {EXTRA_HINT} (it pins the tested ray[data] release)."
        ) from error
    return ray


@dataclasses.dataclass(frozen=True)
class DatasetRun:
    """What :func:`explain_dataset` did.

    Attributes:
        output_dir: the folder of the Parquet shards (read them with
            :func:`~captum_graphshap.distributed.read_explanations`).
        shards_written: shards explained by this call, in order.
        shards_skipped: shards already on disk (a resumed run), in order.
        examples_written: examples in the shards written.
        num_actors: Ray actors used (0 when nothing was left to do).
        device: ``"cuda"`` or ``"cpu"``: where the actors ran the model.
        seconds: wall time of the Ray job.
        rerun: shards whose file was on disk but damaged (empty, truncated,
            unreadable, other rows or ids, another run's fingerprint): they
            were deleted and explained again by this call, with a warning.
    """

    output_dir: Path
    shards_written: tuple[int, ...]
    shards_skipped: tuple[int, ...]
    examples_written: int
    num_actors: int
    device: str
    seconds: float
    rerun: tuple[int, ...] = ()

    @property
    def examples_per_second(self) -> float:
        return self.examples_written / self.seconds if self.seconds > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class _ShardJob:
    """What every actor of one run is built from (pickled to each actor)."""

    explainer_factory: Callable[..., Any]
    dataset: Any
    ids: Sequence[Any]
    directory: Path
    settings: ShardSettings
    attribute_kwargs: Mapping[str, Any]
    use_gpu: bool
    #: CPUs per actor: its torch threads without a GPU
    threads: int
    #: the run's fingerprint, written into every shard
    run: str
    #: restarts of a failed actor and retries of its shard (counted by the actors)
    max_retries: int = 3


class _ShardWorker:
    """A Ray Data actor: builds the explainer once, then explains and writes shards."""

    def __init__(self, job: _ShardJob) -> None:
        self.job = job
        self.device = torch.device("cuda" if job.use_gpu else "cpu")
        if not job.use_gpu:
            torch.set_num_threads(job.threads)
        self.explainer = call_factory(job.explainer_factory, self.device)
        # The explainer is known only here, where the factory ran: check it against the
        # one that wrote the folder's shards (or store it, for the first actor).
        record = explainer_record(self.explainer)
        self.fingerprint = {"run": job.run, "explainer": record["fingerprint"]}
        self.conflict = record_explainer(job.directory, record)
        if self.conflict is not None:
            write_json(job.directory / _CONFLICT, {"message": self.conflict})

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.conflict is not None:  # raised here, not in __init__: Ray restarts actors
            raise ValueError(self.conflict)
        job = self.job
        examples = []
        for shard in batch["shard"].tolist():
            _count_attempt(job.directory, shard, job.max_retries)
            start, stop = job.settings.bounds(shard)
            fields = explain_range(
                self.explainer,
                job.dataset,
                start,
                stop,
                job.settings,
                job.attribute_kwargs,
                self.device,
            )
            write_shard(job.directory, shard, job.ids[start:stop], fields, self.fingerprint)
            examples.append(stop - start)
        return {"shard": batch["shard"], "examples": np.asarray(examples)}


def _count_attempt(directory: Path, shard: int, max_retries: int) -> None:
    """Count one attempt at ``shard``; past ``max_retries`` retries, fail the run.

    Ray Data restarts a dead actor and retries its shard without bound by
    default (its per-call ``max_restarts`` options are deprecated): the
    attempts are counted here, on disk, so a shard that kills its actor every
    time ends the run with this error (not retried: it is the UDF's own)
    instead of looping.
    """
    folder = directory / _ATTEMPTS
    folder.mkdir(exist_ok=True)
    path = folder / f"shard-{shard:06d}"
    attempts = (int(path.read_text()) if path.exists() else 0) + 1
    path.write_text(str(attempts))
    if attempts > max_retries + 1:
        raise RuntimeError(
            f"shard {shard} failed {attempts - 1} times (its actor died or raised); "
            f"max_retries={max_retries}. Check its examples alone, or raise max_retries."
        )


def explain_dataset(
    explainer_factory: Callable[..., Any],
    dataset: Any,
    output_dir: str | os.PathLike[str],
    *,
    ids: Sequence[Any] | None = None,
    attribute_kwargs: Mapping[str, Any] | None = None,
    shard_size: int = 64,
    batch_size: int = 16,
    seed: int | None = None,
    num_actors: int | None = None,
    use_gpu: bool | None = None,
    cpus_per_actor: int = 1,
    max_retries: int = 3,
    overwrite: bool = False,
    show_progress: bool = False,
) -> DatasetRun:
    """Explain every example of ``dataset`` on Ray Data actors; Parquet shards out.

    The dataset is cut into shards of ``shard_size`` consecutive examples.
    Ray Data's ``map_batches`` hands the shards to a pool of actors: one per
    GPU of the Ray cluster, or one per ``cpus_per_actor`` CPUs when it has no
    GPU. Each actor calls ``explainer_factory`` once (with the
    ``torch.device`` it should use, when the factory takes an argument),
    explains its shards in micro-batches of ``batch_size`` examples and
    writes each shard, with the examples' ids, to
    ``output_dir/shard-NNNNNN.parquet`` (atomically: a temporary file, fsynced
    and renamed, so a shard file exists only when complete). A rerun skips
    the shards already written, so an interrupted job resumes and loses
    nothing; a failed actor is restarted and its shard retried by Ray
    (``max_retries`` times). Results do not
    depend on the number of actors: a micro-batch starting at position ``p``
    gets ``generator=torch.Generator().manual_seed(batch_seed(seed, p))``
    when ``seed`` is given, so a run is reproducible to the last bit.

    **Resuming only the same run.** ``output_dir/_manifest.json`` fingerprints
    the run: the settings (sizes, ``seed``), ``attribute_kwargs`` (canonical
    JSON; tensors by dtype, shape and a hash of their bytes), the
    captum_graphshap version, a hash of the ids and a hash of the data. A
    call on a folder whose manifest differs raises a ValueError, before Ray
    starts, that names what differs (``attribute_kwargs differ: target 3 vs
    5``, ``the data differ``, ...) and the fix: another ``output_dir``, or
    ``overwrite=True``. Hashing the data reads every example once in the
    driver (one pass over the data at every call, streaming: one example in
    memory at a time), so a dataset that loads examples lazily is read in
    full before Ray starts. The explainer's class, options and model (its
    class, and a hash of its parameters up to 256 MiB) are checked by the
    actors, because only the factory knows them and calling it in the driver
    would load the model there: the first actor stores the explainer's
    record in ``output_dir/_explainer.json``, and an actor that builds a
    different explainer fails the run, before writing anything, with a
    ValueError that names the difference. When every shard is already on
    disk no actor starts, so the explainer is not checked.

    **Verified shards.** Each shard file carries the run's fingerprint in its
    schema metadata. A rerun reads every shard file on disk in full (one
    read of the results so far) and keeps it only if it is readable Parquet
    with the shard's rows, ids and fingerprint; a damaged one (empty,
    truncated, written by another run) is deleted and explained again, with
    a warning naming the files, and :attr:`DatasetRun.rerun` lists them.

    Without a running Ray session this calls ``ray.init()`` (a local one on
    this machine); call ``ray.init(address=...)`` first to use a cluster. The
    dataset and the factory are pickled to the actors, and ``output_dir``
    must be a folder every actor can write (a shared filesystem on a
    cluster).

    Args:
        explainer_factory: ``factory(device) -> Attribution`` (or
            ``factory()``), e.g. ``lambda device: LShapley(load_model().to(device))``;
            it runs once in each actor, so the model is loaded there.
        dataset: a tensor or array (one example per row), a mapping of
            columns with an ``"inputs"`` column (``"target"``,
            ``"baselines"``, ``"feature_mask"`` optional), or a map-style
            dataset whose items are an input, ``(input, target)`` or a dict
            with those keys (``inputs`` may be a tuple of tensors).
        output_dir: the folder of the shards and of ``_manifest.json``.
        ids: one id per example (ints or strings), stored next to the
            attributions; default the positions ``0..n-1``.
        attribute_kwargs: more arguments of ``attribute``, the same for every
            example (``target=3``, ``k=2``, ``n_samples=...``, ...).
        shard_size: examples per shard (the unit of resumption and of
            work handed to an actor).
        batch_size: examples per ``attribute`` call inside a shard.
        seed: seeds a generator per micro-batch for sampled methods; None
            passes no generator (exact methods).
        num_actors: actors in the pool; default one per GPU (or per
            ``cpus_per_actor`` CPUs) of the Ray cluster.
        use_gpu: one GPU per actor; default True when the cluster has GPUs.
        cpus_per_actor: CPUs (and torch threads) per actor without GPUs.
        max_retries: restarts of a failed actor and retries of its shard.
        overwrite: delete the shards (and the manifest) of an earlier run in
            ``output_dir`` instead of resuming it.
        show_progress: show Ray Data's progress bars.

    Returns:
        A :class:`DatasetRun` saying which shards were written, skipped or
        re-run.

    Raises:
        ImportError: Ray is not installed (install the ``[ray]`` extra).
        ValueError: bad arguments, found before Ray starts; ``output_dir``
            holds another run (other settings, ``attribute_kwargs``, ids,
            data or package version; an earlier version's manifest; shard
            files without a manifest), found before Ray starts; or an actor's
            explainer differs from the one that wrote the shards.

    Example (``tutorials/09_datasets_on_ray.ipynb`` runs it)::

        from captum_graphshap import LShapley
        from captum_graphshap.distributed import explain_dataset, read_explanations

        run = explain_dataset(
            lambda device: LShapley(model.to(device)), images, "explanations/",
            attribute_kwargs={"target": 3, "k": 1},
        )
        phi = read_explanations("explanations/")["attributions"]
    """
    n, ids, kwargs = _checked_arguments(
        explainer_factory, dataset, ids, attribute_kwargs, shard_size, batch_size,
        num_actors, cpus_per_actor, max_retries, seed,
    )  # fmt: skip
    ray = require_ray()
    settings = ShardSettings(n, shard_size, batch_size, seed)
    manifest = run_manifest(settings, kwargs, ids, dataset)  # one pass over the data
    directory = Path(output_dir).resolve()
    done, rerun = _resume(directory, settings, ids, manifest, overwrite)
    pending = [s for s in range(settings.n_shards) if s not in done]
    skipped = tuple(sorted(done))
    if not pending:
        return DatasetRun(directory, (), skipped, 0, 0, "cpu", 0.0, rerun)
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=show_progress)
    gpu, num_actors = _actor_pool(ray, use_gpu, num_actors, cpus_per_actor, len(pending))

    started = time.perf_counter()
    job = _ShardJob(
        explainer_factory, dataset, ids, directory, settings, kwargs, gpu, cpus_per_actor,
        manifest["fingerprint"], max_retries,
    )  # fmt: skip
    summary = _explain_pending(ray, pending, show_progress, job, num_actors)
    seconds = time.perf_counter() - started
    written = tuple(sorted(int(row["shard"]) for row in summary))
    return DatasetRun(
        directory,
        written,
        skipped,
        int(sum(int(row["examples"]) for row in summary)),
        num_actors,
        "cuda" if gpu else "cpu",
        seconds,
        rerun,
    )


def _explain_pending(
    ray: Any,
    pending: list[int],
    show_progress: bool,
    job: _ShardJob,
    num_actors: int,
) -> list[dict[str, Any]]:
    """The Ray Data job over the pending shards, on a pool of ``num_actors`` actors.

    ``ray`` is :func:`require_ray`'s module, with ``ray.data`` imported.
    """
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = show_progress
    shutil.rmtree(job.directory / _ATTEMPTS, ignore_errors=True)
    shards = ray.data.from_items([{"shard": s} for s in pending], override_num_blocks=len(pending))
    quiet = contextlib.nullcontext() if show_progress else _quiet_logger("ray.data")
    with quiet, _explainer_conflicts_raised(job.directory):
        summary = _run(shards, job, num_actors, ray)
    shutil.rmtree(job.directory / _ATTEMPTS, ignore_errors=True)
    return summary


def _checked_arguments(
    explainer_factory: Any,
    dataset: Any,
    ids: Sequence[Any] | None,
    attribute_kwargs: Mapping[str, Any] | None,
    shard_size: int,
    batch_size: int,
    num_actors: int | None,
    cpus_per_actor: int,
    max_retries: int,
    seed: int | None,
) -> tuple[int, list[Any], dict[str, Any]]:
    """Every argument checked before Ray starts: the examples, their ids, the kwargs."""
    check_factory(explainer_factory)
    n = dataset_length(dataset)
    if n == 0:
        raise ValueError("dataset is empty: there is nothing to explain.")
    example_at(dataset, 0)  # the example format is checked here, before Ray starts
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} examples; give one id per example.")
    if len(set(ids)) != n:
        raise ValueError("ids must be unique: they identify the examples in the shards.")
    kwargs = dict(attribute_kwargs or {})
    reserved = sorted(set(kwargs) & set(_RESERVED))
    if reserved:
        raise ValueError(
            f"attribute_kwargs may not set {reserved}: inputs come from the dataset and "
            "the generator from seed=."
        )
    for value, name in ((shard_size, "shard_size"), (batch_size, "batch_size")):
        check_positive(value, name)
    check_positive(cpus_per_actor, "cpus_per_actor")
    if num_actors is not None:
        check_positive(num_actors, "num_actors")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}.")
    return n, ids, kwargs


def _resume(
    directory: Path,
    settings: ShardSettings,
    ids: list[Any],
    manifest: Mapping[str, Any],
    overwrite: bool,
) -> tuple[set[int], tuple[int, ...]]:
    """The shards already written and sound, and the damaged ones to explain again.

    Refuses a folder that holds another run (the manifest); damaged shard
    files are deleted, with a warning naming them.
    """
    check_manifest(directory, manifest, overwrite)
    remove_temporaries(directory)
    (directory / _CONFLICT).unlink(missing_ok=True)
    stored = read_explainer(directory)
    explainer = str(stored.get("fingerprint")) if stored is not None else None
    done, damaged = verify_shards(directory, settings, ids, manifest["fingerprint"], explainer)
    if damaged:
        found = "; ".join(f"{shard_path(directory, s).name}: {why}" for s, why in damaged.items())
        warn_caller(
            f"output_dir {str(directory)!r} held damaged shard files, deleted and explained "
            f"again: {found}."
        )
    return done, tuple(shard for shard in sorted(damaged) if shard < settings.n_shards)


def _actor_pool(
    ray: Any, use_gpu: bool | None, num_actors: int | None, cpus_per_actor: int, pending: int
) -> tuple[bool, int]:
    """Whether the actors take a GPU each, and how many there are."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    gpu = gpus > 0 if use_gpu is None else bool(use_gpu)
    if gpu and gpus == 0:
        raise ValueError("use_gpu=True but the Ray cluster has no GPU; pass use_gpu=False.")
    if num_actors is None:
        num_actors = gpus if gpu else max(1, int(resources.get("CPU", 1)) // cpus_per_actor)
    return gpu, min(num_actors, pending)


@contextlib.contextmanager
def _explainer_conflicts_raised(directory: Path) -> Iterator[None]:
    """An actor that built another explainer than the run's fails the run: say so plainly.

    Ray wraps an actor's exception in its own; the actor leaves its message in
    ``_CONFLICT``, raised here as a plain ``ValueError``.
    """
    try:
        yield
    except Exception:
        conflict = directory / _CONFLICT
        if conflict.exists():
            message = json.loads(conflict.read_text())["message"]
            conflict.unlink(missing_ok=True)
            raise ValueError(message) from None
        raise


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Ray Data's per-run INFO lines, silenced unless progress is asked for."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _run(shards: Any, job: _ShardJob, num_actors: int, ray: Any) -> list[dict[str, Any]]:
    """The Ray Data job: one shard per batch, an actor pool, results written by the actors."""
    resources_per_actor = {"num_gpus": 1} if job.use_gpu else {"num_cpus": job.threads}
    return shards.map_batches(
        _ShardWorker,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=num_actors, max_tasks_in_flight_per_actor=1),
        fn_constructor_args=(job,),
        # actor fault tolerance, Ray Data's default: a dead actor is restarted and
        # its shard retried; the shard's attempts are bounded by _count_attempt
        **resources_per_actor,
    ).take_all()
