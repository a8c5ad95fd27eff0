"""``ExplainBatch``: our explainers inside a user's own Ray Data pipeline."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .shards import call_factory, check_factory, result_fields

#: ``attribute_kwargs`` that ExplainBatch sets itself (from the batch, or not at all).
_RESERVED = ("inputs", "target", "generator")


class ExplainBatch:
    """A ``map_batches`` callable that adds attributions to each batch of a ``ray.data.Dataset``.

    :func:`~captum_graphshap.distributed.explain_dataset` reads examples by
    position, which resuming needs, so it takes indexable datasets. A
    ``ray.data.Dataset`` streams its rows instead: put this class in its
    pipeline, and Ray Data runs one instance per actor::

        ds = ray.data.from_items([{"inputs": x.numpy(), "target": 3} for x in images])
        explained = ds.map_batches(
            ExplainBatch,
            fn_constructor_kwargs={
                "explainer_factory": lambda device: LShapley(model.to(device)),
                "attribute_kwargs": {"k": 1},
            },
            batch_size=16,
            compute=ray.data.ActorPoolStrategy(size=2),
            num_cpus=1,  # or num_gpus=1: the actor then runs on "cuda"
        )
        explained.write_parquet("explanations/")

    Each output batch is the input batch plus ``attributions`` (and
    ``half_width``, ``n_evaluations``, ... when ``attribute_kwargs`` asks
    for them), one row per example, as NumPy arrays.

    It writes nothing itself: the pipeline's own sink (``write_parquet``,
    ...) does, so the manifest, the fingerprinted shards and the checks on
    resuming of ``explain_dataset`` do not apply; a pipeline run again
    starts from the beginning.

    Args:
        explainer_factory: ``factory(device) -> Attribution`` (or
            ``factory()``), called once per actor.
        attribute_kwargs: more arguments of ``attribute``, the same for
            every row (not ``inputs``, ``target`` or ``generator``).
        input_column: the column of the inputs (one array per row, all of
            one shape).
        target_column: the column of the targets, if the dataset has one
            (otherwise ``attribute_kwargs`` may not name a target either and
            the model's output must be one value per example).
        device: where the model runs; default ``"cuda"`` when a GPU is
            visible to the actor (Ray sets ``CUDA_VISIBLE_DEVICES`` for
            ``num_gpus=1``), else ``"cpu"``.
    """

    def __init__(
        self,
        explainer_factory: Callable[..., Any],
        attribute_kwargs: Mapping[str, Any] | None = None,
        *,
        input_column: str = "inputs",
        target_column: str = "target",
        device: str | torch.device | None = None,
    ) -> None:
        check_factory(explainer_factory)
        kwargs = dict(attribute_kwargs or {})
        reserved = sorted(set(kwargs) & set(_RESERVED))
        if reserved:
            raise ValueError(
                f"attribute_kwargs may not set {reserved}: inputs and targets come from the "
                f"batch's {input_column!r} and {target_column!r} columns, and sampled methods "
                "draw from torch's global generator here (seed it in the factory)."
            )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.explainer = call_factory(explainer_factory, self.device)
        self.attribute_kwargs = kwargs
        self.input_column, self.target_column = input_column, target_column

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.input_column not in batch:
            raise ValueError(
                f"the batch has no {self.input_column!r} column (columns: {sorted(batch)}); "
                "pass input_column= to name the column of the inputs."
            )
        inputs = torch.as_tensor(np.stack(list(batch[self.input_column]))).to(self.device)
        arguments = dict(self.attribute_kwargs)
        if self.target_column in batch:
            arguments["target"] = torch.as_tensor(np.asarray(batch[self.target_column])).to(
                self.device
            )
        result = self.explainer.attribute(inputs, **arguments)
        fields = result_fields(result, inputs.shape[0])
        out = dict(batch)
        for name, tensor in fields.items():
            out[name] = tensor.detach().cpu().numpy()
        return out
