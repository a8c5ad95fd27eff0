"""Ready-made feature graphs and the default graph of an input.

Lines for sequences, 4-neighbour grids for images (per pixel or per patch),
region adjacency graphs for superpixels, and the adjacency of the regions of
any feature mask (words over sub-word tokens, patches over pixels).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._validation import as_numpy, check_count
from .edges import region_edges
from .feature_graph import FeatureGraph
from .hierarchy import Hierarchy

__all__ = [
    "GridGraph",
    "LineGraph",
    "SuperpixelGraph",
    "default_feature_mask",
    "graph_from_feature_mask",
    "infer_graph",
]


class LineGraph(FeatureGraph):
    """The path ``0 - 1 - ... - (n-1)``: features of a sequence.

    Args:
        n:
            Number of nodes, an int ``>= 1``.

    Example:
        >>> from captum_graphshap import LineGraph
        >>> LineGraph(5).neighbourhood(0, 2)
        (0, 1, 2)
    """

    def __init__(self, n: int) -> None:
        n = check_count(n, "n", minimum=1)
        ids = np.arange(n - 1, dtype=np.int64)
        self._setup(n, np.stack([ids, ids + 1], axis=1), canonical=True)

    def __repr__(self) -> str:
        return f"LineGraph({self.num_nodes})"


class GridGraph(FeatureGraph):
    """A ``height x width`` grid with 4-neighbour edges; node ``row * width + col``.

    Args:
        height, width:
            Grid size, ints ``>= 1``.

    Example:
        >>> from captum_graphshap import GridGraph
        >>> GridGraph(3, 3).neighbourhood(4, 1)  # the centre and its 4 neighbours
        (1, 3, 4, 5, 7)
    """

    def __init__(self, height: int, width: int) -> None:
        self.height = check_count(height, "height", minimum=1)
        self.width = check_count(width, "width", minimum=1)
        ids = np.arange(self.height * self.width, dtype=np.int64).reshape(self.height, self.width)
        across = np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], axis=1)
        down = np.stack([ids[:-1, :].ravel(), ids[1:, :].ravel()], axis=1)
        self._setup(self.height * self.width, np.concatenate([across, down]))

    def hierarchy(self, arity: int = 2) -> Hierarchy:
        """Rectangles halved recursively: a :class:`~captum_graphshap.Hierarchy` of the cells.

        Args:
            arity: 2 (default) halves the longer side of each rectangle (rows
                and columns alternate on a square): a binary tree, about
                ``0.67 d^2`` coalitions for the exact Winter value; 4 splits
                both sides at once (a quad-tree), ``2^4 - 2`` coalitions per split.
        """
        if arity not in (2, 4):
            raise ValueError(f"arity must be 2 (halving) or 4 (quad-tree), got {arity!r}.")
        return Hierarchy(_rectangles(0, self.height, 0, self.width, self.width, arity))

    def feature_mask(self) -> Tensor:
        """Long ``(height, width)`` tensor of the node ids (``arange`` reshaped)."""
        return torch.arange(self.height * self.width).reshape(self.height, self.width)

    @classmethod
    def patches(
        cls, height: int, width: int, patch_size: int | tuple[int, int]
    ) -> tuple[GridGraph, Tensor]:
        """Grid of the ``patch_size`` patches of a ``height x width`` image.

        Args:
            height, width:
                Image size in pixels.
            patch_size:
                Patch side, an int or ``(patch_height, patch_width)``. Patches in
                the last row/column are smaller when it does not divide the image.

        Returns:
            ``(graph, feature_mask)``: the ``GridGraph`` of the patches and a long
            ``(height, width)`` tensor holding each pixel's patch id.
        """
        height = check_count(height, "height", minimum=1)
        width = check_count(width, "width", minimum=1)
        if isinstance(patch_size, (tuple, list)):
            if len(patch_size) != 2:
                raise ValueError(
                    f"patch_size must be an int or a pair (patch_height, patch_width), got "
                    f"{tuple(patch_size)}."
                )
            ph = check_count(patch_size[0], "patch_size", minimum=1)
            pw = check_count(patch_size[1], "patch_size", minimum=1)
        else:
            ph = pw = check_count(patch_size, "patch_size", minimum=1)
        graph = cls(math.ceil(height / ph), math.ceil(width / pw))
        rows = torch.arange(height) // ph
        cols = torch.arange(width) // pw
        return graph, rows[:, None] * graph.width + cols[None, :]

    def __repr__(self) -> str:
        return f"GridGraph(height={self.height}, width={self.width})"


class SuperpixelGraph(FeatureGraph):
    """Region adjacency graph of a segmentation: one node per superpixel.

    Build it with :meth:`from_segments` (any label map) or :meth:`slic`.
    Two superpixels are adjacent when two 4-neighbour pixels carry their
    labels.

    Attributes:
        feature_mask:
            Long ``(H, W)`` tensor, the label map relabelled to ``0..n-1`` in the
            sorted order of the original labels: pass it as ``feature_mask``.

    Example:
        >>> from captum_graphshap import SuperpixelGraph
        >>> graph = SuperpixelGraph.from_segments([[5, 5, 7], [9, 9, 7]])
        >>> graph.num_nodes, graph.edges()
        (3, [(0, 1), (0, 2), (1, 2)])
    """

    feature_mask: Tensor

    def __init__(self, labels: Tensor | np.ndarray | Sequence[Sequence[int]]) -> None:
        array = as_numpy(labels, "labels")
        if array.ndim != 2:
            raise ValueError(
                f"labels must be a 2-D (H, W) label map, got shape {tuple(array.shape)}; "
                "drop the batch/channel dimensions."
            )
        if array.size == 0:
            raise ValueError(
                f"labels must have at least one pixel, got shape {tuple(array.shape)}."
            )
        if array.dtype.kind not in "iu":
            raise TypeError(
                f"labels must hold integer segment ids, got dtype {array.dtype}; e.g. use "
                "labels.astype(int) for an integer-valued float array."
            )
        values, inverse = np.unique(array, return_inverse=True)
        relabelled = inverse.reshape(array.shape).astype(np.int64)
        self.feature_mask = torch.from_numpy(relabelled)
        self._setup(len(values), region_edges(relabelled))
        if len(values) < FEW_SEGMENTS and array.size >= 64:
            warnings.warn(
                f"the superpixel graph has only {len(values)} segment(s) for "
                f"{array.shape[0]}x{array.shape[1]} pixels, so its attributions say little. "
                "SLIC on a noisy or flat image can merge everything: raise compactness "
                "(e.g. 100) or pass enforce_connectivity=False, or use a patch grid "
                "(GridGraph.patches) instead.",
                UserWarning,
                stacklevel=3,
            )

    @classmethod
    def from_segments(
        cls, labels: Tensor | np.ndarray | Sequence[Sequence[int]]
    ) -> SuperpixelGraph:
        """Region adjacency graph of an integer ``(H, W)`` label map.

        Args:
            labels:
                Segment ids per pixel (e.g. from ``skimage.segmentation.slic``),
                any integers; they are relabelled to ``0..n-1`` in sorted order.
        """
        return cls(labels)

    @classmethod
    def slic(
        cls,
        image: Tensor | np.ndarray,
        n_segments: int = 100,
        compactness: float = 10.0,
        start_label: int = 0,
        **slic_kwargs: Any,
    ) -> SuperpixelGraph:
        r"""Superpixels of ``image`` with scikit-image's SLIC, as a graph.

        Args:
            image:
                numpy ``(H, W, C)`` or ``(H, W)``, or torch ``(C, H, W)`` (C in
                1, 3, 4) or ``(H, W)``.
            n_segments, compactness, start_label, \*\*slic_kwargs:
                Passed to ``skimage.segmentation.slic``.
        """
        if isinstance(image, Tensor):
            array = image.detach().cpu().float().numpy()
            if array.ndim == 3 and array.shape[0] in (1, 3, 4):
                array = np.moveaxis(array, 0, -1)
        else:
            array = np.asarray(image)
        if array.ndim not in (2, 3):
            raise ValueError(
                f"image must be (H, W) or (H, W, C) (numpy) / (C, H, W) (torch), got shape "
                f"{tuple(array.shape)}."
            )
        try:  # after the checks: a bad image is named whether or not scikit-image is there
            from skimage.segmentation import slic
        except ImportError:
            raise ImportError(
                'SuperpixelGraph.slic needs scikit-image: pip install "captum-graphshap[image]"'
            ) from None
        labels = slic(
            array,
            n_segments=n_segments,
            compactness=compactness,
            start_label=start_label,
            channel_axis=-1 if array.ndim == 3 else None,
            **slic_kwargs,
        )
        return cls(labels)

    def hierarchy(self, image: Tensor | np.ndarray | None = None) -> Hierarchy:
        """Adjacent superpixels merged by mean colour: a binary :class:`~.Hierarchy`.

        Ward-style agglomeration: the adjacent pair whose merge adds the least
        squared colour deviation (``n_a n_b / (n_a + n_b) |mean_a - mean_b|^2``,
        n in pixels) merges first; regions with no adjacent pair left merge
        by the same cost.

        Args:
            image: the segmented image, numpy ``(H, W, C)``/``(H, W)`` or torch
                ``(C, H, W)``/``(H, W)``, of the label map's size. None merges
                by the regions' centres instead (geometry only).
        """
        return Hierarchy.from_linkage(_colour_linkage(self, image))

    def __repr__(self) -> str:
        height, width = self.feature_mask.shape
        return (
            f"SuperpixelGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"image={height}x{width})"
        )


def _rectangles(top: int, bottom: int, left: int, right: int, width: int, arity: int) -> Any:
    """Nested cell ids of rows ``[top, bottom)`` and columns ``[left, right)``, split in turn."""
    rows, cols = bottom - top, right - left
    if rows * cols == 1:
        return top * width + left
    row_cuts = [top, bottom]
    col_cuts = [left, right]
    if arity == 4 or rows >= cols:
        row_cuts = [top, top + rows // 2, bottom] if rows > 1 else row_cuts
    if arity == 4 or cols > rows:
        col_cuts = [left, left + cols // 2, right] if cols > 1 else col_cuts
    return [
        _rectangles(a, b, c, e, width, arity)
        for a, b in itertools.pairwise(row_cuts)
        for c, e in itertools.pairwise(col_cuts)
    ]


def _colour_linkage(graph: SuperpixelGraph, image: Tensor | np.ndarray | None) -> np.ndarray:
    """A linkage ``(n - 1, 4)`` of Ward merges of adjacent regions by mean colour."""
    labels = graph.feature_mask.numpy()
    if image is None:
        array = np.moveaxis(np.indices(labels.shape), 0, -1).astype(np.float64)
    elif isinstance(image, Tensor):
        array = image.detach().cpu().double().numpy()
        if array.ndim == 3 and array.shape[0] in (1, 3, 4):
            array = np.moveaxis(array, 0, -1)
    else:
        array = np.asarray(image, dtype=np.float64)
    if array.shape[:2] != labels.shape:
        raise ValueError(
            f"image must have the label map's size {labels.shape}, got shape {array.shape}."
        )
    pixels = array.reshape(labels.size, -1)
    n = graph.num_nodes
    count = np.bincount(labels.ravel(), minlength=n).astype(np.float64)
    sums = np.zeros((n, pixels.shape[1]))
    np.add.at(sums, labels.ravel(), pixels)
    means = {i: sums[i] / count[i] for i in range(n)}
    sizes = {i: count[i] for i in range(n)}
    members = {i: 1 for i in range(n)}
    neighbours: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in graph.edges():
        neighbours[a].add(b)
        neighbours[b].add(a)
    rows = []
    for t in range(n - 1):
        best = (np.inf, -1, -1)
        for a in means:
            pool = neighbours[a] or (set(means) - {a})  # isolated: merge by colour alone
            for b in pool:
                if b > a or not neighbours[a]:
                    cost = sizes[a] * sizes[b] / (sizes[a] + sizes[b])
                    cost *= float(np.sum((means[a] - means[b]) ** 2))
                    if best[1] < 0 or cost < best[0]:
                        best = (cost, min(a, b), max(a, b))
        cost, a, b = best
        new = n + t
        total = sizes[a] + sizes[b]
        means[new] = (means.pop(a) * sizes[a] + means.pop(b) * sizes[b]) / total
        sizes[new] = total
        members[new] = members.pop(a) + members.pop(b)
        joined = (neighbours.pop(a) | neighbours.pop(b)) - {a, b}
        for c in joined:
            neighbours[c] -= {a, b}
            neighbours[c].add(new)
        neighbours[new] = joined
        rows.append([a, b, cost, members[new]])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 4)


#: Fewer segments than this on an image is warned about (SLIC on noise gives 1).
FEW_SEGMENTS = 4


def graph_from_feature_mask(mask: Tensor | np.ndarray) -> FeatureGraph:
    """Adjacency of the regions of a feature mask.

    Two features are adjacent when elements adjacent along any axis carry
    their ids: a word mask over sub-word tokens gives a line of words, a
    patch mask a patch grid. Nodes are ``0..max id``; ids that occur nowhere
    are isolated nodes.

    Args:
        mask:
            Integer ids of shape ``(L,)`` or ``(H, W)``, optionally with leading
            singleton dimensions (``(1, L)``, ``(1, 1, H, W)``).
    """
    return FeatureGraph.from_feature_mask(mask)


def _input_rank(input_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) not in (2, 3, 4):
        raise ValueError(
            f"cannot infer a graph for inputs of shape {shape}; pass graph= (e.g. "
            "FeatureGraph.from_adjacency(...)) with a matching feature_mask. Only (N, L), "
            "(N, H, W) and (N, C, H, W) inputs have a default graph."
        )
    return shape


def default_feature_mask(input_shape: Sequence[int]) -> Tensor:
    """The feature mask matching :func:`infer_graph`'s default graph.

    One feature per position for ``(N, L)`` (mask ``(1, L)``), one per pixel
    for ``(N, H, W)`` (mask ``(1, H, W)``) and ``(N, C, H, W)`` (mask
    ``(1, 1, H, W)``: channels grouped). Ids are ``row * W + col``.
    """
    shape = _input_rank(input_shape)
    if len(shape) == 2:
        return torch.arange(shape[1]).reshape(1, shape[1])
    height, width = shape[-2:]
    ids = torch.arange(height * width).reshape(1, height, width)
    return ids[:, None] if len(shape) == 4 else ids


def infer_graph(input_shape: Sequence[int], feature_mask: Tensor | None = None) -> FeatureGraph:
    """Default graph of an input: a line for sequences, a pixel grid for images.

    Args:
        input_shape:
            ``(N, L)`` gives ``LineGraph(L)``; ``(N, H, W)`` and ``(N, C, H, W)``
            give ``GridGraph(H, W)`` (channels grouped).
        feature_mask:
            Optional mask broadcastable to ``(1, *input_shape[1:])``, shared by
            the batch. The graph is then the adjacency of its regions
            (:func:`graph_from_feature_mask`) over the last dimension for
            sequences and the last two for images; for ``(N, C, H, W)`` the mask
            must be the same for every channel.
    """
    shape = _input_rank(input_shape)
    if feature_mask is None:
        return LineGraph(shape[1]) if len(shape) == 2 else GridGraph(*shape[-2:])
    mask = feature_mask if isinstance(feature_mask, Tensor) else torch.as_tensor(feature_mask)
    given = tuple(mask.shape)
    if mask.dim() > len(shape) or (mask.dim() == len(shape) and mask.shape[0] != 1):
        raise ValueError(
            f"feature_mask of shape {given} is not one mask shared by inputs of "
            f"shape {shape}; a graph per example needs graph= as a list of graphs."
        )
    mask = mask.reshape((1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    try:
        mask = mask.expand(1, *shape[1:])
    except RuntimeError:
        raise ValueError(
            f"feature_mask of shape {given} does not broadcast to the inputs' shape {shape}."
        ) from None
    if len(shape) == 4:
        if not bool((mask == mask[:, :1]).all()):
            raise ValueError(
                "feature_mask differs between channels, so no pixel/region graph can be "
                "inferred; pass graph= explicitly."
            )
        mask = mask[:, 0]
    return graph_from_feature_mask(mask[0])
