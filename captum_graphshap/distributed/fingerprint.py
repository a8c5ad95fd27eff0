"""What a dataset run's results depend on, as JSON and hashes (no Ray, no pyarrow here).

:func:`~captum_graphshap.distributed.explain_dataset` writes shards that a
later call resumes; a shard is only worth keeping if that call asks the same
question. Two records say what the question is:

* the run's manifest (:func:`run_manifest`), built in the driver before Ray
  starts: the :class:`~.shards.ShardSettings`, ``attribute_kwargs``
  (canonical JSON, tensors as dtype, shape and a hash of their bytes), the
  package version, a hash of the ids and a hash of the data;
* the explainer's record (:func:`explainer_record`), built in each actor
  from the explainer its factory returned: the explainer's class, its
  readable options (its attributes besides the model), the class of the
  model (``forward_func``) and, for an ``nn.Module`` up to
  :data:`PARAMETER_HASH_LIMIT` bytes, a hash of its parameters and buffers.

The explainer is only known once the factory has run, and the factory loads
the model: calling it once more in the driver just to read a class name
would load the model there too (a large language model, on a machine that
may have no GPU). So the explainer's record is made by the actors: the first
one stores it next to the manifest, every other one (of this call or of a
later one) compares its own with it, and a different explainer fails the run
before any of its shards is written.

Hashing the data reads every example once (``O(data)``, in the driver, at
every call): a map-style dataset that loads its examples lazily is read in
full before Ray starts. That is the price of refusing to mix shards made
from other data; it is a small part of explaining every example.

This module owns the manifest and what an example is (:func:`example_at`,
which the data's hash streams through); :mod:`.shards` owns the files and
imports from here, never the other way.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

#: The keys an example given as a dict may have: ``attribute``'s per-example arguments.
EXAMPLE_KEYS = ("inputs", "target", "baselines", "feature_mask")
#: The format of the manifest this version writes.
MANIFEST_FORMAT = "captum_graphshap.explain_dataset/2"
#: Models with more parameter and buffer bytes than this are described by
#: their parameter count, dtypes and shapes, not hashed (hashing costs about
#: a second per GB in every actor).
PARAMETER_HASH_LIMIT = 256 * 2**20


def qualified_name(obj: Any) -> str:
    """``module.QualName`` of a class, function or method."""
    module = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return f"{module}.{name}" if name else f"{module}.?"


def _tensor_bytes(tensor: Tensor) -> Any:
    """The tensor's bytes as a contiguous uint8 array (hashlib reads its buffer, no copy)."""
    tensor = tensor.detach()
    if tensor.layout != torch.strided:  # sparse: its values, densely
        tensor = tensor.to_dense()
    flat = tensor.to("cpu").resolve_conj().resolve_neg().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy()  # a view as bytes also covers bfloat16 and bool


def _array_bytes(array: np.ndarray) -> Any:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def digest_tensor(tensor: Tensor) -> str:
    return hashlib.sha256(_tensor_bytes(tensor)).hexdigest()


def canonical(value: Any, reprs: bool = True) -> Any:
    """``value`` as JSON-able data that is equal exactly when the values are.

    Tensors and arrays become their dtype, shape and a hash of their bytes
    (not their device); modules their class and parameter record; functions
    and classes their qualified name; other objects their class and, with
    ``reprs`` and when it shows no memory address, their ``repr``.
    """
    return _canonical(value, reprs)


def _canonical(value: Any, reprs: bool) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        return _canonical(value.item(), reprs)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, Tensor):
        return {
            "tensor": str(value.dtype),
            "shape": list(value.shape),
            "sha256": digest_tensor(value),
        }
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"array": "object", "values": _canonical(value.tolist(), reprs)}
        return {
            "array": str(value.dtype),
            "shape": list(value.shape),
            "sha256": hashlib.sha256(_array_bytes(value)).hexdigest(),
        }
    if isinstance(value, torch.nn.Module):
        return {"module": qualified_name(type(value)), "parameters": parameter_record(value)}
    if isinstance(value, (torch.dtype, torch.device)):
        return {type(value).__name__: str(value)}
    if isinstance(value, enum.Enum):
        return {"enum": f"{qualified_name(type(value))}.{value.name}"}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"tuple": [_canonical(v, reprs) for v in value]}
    if isinstance(value, list):
        return [_canonical(v, reprs) for v in value]
    if isinstance(value, Mapping):
        pairs = [[_canonical(k, reprs), _canonical(v, reprs)] for k, v in value.items()]
        return {"mapping": sorted(pairs, key=lambda pair: json.dumps(pair[0], sort_keys=True))}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted((_canonical(v, reprs) for v in value), key=json.dumps)}
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return {"callable": qualified_name(value)}
    if dataclasses.is_dataclass(value) or hasattr(value, "_fields"):
        fields = (
            [f.name for f in dataclasses.fields(value)]
            if dataclasses.is_dataclass(value)
            else list(value._fields)
        )
        return {
            "object": qualified_name(type(value)),
            "fields": {name: _canonical(getattr(value, name), reprs) for name in fields},
        }
    text = repr(value)
    described: dict[str, Any] = {"object": qualified_name(type(value))}
    if reprs and " at 0x" not in text:  # a default repr shows an address that changes every run
        described["repr"] = text
    return described


