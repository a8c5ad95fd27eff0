"""The directed explanation graph of a bivariate Shapley matrix and its redundancy analysis.

Masoomi et al. (ICLR 2022), Sec. 3: the explanation graph ``G`` has an edge
``j -> i`` with weight ``E2[i, j]``, the importance of ``i`` when ``j`` is
present. Its redundancy graph ``H_gamma`` keeps the edges with
``|E2[i, j]| <= gamma``: ``i`` adds (almost) nothing once ``j`` is there.

- Mutually redundant groups are the strongly connected components of
  ``H_gamma`` with two or more features: any one of them can stand in for
  the others.
- The quotient DAG contracts each component to one node. Its sources are
  features no other feature makes redundant; its sinks are redundant given
  others while nothing is redundant given them (the first candidates to
  drop).
- PageRank on ``G`` with weights ``softplus(E2[i, j])``, personalised by the
  univariate Shapley values with negatives clipped to 0, ranks the most
  influential features.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from .pagerank import pagerank as _pagerank

PERSONALIZATIONS = (None, "shapley")


@dataclass(frozen=True)
class QuotientDAG:
    """The redundancy graph with each strongly connected component contracted.

    Attributes:
        graph:
            ``networkx.DiGraph`` on component ids ``0..c-1``; node attribute
            ``members`` holds the component's feature ids. An edge ``a -> b``
            means some feature of ``b`` is redundant given some feature of ``a``.
        components:
            ``components[c]`` = the features of component ``c``.
        sources, sinks:
            Components with no incoming / no outgoing edge, among those with at
            least one edge: sources are redundant given nobody, sinks make
            nobody redundant.
        isolated:
            Components without any edge (neither redundant nor making anything
            redundant at this ``gamma``).
    """

    graph: nx.DiGraph
    components: list[frozenset[int]]
    sources: list[frozenset[int]]
    sinks: list[frozenset[int]]
    isolated: list[frozenset[int]]

    def source_features(self) -> list[int]:
        """Sorted feature ids of every source component."""
        return sorted(feature for group in self.sources for feature in group)

    def sink_features(self) -> list[int]:
        """Sorted feature ids of every sink component."""
        return sorted(feature for group in self.sinks for feature in group)


class ExplanationGraph:
    """One example's bivariate Shapley matrix read as a directed graph.

    Args:
        matrix:
            ``(d, d)`` (or ``(1, d, d)``) with ``matrix[i, j] = E2[i, j]``, as
            :meth:`BivariateShapley.attribute
            <captum_graphshap.BivariateShapley.attribute>` returns
            per example; the diagonal is ignored.
        feature_names:
            ``d`` labels (tokens, pixel names) for plots and ``to_networkx``.
        shapley:
            ``(d,)`` univariate Shapley values (``return_shapley=True``), used by
            ``pagerank(personalization="shapley")`` and for node sizes.
        support:
            ``(d, d)`` bool, the pairs that were computed: the graph-local
            variant computes only ``j`` in ``N_k(i)``
            (:func:`~captum_graphshap.plans.bivariate.local_support`); other pairs get
            no edge at all instead of a (redundant-looking) zero edge.

    Example:
        >>> import torch
        >>> from captum_graphshap import BivariateShapley, ExplanationGraph
        >>> def either(x):  # features 0 and 1 are redundant: either one suffices
        ...     return torch.maximum(x[:, 0], x[:, 1])[:, None] + x[:, 2:3]
        >>> e2 = BivariateShapley(either).attribute(torch.ones(1, 3))
        >>> ExplanationGraph(e2[0]).mutually_redundant_groups(gamma=1e-9)
        [{0, 1}]
    """

    def __init__(
        self,
        matrix: Tensor | npt.ArrayLike,
        feature_names: Sequence[str] | None = None,
        *,
        shapley: Tensor | npt.ArrayLike | None = None,
        support: Tensor | npt.ArrayLike | None = None,
    ) -> None:
        values = _as_float_array(matrix, "matrix")
        if values.ndim == 3 and values.shape[0] == 1:
            values = values[0]
        if values.ndim != 2 or values.shape[0] != values.shape[1]:
            raise ValueError(
                f"matrix must be one example's (d, d) bivariate matrix, got shape "
                f"{values.shape}; index a batch first (matrix[n])."
            )
        d = values.shape[0]
        self.matrix: npt.NDArray[np.float64] = values
        self.num_features = d
        if feature_names is None:
            self.feature_names = [str(i) for i in range(d)]
        else:
            names = [str(name) for name in feature_names]
            if len(names) != d:
                raise ValueError(f"feature_names has {len(names)} entries for {d} features.")
            self.feature_names = names
        self.shapley: npt.NDArray[np.float64] | None = None
        if shapley is not None:
            phi = _as_float_array(shapley, "shapley").reshape(-1)
            if phi.shape != (d,):
                raise ValueError(f"shapley must hold {d} values, got shape {phi.shape}.")
            self.shapley = phi
        off_diagonal = ~np.eye(d, dtype=bool)
        if support is None:
            self.support = off_diagonal
        else:
            given = np.asarray(
                support.cpu().numpy() if isinstance(support, Tensor) else support, dtype=bool
            )
            if given.shape != (d, d):
                raise ValueError(f"support must be a ({d}, {d}) boolean matrix, got {given.shape}.")
            self.support = given & off_diagonal

    # ------------------------------------------------------------------ graphs

    def to_networkx(self) -> nx.DiGraph:
        """``G``: nodes ``0..d-1`` (attribute ``name``, and ``shapley`` when
        given), an edge ``j -> i`` with ``weight = E2[i, j]`` for every computed
        pair ``i != j``."""
        return self._digraph(self.support)

    def redundancy_graph(self, gamma: float) -> nx.DiGraph:
        """``H_gamma``: every node, and the edges ``j -> i`` of ``G`` with
        ``|E2[i, j]| <= gamma`` (``i`` is redundant given ``j``)."""
        return self._digraph(self._redundant(gamma))

    def mutually_redundant_groups(self, gamma: float) -> list[set[int]]:
        """Strongly connected components of ``H_gamma`` with at least two
        features, as sets of feature ids, ordered by their smallest id."""
        groups = [set(c) for c in nx.strongly_connected_components(self.redundancy_graph(gamma))]
        return sorted((g for g in groups if len(g) >= 2), key=min)

    def quotient_dag(self, gamma: float) -> QuotientDAG:
        """``H_gamma`` with each strongly connected component contracted."""
        redundancy = self.redundancy_graph(gamma)
        components = sorted(
            (frozenset(c) for c in nx.strongly_connected_components(redundancy)), key=min
        )
        dag = nx.condensation(redundancy, scc=[set(c) for c in components])
        sources, sinks, isolated = [], [], []
        for node in dag.nodes:
            group = components[node]
            fan_in, fan_out = dag.in_degree(node), dag.out_degree(node)
            if fan_in == 0 and fan_out == 0:
                isolated.append(group)
                continue
            if fan_in == 0:
                sources.append(group)
            if fan_out == 0:
                sinks.append(group)
        return QuotientDAG(
            graph=dag, components=components, sources=sources, sinks=sinks, isolated=isolated
        )

    def density(self, gamma: float) -> float:
        """Fraction of the computed pairs that are edges of ``H_gamma``."""
        total = int(self.support.sum())
        return float(self._redundant(gamma).sum() / total) if total else 0.0

    def density_curve(
        self, gammas: Sequence[float] | Tensor | npt.ArrayLike | None = None
    ) -> tuple[Tensor, Tensor]:
        """Density of ``H_gamma`` against ``gamma``, to choose ``gamma`` (paper
        App. A.2.4: a knee of this curve separates near-zero edges from the
        rest).

        Args:
            gammas:
                Thresholds ``>= 0``. Default: 0 and every distinct ``|E2[i, j]|``
                of a computed pair, where the (step) curve jumps.

        Returns:
            ``(gammas, densities)``, float64 tensors of equal length, gammas
            ascending.
        """
        magnitudes = np.sort(np.abs(self.matrix[self.support]))
        if gammas is None:
            grid = np.unique(np.concatenate([[0.0], magnitudes]))
        else:
            grid = np.sort(_as_float_array(gammas, "gammas").reshape(-1))
            for gamma in grid:
                _check_gamma(float(gamma))
        counts = np.searchsorted(magnitudes, grid, side="right")
        total = max(1, magnitudes.size)
        return torch.from_numpy(grid.copy()), torch.from_numpy(counts / total)

    # --------------------------------------------------------------- ranking

    def pagerank(
        self,
        personalization: str | Tensor | npt.ArrayLike | None = None,
        damping: float = 0.85,
    ) -> Tensor:
        """PageRank of ``G`` as the paper ranks influential features.

        Edge ``j -> i`` carries ``softplus(E2[i, j])`` (positive, increasing:
        the walker moves to features that matter given the current one).

        Args:
            personalization:
                None (uniform teleport), ``"shapley"`` (the univariate Shapley
                values given at construction, negatives clipped to 0; uniform if
                none is positive) or ``d`` non-negative weights.
            damping:
                Probability of following an edge, in ``[0, 1)``.

        Returns:
            ``(d,)`` float64 scores summing to 1.
        """
        weights = np.where(self.support.T, _softplus(self.matrix.T), 0.0)  # [j, i]
        return torch.from_numpy(_pagerank(weights, self._teleport(personalization), damping))

    # -------------------------------------------------------------- internals

    def _teleport(self, personalization: Any) -> npt.NDArray[np.float64] | None:
        if personalization is None:
            return None
        if isinstance(personalization, str):
            if personalization != "shapley":
                raise ValueError(
                    f"personalization must be None, 'shapley' or d weights, got "
                    f"{personalization!r}."
                )
            if self.shapley is None:
                raise ValueError(
                    'personalization="shapley" needs the univariate values: build the graph '
                    "with ExplanationGraph(matrix, shapley=phi), e.g. from "
                    "BivariateShapley(...).attribute(..., return_shapley=True)."
                )
            clipped = np.clip(self.shapley, 0.0, None)
            return clipped if clipped.sum() > 0 else None
        return _as_float_array(personalization, "personalization").reshape(-1)

    def _redundant(self, gamma: float) -> npt.NDArray[np.bool_]:
        """``[i, j]``: ``i`` is redundant given ``j`` at ``gamma``."""
        return self.support & (np.abs(self.matrix) <= _check_gamma(gamma))

    def _digraph(self, edges: npt.NDArray[np.bool_]) -> nx.DiGraph:
        graph = nx.DiGraph()
        for node, name in enumerate(self.feature_names):
            attributes: dict[str, Any] = {"name": name}
            if self.shapley is not None:
                attributes["shapley"] = float(self.shapley[node])
            graph.add_node(node, **attributes)
        targets, sources = np.nonzero(edges)
        graph.add_weighted_edges_from(
            (int(j), int(i), float(self.matrix[i, j])) for i, j in zip(targets, sources)
        )
        return graph

    def __repr__(self) -> str:
        return f"ExplanationGraph(num_features={self.num_features})"


def _check_gamma(gamma: Any) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma must be a number >= 0, got {type(gamma).__name__}.")
    gamma = float(gamma)
    if math.isnan(gamma) or gamma < 0:
        raise ValueError(
            f"gamma must be >= 0 (the largest |E2[i, j]| counted as redundant), got {gamma}."
        )
    return gamma


def _softplus(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``log(1 + exp(x))`` without overflow for large ``x``."""
    return np.logaddexp(0.0, x)


def _as_float_array(value: Any, name: str) -> npt.NDArray[np.float64]:
    if isinstance(value, Tensor):
        value = value.detach().cpu().to(torch.float64).numpy()
    try:
        array = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a tensor or an array of numbers.") from error
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values.")
    return array
