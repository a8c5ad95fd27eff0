"""Feature masks: which input elements form which feature, and back again.

A feature mask assigns an integer id to every input element; elements with the
same id are switched on and off together. Ids may be shared across the tensors
of a tuple input, and the number of features is ``max id + 1`` (an id that
occurs nowhere is a dummy feature: its attribution is zero and it changes no
other feature's value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class FeatureMasks:
    """Validated masks, one per input tensor.

    Attributes:
        masks:
            Long tensors of shape ``(1 or N, *S)`` where ``S`` broadcasts to the
            input's non-batch shape.
        num_features:
            ``d``, one more than the largest id.
        per_example:
            Whether masks differ between examples (batch dimension N > 1).
    """

    masks: tuple[Tensor, ...]
    num_features: int
    per_example: bool
    #: per mask, ``(start, stop)`` when it is shared and numbers its elements
    #: ``start, start + 1, ...`` in order (one feature per element, Captum's
    #: default), else None: the engine then slices coalitions instead of
    #: gathering them
    id_ranges: tuple[tuple[int, int] | None, ...]
    #: where the masks merge dropped features' elements into a kept one
    #: (:meth:`renumbered` with ``rest``), the masks with -1 there instead: the
    #: layout the local windows are read from (``plans/local_windows.py``). Batch
    #: size 1 under per-example masks (:meth:`renumbered_rows`): one layout whose
    #: windows every example's own layout has too
    geometry: tuple[Tensor, ...] | None = None

    def features_per_example(self) -> Tensor:
        """``(N or 1,)`` count of features of each example: its largest id + 1."""
        largest = torch.stack(
            [m.reshape(m.shape[0], -1).amax(dim=1) for m in self.masks], dim=0
        ).amax(dim=0)
        return largest + 1

    def numbers_every_id(self) -> bool:
        """Whether the masks are shared and number their elements ``0..d-1`` in order
        (Captum's default mask): every id is used, known without looking at the data."""
        ranges = self.id_ranges
        if self.per_example or any(r is None for r in ranges):
            return False
        spans = sorted(r for r in ranges if r is not None and r[1] > r[0])
        covered = 0
        for start, stop in spans:
            if start != covered:
                return False
            covered = stop
        return covered == self.num_features

    def present(self) -> Tensor:
        """``(N or 1, d)`` bool: which feature ids occur in each example's masks."""
        rows = self.masks[0].shape[0]
        out = torch.zeros(rows, self.num_features, dtype=torch.bool, device=self.masks[0].device)
        for mask in self.masks:
            flat = mask.reshape(mask.shape[0], -1).expand(rows, -1)
            out.scatter_(1, flat, True)
        return out

    def renumbered(
        self, ids: Tensor, rest: int = -1, shared_geometry: bool = False
    ) -> FeatureMasks:
        """The masks with feature ``ids[k]`` renamed ``k``, any other id ``rest`` (every
        used id must be in ``ids`` unless ``rest`` names one of the new ids; then
        :attr:`geometry` keeps -1 there). ``shared_geometry``: per-example masks take
        the first example's layout as :attr:`geometry` (their windows agree)."""
        lookup = torch.full((self.num_features,), -1, dtype=torch.long, device=ids.device)
        lookup[ids] = torch.arange(ids.numel(), device=ids.device)
        layout = tuple(lookup[m] for m in self.masks)
        count = int(ids.numel())
        geometry = None if rest == -1 else layout
        if shared_geometry and self.per_example:
            geometry = tuple(m[:1] for m in layout)
        masks = layout if rest == -1 else tuple(torch.where(m < 0, rest, m) for m in layout)
        return FeatureMasks(masks, count, self.per_example, id_ranges(masks), geometry)

    def renumbered_rows(self, keep: Tensor, rest: int, shared_geometry: bool) -> FeatureMasks:
        """Shared masks made per example: example ``n``'s kept features (``keep`` ``(N, d)``
        bool, the same number in every row) renamed ``0, 1, ..`` in order, its other
        elements ``rest``. ``shared_geometry``: the first example's layout (-1 where
        merged into ``rest``) is :attr:`geometry`, for callers whose examples' layouts
        give the same windows."""
        if self.per_example:
            raise ValueError("renumbered_rows makes shared masks per example")
        lookup = torch.where(keep, keep.long().cumsum(dim=1) - 1, -1)  # (N, d)
        rows = keep.shape[0]
        layout = tuple(
            lookup.gather(1, m.reshape(1, -1).expand(rows, -1)).view(rows, *m.shape[1:])
            for m in self.masks
        )
        masks = tuple(torch.where(m < 0, rest, m) for m in layout)
        geometry = tuple(m[:1] for m in layout) if shared_geometry else None
        count = int(keep[0].sum())
        return FeatureMasks(masks, count, rows > 1, id_ranges(masks), geometry)

    def select(self, examples: Tensor) -> FeatureMasks:
        """The masks of some examples (per-example masks are indexed, shared ones kept)."""
        if not self.per_example:
            return self
        per_example = examples.numel() > 1

        def pick(masks: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            return tuple(m[examples] if per_example else m[examples][:1] for m in masks)

        masks = pick(self.masks)
        geometry = self.geometry
        if geometry is not None and any(g.shape[0] > 1 for g in geometry):
            geometry = pick(geometry)
        return FeatureMasks(masks, self.num_features, per_example, id_ranges(masks), geometry)

    def scatter(
        self, per_feature: Tensor, inputs: tuple[Tensor, ...], dtype: torch.dtype
    ) -> tuple[Tensor, ...]:
        """Copy ``(N, d)`` per-feature values onto every element of each feature.

        Returns tensors shaped like ``inputs`` with ``dtype``.
        """
        batch = per_feature.shape[0]
        per_feature = per_feature.to(dtype)
        out = []
        for mask, tensor in zip(self.masks, inputs):
            index = mask.expand(batch, *mask.shape[1:]).reshape(batch, -1)
            values = per_feature.gather(1, index).reshape(batch, *mask.shape[1:])
            out.append(values.expand(tensor.shape).contiguous())
        return tuple(out)


def format_feature_mask(feature_mask: Any, inputs: tuple[Tensor, ...]) -> FeatureMasks:
    """Validate a Captum ``feature_mask`` (tensor or tuple) against ``inputs``.

    ``None`` gives every element its own feature, numbered across the tuple
    as Captum does. A mask may have fewer dimensions than its input (it is
    then shared by the batch and broadcast from the right), or the input's
    number of dimensions with batch size 1 or N; other sizes must equal the
    input's or be 1.
    """
    batch = inputs[0].shape[0]
    if isinstance(feature_mask, FeatureMasks):  # built by the library, already valid
        return feature_mask
    if feature_mask is None:
        return _one_feature_per_element(inputs)
    given = feature_mask if isinstance(feature_mask, tuple) else (feature_mask,)
    if len(given) != len(inputs):
        raise ValueError(
            f"feature_mask has {len(given)} tensors but inputs has {len(inputs)}; "
            "pass one mask per input tensor."
        )
    masks = [
        _checked_mask(mask, tensor, _mask_label(position, len(inputs)), batch)
        for position, (mask, tensor) in enumerate(zip(given, inputs))
    ]
    # every mask's smallest and largest id and whether it numbers its elements in
    # order, read back at once: one host synchronisation for all the checks
    summary = _mask_summary(masks)
    for position, (smallest, _, _) in enumerate(summary):
        if smallest < 0:
            raise ValueError(
                f"{_mask_label(position, len(inputs))} has negative ids; "
                "feature ids must be 0, 1, 2, ..."
            )
    num_features = max((largest for _, largest, _ in summary), default=-1) + 1
    per_example = batch > 1 and any(m.shape[0] == batch for m in masks)
    # per-example masks (all expanded to the batch) number no shared range
    spans = tuple(None if per_example else span for _, _, span in summary)
    if per_example:
        masks = [m.expand(batch, *m.shape[1:]) if m.shape[0] == 1 else m for m in masks]
    return FeatureMasks(tuple(masks), num_features, per_example, spans)


def _mask_label(position: int, count: int) -> str:
    """How an error names the mask of input ``position`` of ``count``."""
    return f"feature_mask[{position}]" if count > 1 else "feature_mask"


def _one_feature_per_element(inputs: tuple[Tensor, ...]) -> FeatureMasks:
    """Captum's default mask: every element its own feature, numbered across the tuple."""
    masks, ranges = [], []
    offset = 0
    for tensor in inputs:
        count = tensor[0].numel()
        masks.append(
            torch.arange(offset, offset + count, device=tensor.device).reshape(1, *tensor.shape[1:])
        )
        ranges.append((offset, offset + count))  # in order by construction
        offset += count
    return FeatureMasks(tuple(masks), offset, False, tuple(ranges))


def _checked_mask(mask: Any, tensor: Tensor, label: str, batch: int) -> Tensor:
    """One mask checked against its input (type, device, shape), as a long tensor with
    the input's number of dimensions."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{label} must be an integer tensor, got {type(mask).__name__}.")
    if mask.is_floating_point() or mask.is_complex() or mask.dtype == torch.bool:
        raise TypeError(
            f"{label} has dtype {mask.dtype}; feature ids must be integers (use mask.long())."
        )
    if mask.device != tensor.device:
        raise ValueError(
            f"{label} is on {mask.device} but inputs are on {tensor.device}; "
            "move it with .to(inputs.device)."
        )
    if mask.dim() > tensor.dim() or mask.dim() == 0:
        raise ValueError(
            f"{label} has shape {tuple(mask.shape)} but inputs has shape "
            f"{tuple(tensor.shape)}; the mask must have the input's shape, with "
            "batch size 1 or N and size-1 dimensions where elements are grouped."
        )
    if mask.dim() < tensor.dim():
        mask = mask.reshape((1,) * (tensor.dim() - mask.dim()) + tuple(mask.shape))
    compatible = mask.shape[0] in (1, batch) and all(
        m in (1, s) for m, s in zip(mask.shape[1:], tensor.shape[1:])
    )
    if not compatible:
        raise ValueError(
            f"{label} has shape {tuple(mask.shape)} which does not broadcast to inputs "
            f"of shape {tuple(tensor.shape)}; use batch size 1 or {batch} and, in "
            "every other dimension, the input's size or 1."
        )
    return mask.long()


def _mask_summary(
    masks: Sequence[Tensor],
) -> list[tuple[int, int, tuple[int, int] | None]]:
    """Per mask: its smallest and largest id (0 and -1 when empty) and, when it is shared
    and numbers its elements ``start, start + 1, ...`` in order, ``(start, stop)``.

    Every mask's numbers are read back together: one host synchronisation.
    """
    rows = []
    for mask in masks:
        flat = mask.reshape(-1)
        if not flat.numel():
            rows.append(torch.zeros(4, dtype=torch.long, device=flat.device))
            rows[-1][1] = -1
            continue
        in_order = (flat[1:] - flat[:-1] == 1).all()
        rows.append(torch.stack([flat.amin(), flat.amax(), flat[0], in_order.long()]))
    if not rows:
        return []
    values = torch.stack(rows).tolist()
    return [
        (smallest, largest, (first, first + m.numel()) if ordered and m.shape[0] == 1 else None)
        for m, (smallest, largest, first, ordered) in zip(masks, values)
    ]


def id_ranges(masks: Sequence[Tensor]) -> tuple[tuple[int, int] | None, ...]:
    """Per mask, ``(start, stop)`` when it is shared and numbers its elements in order."""
    return tuple(span for _, _, span in _mask_summary(masks))


def feature_sums(
    products: tuple[Tensor, ...], masks: tuple[Tensor, ...], num_features: int
) -> Tensor:
    """``out[n, i] = sum of products[n, e] over the elements e of feature i``.

    The reverse of :meth:`FeatureMasks.scatter`. ``products`` are ``(N, *S)``
    tensors, ``masks`` their feature masks (broadcastable to them). Out of
    place: ``products`` are read, never written.
    """
    batch = products[0].shape[0]
    total = products[0].new_zeros(batch, num_features)
    for product, mask in zip(products, masks):
        index = mask.expand_as(product).reshape(batch, -1)
        total = total.scatter_add(1, index, product.reshape(batch, -1))
    return total