def digest_json(data: Any) -> str:
    """sha256 of ``data``'s canonical JSON text."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------- data and ids


def _feed(hasher: Any, value: Any, where: str) -> None:
    """Add ``value`` to ``hasher`` with type tags, so that different values cannot collide."""
    if isinstance(value, Tensor):
        hasher.update(f"T{value.dtype}{tuple(value.shape)};".encode())
        hasher.update(_tensor_bytes(value))
    elif isinstance(value, np.ndarray) and value.dtype != object:
        hasher.update(f"A{value.dtype}{value.shape};".encode())
        hasher.update(_array_bytes(value))
    elif isinstance(value, (tuple, list)):
        hasher.update(f"L{len(value)};".encode())
        for item in value:
            _feed(hasher, item, where)
    elif isinstance(value, Mapping):
        hasher.update(f"M{len(value)};".encode())
        for key in sorted(value, key=str):
            hasher.update(f"K{key!s};".encode())
            _feed(hasher, value[key], where)
    elif value is None or isinstance(value, (bool, numbers.Number, str, np.generic)):
        hasher.update(f"S{type(value).__name__}:{value!r};".encode())
    else:
        try:  # what collate would make of it
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(
                f"{where} holds a {type(value).__name__}, which explain_dataset cannot hash "
                "(nor stack into a tensor); give tensors, arrays or numbers."
            ) from error
        _feed(hasher, tensor, where)


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


def data_digest(dataset: Any, n_examples: int) -> str:
    """sha256 over every example's parts (names, dtypes, shapes, bytes), in order.

    Streaming: one example at a time through :func:`example_at`, so memory
    stays that of one example; time is one pass over the data.
    """
    hasher = hashlib.sha256()
    for position in range(n_examples):
        hasher.update(f"E{position};".encode())
        _feed(hasher, example_at(dataset, position), f"example {position}")
    return hasher.hexdigest()


def ids_digest(ids: Sequence[Any]) -> str:
    """sha256 of the ids as JSON (ints and strings, as the shards store them)."""
    return digest_json([canonical(i) for i in ids])


# --------------------------------------------------------------------- records


def run_manifest(
    settings: Any,
    attribute_kwargs: Mapping[str, Any],
    ids: Sequence[Any],
    dataset: Any,
) -> dict[str, Any]:
    """The manifest of a run (everything but the explainer), with its ``fingerprint``."""
    from .. import __version__

    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "package_version": __version__,
        "settings": dataclasses.asdict(settings),
        "attribute_kwargs": {str(k): canonical(v) for k, v in attribute_kwargs.items()},
        "ids": {"count": len(ids), "sha256": ids_digest(ids)},
        "data": {"sha256": data_digest(dataset, settings.n_examples)},
    }
    manifest["fingerprint"] = digest_json(manifest)
    return manifest


def parameter_record(module: torch.nn.Module) -> dict[str, Any]:
    """A module's parameters and buffers: count, and a hash of them when small enough."""
    state = module.state_dict()
    tensors = [(name, t) for name, t in sorted(state.items()) if isinstance(t, Tensor)]
    size = sum(t.numel() * t.element_size() for _, t in tensors)
    record: dict[str, Any] = {"count": sum(t.numel() for _, t in tensors)}
    if size <= PARAMETER_HASH_LIMIT:
        hasher = hashlib.sha256()
        try:
            for name, tensor in tensors:
                hasher.update(f"{name}:{tensor.dtype}{tuple(tensor.shape)};".encode())
                hasher.update(_tensor_bytes(tensor))
            record["sha256"] = hasher.hexdigest()
        except (RuntimeError, NotImplementedError, TypeError):
            pass  # parameters that cannot be read as bytes (offloaded, quantised): layout
    if "sha256" not in record:  # too large to hash in every actor: names, dtypes, shapes
        record["layout_sha256"] = digest_json(
            [[name, str(t.dtype), list(t.shape)] for name, t in tensors]
        )
    return record


