"""Shards of a dataset explanation: examples in, Parquet files out (no Ray here).

A dataset of ``n`` examples is cut into shards of ``shard_size`` consecutive
examples; shard ``s`` holds positions ``[s * shard_size, (s + 1) * shard_size)``
and is written, whole and atomically, to ``shard-{s:06d}.parquet`` with the
examples' ids. Inside a shard the explainer sees micro-batches of
``batch_size`` examples; a sampled method gets a CPU generator seeded with
:func:`batch_seed` ``(seed, first position of the micro-batch)``. The result
of every example therefore depends on the data, the explainer, ``seed``,
``shard_size`` and ``batch_size`` only: not on how many workers run, which
one ran a shard, or in what order. A manifest (``_manifest.json``) records
those settings so that a rerun resumes only a compatible run.

The functions here are what a worker runs; :mod:`.ray_runner` distributes
them with Ray Data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

#: The extra that installs what this subpackage needs.
EXTRA_HINT = 'pip install "captum-graphshap[ray]"'
MANIFEST = "_manifest.json"
SHARD_PATTERN = re.compile(r"^shard-(\d{6})\.parquet$")
#: The keys an example given as a dict may have: ``attribute``'s per-example arguments.
EXAMPLE_KEYS = ("inputs", "target", "baselines", "feature_mask")
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


def example_at(dataset: Any, position: int) -> dict[str, Any]:
    """Example ``position`` as a dict with the keys of :data:`EXAMPLE_KEYS`.

    A tensor or array is the input; a tuple or list is ``(inputs,)`` or
    ``(inputs, target)`` (as ``TensorDataset`` gives); a dict names its parts.
    """
    if isinstance(dataset, Mapping):
        item: Any = {key: column[position] for key, column in dataset.items()}
    else:
        item = dataset[position]
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - set(EXAMPLE_KEYS))
        if unknown or "inputs" not in item:
            raise ValueError(
                f"an example given as a dict must have 'inputs' and may have "
                f"{', '.join(repr(k) for k in EXAMPLE_KEYS[1:])}; example {position} has "
                f"{sorted(item)}."
            )
        return dict(item)
    if isinstance(item, (tuple, list)):
        if len(item) not in (1, 2):
            raise ValueError(
                f"an example given as a tuple must be (inputs,) or (inputs, target); "
                f"example {position} has {len(item)} parts. Use a dict with the keys "
                f"{EXAMPLE_KEYS} for more."
            )
        return {"inputs": item[0]} if len(item) == 1 else {"inputs": item[0], "target": item[1]}
    return {"inputs": item}


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


def check_manifest(directory: Path, settings: ShardSettings, overwrite: bool) -> None:
    """Write the manifest, or refuse to resume a run made with other settings."""
    path = directory / MANIFEST
    wanted = dataclasses.asdict(settings)
    if path.exists() and not overwrite:
        found = json.loads(path.read_text())
        if found != wanted:
            raise ValueError(
                f"output_dir {str(directory)!r} holds a run made with {found}, not {wanted}: "
                "its shards would not fit this run. Use another output_dir, the same "
                "settings (to resume), or overwrite=True (to delete them)."
            )
        return
    directory.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for shard in completed_shards(directory):
            shard_path(directory, shard).unlink()
    path.write_text(json.dumps(wanted))


def write_shard(directory: Path, shard: int, ids: Sequence[Any], fields: Mapping[str, Tensor]):
    """Write one shard atomically: a temporary file renamed into place."""
    pq = require_pyarrow()
    import pyarrow as pa

    columns = {"id": pa.array(list(ids))}
    layout = {}
    for name, tensor in fields.items():
        flat = tensor.reshape(tensor.shape[0], -1).numpy()
        values = pa.array(flat.reshape(-1))
        columns[name] = pa.FixedSizeListArray.from_arrays(values, flat.shape[1])
        layout[name] = {"shape": list(tensor.shape[1:]), "dtype": str(flat.dtype)}
    table = pa.table(columns).replace_schema_metadata({"captum_graphshap": json.dumps(layout)})
    target = shard_path(directory, shard)
    temporary = directory / f".{target.name}.{uuid.uuid4().hex}.tmp"
    pq.write_table(table, temporary)
    os.replace(temporary, target)
    return target


def read_explanations(output_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Every shard of a run, ordered by position: ``{"id": ..., "attributions": ..., ...}``.

    Integer ids come back as an int64 tensor, others as a list; each stored
    field as a tensor ``(n, *shape)`` of its stored dtype.

    Example:
        >>> import tempfile, torch
        >>> from captum_graphshap.distributed.shards import read_explanations, write_shard
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = write_shard(folder, 0, [5, 6], {"attributions": torch.ones(2, 3)})
        >>> read_explanations(folder)["attributions"].shape
        torch.Size([2, 3])
    """
    pq = require_pyarrow()
    directory = Path(output_dir)
    shards = sorted(completed_shards(directory))
    if not shards:
        raise ValueError(f"output_dir {str(directory)!r} holds no shard-*.parquet files.")
    tables = [pq.read_table(shard_path(directory, shard)) for shard in shards]
    layout = json.loads(tables[0].schema.metadata[b"captum_graphshap"])
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
