"""Shards of a dataset explanation: examples in, Parquet files out (no Ray here).

A dataset of ``n`` examples is cut into shards of ``shard_size`` consecutive
examples; shard ``s`` holds positions ``[s * shard_size, (s + 1) * shard_size)``
and is written, whole and atomically, to ``shard-{s:06d}.parquet`` with the
examples' ids. Inside a shard the explainer sees micro-batches of
``batch_size`` examples; a sampled method gets a CPU generator seeded with
:func:`batch_seed` ``(seed, first position of the micro-batch)``. The result
of every example therefore depends on the data, the explainer, ``seed``,
``shard_size`` and ``batch_size`` only: not on how many workers run, which
one ran a shard, or in what order.

A manifest (``_manifest.json``, :func:`check_manifest`) fingerprints the run
(see :mod:`.fingerprint`): those settings, ``attribute_kwargs``, the package
version, and hashes of the ids and of the data; the first actor stores the
explainer's record next to it (``_explainer.json``, :func:`record_explainer`).
A rerun resumes only the same run and names what differs otherwise. Every
write is atomic (a temporary file, fsynced, renamed into place, the folder
fsynced) and every shard carries the run's fingerprint in its schema
metadata, so a rerun verifies the shards on disk (:func:`verify_shards`) and
re-runs a damaged one instead of skipping it, and :func:`read_explanations`
refuses one with the file's name.

The functions here are what a worker runs; :mod:`.ray_runner` distributes
them with Ray Data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .fingerprint import (
    MANIFEST_FORMAT,
    canonical,
    example_at,
    explainer_differences,
    manifest_differences,
)

#: The extra that installs what this subpackage needs.
EXTRA_HINT = 'pip install "captum-graphshap[ray]"'
MANIFEST = "_manifest.json"
#: The explainer's record, stored by the first actor (see :mod:`.fingerprint`).
EXPLAINER = "_explainer.json"
TEMPORARY_SUFFIX = ".tmp"
#: Schema metadata keys of a shard: its fields' shapes and dtypes; its run's fingerprint.
LAYOUT_KEY = b"captum_graphshap"
RUN_KEY = b"captum_graphshap_run"
SHARD_PATTERN = re.compile(r"^shard-(\d{6})\.parquet$")
_SEED_STRIDE = 1_000_003


def require_pyarrow() -> Any:
    """Import pyarrow.parquet, or raise an ImportError naming the ``[ray]`` extra."""
    try:
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - pyarrow comes with ray[data]
        raise ImportError(
            f"Parquet shards need pyarrow, which the [ray] extra installs: {EXTRA_HINT}"
        ) from error
    return pq


@dataclasses.dataclass(frozen=True)
class ShardSettings:
    """What a run's results depend on besides the data and the explainer."""

    n_examples: int
    shard_size: int
    batch_size: int
    seed: int | None

    @property
    def n_shards(self) -> int:
        return -(-self.n_examples // self.shard_size)

    def bounds(self, shard: int) -> tuple[int, int]:
        """Positions ``[start, stop)`` of ``shard``."""
        start = shard * self.shard_size
        return start, min(start + self.shard_size, self.n_examples)


def batch_seed(seed: int, start: int) -> int:
    """The generator seed of the micro-batch that starts at position ``start``."""
    return (int(seed) * _SEED_STRIDE + int(start)) % (2**63)


def check_positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return value


def dataset_length(dataset: Any) -> int:
    """Number of examples of a tensor, array, mapping of columns or map-style dataset."""
    if isinstance(dataset, Mapping):
        if "inputs" not in dataset:
            raise ValueError(
                "dataset given as a mapping of columns needs an 'inputs' column; "
                f"got the columns {sorted(dataset)}."
            )
        lengths = {key: len(column) for key, column in dataset.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"dataset's columns differ in length: {lengths}.")
        return lengths["inputs"]
    if type(dataset).__module__.startswith("ray.data"):
        raise TypeError(
            "explain_dataset reads examples by position (shards, resuming), which a "
            "ray.data.Dataset does not offer. Put captum_graphshap.distributed.ExplainBatch "
            "in its pipeline instead: ds.map_batches(ExplainBatch, fn_constructor_kwargs="
            "{'explainer_factory': ...}, compute=ray.data.ActorPoolStrategy(size=...)); or, "
            "if it fits in memory, pass ds.to_pandas() columns as a mapping."
        )
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TypeError(
            "dataset must be a tensor, an array, a mapping of columns or a map-style "
            f"dataset (with __len__ and __getitem__), got {type(dataset).__name__}."
        )
    return len(dataset)


def _stack(values: list[Any], device: torch.device) -> Any:
    if isinstance(values[0], (tuple, list)):  # a tuple of input tensors
        return tuple(_stack([v[i] for v in values], device) for i in range(len(values[0])))
    return torch.stack([torch.as_tensor(v) for v in values]).to(device)


def collate(dataset: Any, start: int, stop: int, device: torch.device) -> dict[str, Any]:
    """Examples ``[start, stop)`` stacked into ``attribute``'s batched arguments."""
    examples = [example_at(dataset, position) for position in range(start, stop)]
    keys = set(examples[0])
    for position, example in zip(range(start, stop), examples):
        if set(example) != keys:
            raise ValueError(
                f"every example must have the same parts; example {start} has "
                f"{sorted(keys)}, example {position} has {sorted(example)}."
            )
    return {key: _stack([example[key] for example in examples], device) for key in keys}


def result_fields(result: Any, rows: int) -> dict[str, Tensor]:
    """Per-example tensors of an ``attribute`` result, named for the Parquet columns.

    A tensor is ``attributions``; a tuple of tensors (several inputs)
    ``attributions_0``, ...; a named tuple (``return_*=True``) gives each of
    its per-example tensor fields (non-tensor extras are left out).
    """
    if isinstance(result, Tensor):
        named: list[tuple[str, Any]] = [("attributions", result)]
    elif isinstance(result, tuple) and hasattr(result, "_fields"):
        named = list(zip(result._fields, result))
    elif isinstance(result, tuple):
        named = [("attributions", result)]
    else:
        raise TypeError(
            f"the explainer returned {type(result).__name__}; explain_dataset stores "
            "tensors, tuples of tensors or the named tuples of return_*=True."
        )
    fields: dict[str, Tensor] = {}
    for name, value in named:
        parts = [(name, value)]
        if isinstance(value, tuple):
            parts = [(f"{name}_{i}", v) for i, v in enumerate(value)]
        for key, tensor in parts:
            if isinstance(tensor, Tensor) and tensor.dim() >= 1 and tensor.shape[0] == rows:
                fields[key] = tensor.detach().cpu()
    return fields


def explain_range(
    explainer: Any,
    dataset: Any,
    start: int,
    stop: int,
    settings: ShardSettings,
    attribute_kwargs: Mapping[str, Any],
    device: torch.device,
) -> dict[str, Tensor]:
    """Explain positions ``[start, stop)`` in micro-batches; per-example fields on the CPU."""
    pieces: list[dict[str, Tensor]] = []
    for first in range(start, stop, settings.batch_size):
        last = min(first + settings.batch_size, stop)
        arguments = collate(dataset, first, last, device)
        extra = dict(attribute_kwargs)
        if settings.seed is not None:
            extra["generator"] = torch.Generator().manual_seed(batch_seed(settings.seed, first))
        inputs = arguments.pop("inputs")
        result = explainer.attribute(inputs, **arguments, **extra)
        pieces.append(result_fields(result, last - first))
    names = pieces[0].keys()
    return {name: torch.cat([piece[name] for piece in pieces]) for name in names}


# --------------------------------------------------------------------- files


def shard_path(directory: Path, shard: int) -> Path:
    return directory / f"shard-{shard:06d}.parquet"


def completed_shards(directory: Path) -> set[int]:
    """Shards whose file exists (files are renamed into place only when complete)."""
    if not directory.is_dir():
        return set()
    found = (SHARD_PATTERN.match(name) for name in os.listdir(directory))
    return {int(match.group(1)) for match in found if match}


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows, or a filesystem that does not allow it
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _temporary(target: Path) -> Path:
    return target.parent / f".{target.name}.{uuid.uuid4().hex}{TEMPORARY_SUFFIX}"


def _publish(temporary: Path, target: Path) -> None:
    """fsync ``temporary``, rename it to ``target`` (atomic) and fsync the folder."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, target)
    _fsync_directory(target.parent)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (a temporary file renamed into place)."""
    temporary = _temporary(path)
    temporary.write_text(json.dumps(data, sort_keys=True, indent=1))
    _publish(temporary, path)


def _remove_run_files(directory: Path) -> None:
    for shard in completed_shards(directory):
        shard_path(directory, shard).unlink(missing_ok=True)
    (directory / EXPLAINER).unlink(missing_ok=True)
    remove_temporaries(directory)


def remove_temporaries(directory: Path) -> None:
    """Delete the temporary files of writes that never finished (a killed actor's)."""
    if directory.is_dir():
        for name in os.listdir(directory):
            if name.startswith(".") and name.endswith(TEMPORARY_SUFFIX):
                (directory / name).unlink(missing_ok=True)


def _refuse(directory: Path, what: str) -> ValueError:
    return ValueError(
        f"output_dir {str(directory)!r} holds another run than this call asks for: {what}. "
        "Its shards would not answer the same question as this call's. Use another "
        "output_dir, the same arguments as that run (to resume it), or overwrite=True "
        "(to delete its shards and start afresh)."
    )


def check_manifest(directory: Path, manifest: Mapping[str, Any], overwrite: bool) -> None:
    """Write the run's manifest, or refuse to resume a run that differs from it.

    ``manifest`` is :func:`~.fingerprint.run_manifest`'s. An existing
    manifest must be equal to it: otherwise a ValueError names what differs
    (settings, ``attribute_kwargs`` argument by argument, the ids, the data,
    the package version). A manifest of an earlier version (its sizes and
    seed only) cannot tell, and is refused the same way. Shard files without
    a manifest are refused too. ``overwrite`` deletes the run's files first.
    """
    path = directory / MANIFEST
    if path.exists() and not overwrite:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise _refuse(directory, f"its manifest {path.name} cannot be read ({error})") from None
        if not isinstance(found, dict) or "fingerprint" not in found:
            raise _refuse(
                directory,
                f"its manifest {path.name} was written by an earlier captum_graphshap and records "
                f"only {found}, not the explainer's arguments, the ids or the data, so this "
                "call cannot tell whether its shards fit",
            )
        differences = manifest_differences(found, manifest)
        if differences:
            raise _refuse(directory, "; ".join(differences) + " (on disk vs this call)")
        return
    directory.mkdir(parents=True, exist_ok=True)
    if overwrite:
        _remove_run_files(directory)
    elif completed_shards(directory):
        raise _refuse(
            directory,
            f"shard files but no {MANIFEST}, so they cannot be matched to this run",
        )
    else:  # a leftover of a run whose manifest is gone: not this run's explainer
        (directory / EXPLAINER).unlink(missing_ok=True)
    write_json(path, dict(manifest))


def record_explainer(directory: Path, record: Mapping[str, Any]) -> str | None:
    """Store the explainer's record, or compare it with the stored one.

    The first actor to get here stores its record (a hard link of a complete
    temporary file: exactly one actor wins, and no reader sees half a file).
    Returns None when the records agree, else the message that names what
    differs.
    """
    path = directory / EXPLAINER
    if not path.exists():
        temporary = _temporary(path)
        temporary.write_text(json.dumps(dict(record), sort_keys=True, indent=1))
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another actor was first: compare with its record below
        except OSError:  # no hard links here (some network filesystems): exclusive create
            try:
                with open(path, "x") as handle:
                    handle.write(temporary.read_text())
            except FileExistsError:
                pass
        finally:
            temporary.unlink(missing_ok=True)
        _fsync_directory(directory)
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = {}
    differences = explainer_differences(found, record)
    if not differences:
        return None
    return str(
        _refuse(
            directory,
            "; ".join(differences) + f" (the explainer that wrote its shards, recorded in "
            f"{EXPLAINER}, vs the one explainer_factory builds)",
        )
    )


def read_explainer(directory: Path) -> dict[str, Any] | None:
    """The stored explainer record, or None when no actor has stored one."""
    path = directory / EXPLAINER
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _parquet_options() -> tuple[dict[str, Any], dict[str, Any]]:
    """Page checksums on write and on read, where pyarrow has them (14 and later)."""
    import inspect

    pq = require_pyarrow()
    write = {"write_page_checksum": True}
    read = {"page_checksum_verification": True}
    if "write_page_checksum" not in inspect.signature(pq.write_table).parameters:
        write = {}
    if "page_checksum_verification" not in inspect.signature(pq.read_table).parameters:
        read = {}
    return write, read


def write_shard(
    directory: Path,
    shard: int,
    ids: Sequence[Any],
    fields: Mapping[str, Tensor],
    fingerprint: Mapping[str, Any] | None = None,
) -> Path:
    """Write one shard atomically: a temporary file, fsynced, renamed into place.

    ``fingerprint`` (``{"run": ..., "explainer": ...}``) goes into the file's
    schema metadata with the shard number and its row count, so that a
    resumed run and :func:`read_explanations` can tell the shard's run.
    """
    pq = require_pyarrow()
    import pyarrow as pa

    columns = {"id": pa.array([canonical(i) for i in ids])}
    layout = {}
    for name, tensor in fields.items():
        flat = tensor.reshape(tensor.shape[0], -1).numpy()
        values = pa.array(flat.reshape(-1))
        columns[name] = pa.FixedSizeListArray.from_arrays(values, flat.shape[1])
        layout[name] = {"shape": list(tensor.shape[1:]), "dtype": str(flat.dtype)}
    stamp = {**dict(fingerprint or {}), "shard": shard, "rows": len(ids)}
    table = pa.table(columns).replace_schema_metadata(
        {LAYOUT_KEY: json.dumps(layout), RUN_KEY: json.dumps(stamp, sort_keys=True)}
    )
    target = shard_path(directory, shard)
    temporary = _temporary(target)
    pq.write_table(table, temporary, **_parquet_options()[0])
    _publish(temporary, target)
    return target


def _load_shard(path: Path) -> tuple[Any, str | None]:
    """``(table, None)``, or ``(None, why the file is damaged)``."""
    pq = require_pyarrow()
    import pyarrow as pa

    try:
        if path.stat().st_size == 0:
            return None, "empty (0 bytes)"
        table = pq.read_table(path, **_parquet_options()[1])
    except (pa.ArrowException, OSError) as error:
        return None, f"not readable Parquet ({error})"
    metadata = table.schema.metadata or {}
    if LAYOUT_KEY not in metadata or "id" not in table.column_names:
        return None, "not a captum_graphshap shard (no id column or field layout)"
    return table, None


def _stamp(table: Any) -> dict[str, Any]:
    try:
        stamp = json.loads(table.schema.metadata[RUN_KEY])
    except (KeyError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def shard_problem(
    directory: Path,
    shard: int,
    settings: ShardSettings,
    ids: Sequence[Any] | None,
    run: str,
    explainer: str | None,
) -> str | None:
    """Why shard ``shard``'s file cannot be kept for this run, or None when it can.

    The file must be readable Parquet (every page, with its checksum where
    pyarrow writes them), hold the rows of the shard's bounds with the
    expected ids, and carry this run's fingerprint (and the stored
    explainer's, when one is stored).
    """
    table, damage = _load_shard(shard_path(directory, shard))
    if table is None:
        return damage
    if shard >= settings.n_shards:
        return f"beyond the run's {settings.n_shards} shards"
    start, stop = settings.bounds(shard)
    stamp = _stamp(table)
    if not stamp:
        return "without a run fingerprint (another version or program wrote it)"
    if stamp.get("run") != run:
        return f"written by another run (fingerprint {str(stamp.get('run'))[:12]}...)"
    if explainer is not None and stamp.get("explainer") != explainer:
        return "written by another explainer than the one stored in " + EXPLAINER
    if stamp.get("shard") != shard:
        return f"shard {stamp.get('shard')}'s file under another name"
    if table.num_rows != stop - start:
        return f"{table.num_rows} rows where the shard has {stop - start}"
    expected = None if ids is None else [canonical(i) for i in ids[start:stop]]
    if expected is not None and table.column("id").to_pylist() != expected:
        return "other ids than the examples of its positions"
    return None


def verify_shards(
    directory: Path,
    settings: ShardSettings,
    ids: Sequence[Any],
    run: str,
    explainer: str | None,
) -> tuple[set[int], dict[int, str]]:
    """The shard files that can be kept, and the others with the reason (these are deleted).

    Reads every shard file in full, once per call: resuming costs one read
    of the results written so far.
    """
    kept: set[int] = set()
    damaged: dict[int, str] = {}
    for shard in sorted(completed_shards(directory)):
        problem = shard_problem(directory, shard, settings, ids, run, explainer)
        if problem is None:
            kept.add(shard)
        else:
            damaged[shard] = problem
            shard_path(directory, shard).unlink(missing_ok=True)
    return kept, damaged


def read_explanations(output_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Every shard of a run, ordered by position: ``{"id": ..., "attributions": ..., ...}``.

    Integer ids come back as an int64 tensor, others as a list; each stored
    field as a tensor ``(n, *shape)`` of its stored dtype.

    A damaged shard file (empty, truncated, not Parquet, or written by
    another run than the folder's manifest records) raises a ValueError that
    names the file; rerunning :func:`explain_dataset` with the same
    arguments re-runs it. A run with shards still missing is read with a
    warning that names them.

    Example:
        >>> import tempfile, torch
        >>> from captum_graphshap.distributed.shards import read_explanations, write_shard
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = write_shard(folder, 0, [5, 6], {"attributions": torch.ones(2, 3)})
        >>> read_explanations(folder)["attributions"].shape
        torch.Size([2, 3])
    """
    directory = Path(output_dir)
    shards = sorted(completed_shards(directory))
    if not shards:
        raise ValueError(f"output_dir {str(directory)!r} holds no shard-*.parquet files.")
    manifest = _read_manifest(directory)
    settings = ShardSettings(**manifest["settings"]) if manifest is not None else None
    fix = "rerun explain_dataset with the same arguments: it re-runs damaged shards"
    tables = []
    for shard in shards:
        path = shard_path(directory, shard)
        table, damage = _load_shard(path)
        if table is None:
            raise ValueError(f"shard file {str(path)!r} is damaged: {damage}; {fix}.")
        if manifest is not None and settings is not None:
            if shard >= settings.n_shards or _stamp(table).get("run") != manifest["fingerprint"]:
                raise ValueError(
                    f"shard file {str(path)!r} was not written by the run that {MANIFEST} "
                    f"records; {fix} (overwrite=True starts afresh)."
                )
            start, stop = settings.bounds(shard)
            if table.num_rows != stop - start:
                raise ValueError(
                    f"shard file {str(path)!r} holds {table.num_rows} rows where its shard has "
                    f"{stop - start}; {fix}."
                )
        tables.append(table)
    layout_text = tables[0].schema.metadata[LAYOUT_KEY]
    for shard, table in zip(shards, tables):
        if table.schema.metadata[LAYOUT_KEY] != layout_text:
            raise ValueError(
                f"shard file {str(shard_path(directory, shard))!r} stores other fields than "
                f"{str(shard_path(directory, shards[0]))!r}: the folder mixes runs. Rerun "
                "explain_dataset with overwrite=True."
            )
    layout = json.loads(layout_text)
    if settings is not None:
        missing = sorted(set(range(settings.n_shards)) - set(shards))
        if missing:
            warnings.warn(
                f"the run in {str(directory)!r} is incomplete: shards {missing} are missing, so "
                "their examples are not in the result; rerun explain_dataset with the same "
                "arguments to finish it.",
                stacklevel=2,
            )
    ids = [value for table in tables for value in table.column("id").to_pylist()]
    out: dict[str, Any] = {"id": torch.tensor(ids) if all(isinstance(i, int) for i in ids) else ids}
    for name, spec in layout.items():
        arrays = [
            np.asarray(table.column(name).combine_chunks().flatten(), dtype=spec["dtype"])
            for table in tables
        ]
        flat = np.concatenate(arrays)
        out[name] = torch.from_numpy(flat.reshape(len(ids), *spec["shape"]).copy())
    return out


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    """The folder's manifest when it is one of this format, else None."""
    try:
        found = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(found, dict) and found.get("format") == MANIFEST_FORMAT:
        return found
    return None


def check_factory(factory: Any) -> None:
    """``explainer_factory`` must be callable (checked before Ray or a model starts)."""
    if not callable(factory):
        raise TypeError(
            "explainer_factory must be a callable returning an explainer, e.g. "
            f"lambda device: LShapley(model.to(device)); got {type(factory).__name__}."
        )


def call_factory(factory: Callable[..., Any], device: torch.device) -> Any:
    """``factory(device)``, or ``factory()`` when it takes no argument."""
    import inspect

    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: call it plainly
        parameters = []  # type: ignore[assignment]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes_device = any(
        p.kind in positional or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters
    )
    explainer = factory(device) if takes_device else factory()
    if not hasattr(explainer, "attribute"):
        raise TypeError(
            "explainer_factory must return an attribution object with an attribute method "
            f"(e.g. LShapley(model)), got {type(explainer).__name__}."
        )
    return explainer