def explainer_record(explainer: Any) -> dict[str, Any]:
    """The explainer's class, options and model, with their ``fingerprint``."""
    forward = getattr(explainer, "forward_func", None)
    owner = getattr(forward, "__self__", None)  # a bound method such as model.forward
    model = forward if isinstance(forward, torch.nn.Module) else owner
    if forward is None:
        model_record: Any = None
    elif isinstance(model, torch.nn.Module):
        model_record = {"class": qualified_name(type(model)), "parameters": parameter_record(model)}
        if model is owner:
            model_record["method"] = getattr(forward, "__name__", "?")
    elif isinstance(forward, type) or hasattr(forward, "__qualname__"):
        model_record = {"function": qualified_name(forward)}
    else:
        model_record = {"class": qualified_name(type(forward))}
    # Options are the explainer's attributes besides its model. Objects among them count
    # by class only (a tokenizer's repr names a local path that differs between nodes),
    # and a device not at all: actors on GPUs and on CPUs run the same explainer.
    options = {
        name: canonical(value, reprs=False)
        for name, value in sorted(vars(explainer).items() if hasattr(explainer, "__dict__") else ())
        if name != "forward_func" and not isinstance(value, (torch.nn.Module, torch.device))
    }
    record: dict[str, Any] = {
        "class": qualified_name(type(explainer)),
        "options": options,
        "model": model_record,
    }
    record["fingerprint"] = digest_json(record)
    return record


# ----------------------------------------------------------------- differences


def _show(value: Any, width: int = 70) -> str:
    if value is _ABSENT:
        return "absent"
    if isinstance(value, dict) and "sha256" in value and len(value) <= 4:
        value = {k: (v[:12] + "..." if k == "sha256" else v) for k, v in value.items()}
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


_ABSENT = object()


def _diff_mapping(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return [
        f"{key} {_show(old.get(key, _ABSENT))} vs {_show(new.get(key, _ABSENT))}"
        for key in sorted(set(old) | set(new))
        if old.get(key, _ABSENT) != new.get(key, _ABSENT)
    ]


def _mapping_differs(
    out: list[str], what: str, old: Mapping[str, Any], new: Mapping[str, Any], key: str
) -> None:
    changed = _diff_mapping(old.get(key, {}), new.get(key, {}))
    if changed:
        out.append(f"{what} differ: " + ", ".join(changed))


def _or_edited(
    out: list[str], what: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[str]:
    """The differences found; if none, but the fingerprints differ, that the file was edited."""
    if not out and old.get("fingerprint") != new.get("fingerprint"):
        out.append(f"{what} fingerprint differs (the file was edited)")
    return out


def manifest_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two manifests, in words (``on disk vs this call``)."""
    out = []
    if old.get("format") != new.get("format"):
        out.append(f"manifest format {_show(old.get('format'))} vs {_show(new.get('format'))}")
    if old.get("package_version") != new.get("package_version"):
        out.append(
            f"captum_graphshap version {old.get('package_version')} vs {new.get('package_version')}"
        )
    _mapping_differs(out, "settings", old, new, "settings")
    _mapping_differs(out, "attribute_kwargs", old, new, "attribute_kwargs")
    old_ids, new_ids = old.get("ids", {}), new.get("ids", {})
    if old_ids != new_ids:
        out.append(
            f"the ids differ ({old_ids.get('count')} ids, sha256 "
            f"{str(old_ids.get('sha256'))[:12]}... vs {new_ids.get('count')} ids, sha256 "
            f"{str(new_ids.get('sha256'))[:12]}...)"
        )
    old_data, new_data = old.get("data", {}), new.get("data", {})
    if old_data != new_data:
        out.append(
            f"the data differ (sha256 {str(old_data.get('sha256'))[:12]}... vs "
            f"{str(new_data.get('sha256'))[:12]}...)"
        )
    return _or_edited(out, "the manifest's", old, new)


def _model_kind(model: Mapping[str, Any]) -> str:
    kind = str(model.get("class") or model.get("function"))
    return f"{kind}.{model['method']}" if "method" in model else kind


def explainer_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two explainer records, in words (``on disk vs this call``)."""
    out = []
    if old.get("class") != new.get("class"):
        out.append(f"explainer class {old.get('class')} vs {new.get('class')}")
    _mapping_differs(out, "explainer options", old, new, "options")
    old_model, new_model = old.get("model") or {}, new.get("model") or {}
    if old_model != new_model:
        old_kind, new_kind = _model_kind(old_model), _model_kind(new_model)
        if old_kind != new_kind:
            out.append(f"model (forward_func) {old_kind} vs {new_kind}")
        else:
            out.append(
                f"the parameters of the model ({old_kind}) differ: "
                f"{_show(old_model.get('parameters'))} vs {_show(new_model.get('parameters'))}"
            )
    return _or_edited(out, "the explainer record's", old, new)
