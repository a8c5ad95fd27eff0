"""What OwenValue enumerated and what it estimated (``return_report=True``)."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from ..graphs.hierarchy import Hierarchy
from ..plans.owen import context_bits
from ..plans.owen_budgeted import WalkCounts

__all__ = ["OwenReport"]


@dataclasses.dataclass(frozen=True)
class OwenReport:
    """How each node of each example's hierarchy was resolved.

    A node's *contexts* are the coalitions of its ancestors' siblings it is
    valued in. The exact Winter value splits every context of every inner
    node over all subsets of the node's children; within a ``budget`` a
    context is split exactly (``enumerated``), estimated from sampled
    orderings of the node's children (``sampled``, ``orderings`` of them in
    all), or left whole and shared among the node's leaves by the
    ``leftover`` rule (``shared``). Tensors are ``(N, nodes)``, node ``j``
    of example ``n`` being ``hierarchies[n].nodes[j]`` (pre-order, leaves
    included, whose counts are 0).

    Attributes:
        hierarchies: the hierarchy of each example.
        enumerated: contexts split exactly, per example and node.
        sampled: contexts estimated by sampled orderings of the children.
        orderings: the orderings drawn there, in all.
        shared: contexts (or tails of a partial ordering) shared as a whole.
        exact: ``(N,)`` bool, whether the example's values are its exact
            Winter values (nothing was sampled or shared).
    """

    hierarchies: tuple[Hierarchy, ...]
    enumerated: Tensor
    sampled: Tensor
    orderings: Tensor
    shared: Tensor
    exact: Tensor

    @classmethod
    def of_walk(cls, hierarchies: tuple[Hierarchy, ...], counts: WalkCounts) -> OwenReport:
        """The report of a budgeted walk's counts."""
        estimated = (counts.sampled + counts.shared).sum(dim=1) > 0
        return cls(hierarchies, *counts, exact=~estimated)

    @classmethod
    def of_exact(cls, hierarchy: Hierarchy, batch: int, device: torch.device) -> OwenReport:
        """The report of the exact plan: every context of every inner node enumerated."""
        kids = hierarchy.num_children.tolist()
        contexts = [2**s if k > 0 else 0 for s, k in zip(context_bits(hierarchy), kids)]
        enumerated = torch.tensor(contexts, dtype=torch.long, device=device).expand(batch, -1)
        zeros = torch.zeros_like(enumerated)
        exact = torch.ones(batch, dtype=torch.bool, device=device)
        return cls((hierarchy,) * batch, enumerated.clone(), zeros, zeros, zeros, exact)

    @property
    def estimated(self) -> Tensor:
        """``(N, nodes)`` bool: nodes with a context sampled or shared rather than enumerated."""
        return (self.sampled + self.shared) > 0

    def node_status(self, example: int = 0) -> dict[tuple[int, ...], str]:
        """Each inner node's feature ids -> how its contexts were resolved.

        ``"enumerated"`` (every context it was reached in split exactly),
        ``"sampled"`` (some by sampled orderings of its children, the tail of
        a partial one shared), ``"shared"`` (some left whole, none sampled)
        or ``"not reached"`` (an ancestor was shared whole, or the node fell
        in a partial ordering's tail).
        """
        hierarchy = self.hierarchies[example]
        out = {}
        for node, ids in enumerate(hierarchy.nodes):
            if not hierarchy.children[node]:
                continue
            if int(self.sampled[example, node]):
                out[ids] = "sampled"
            elif int(self.shared[example, node]):
                out[ids] = "shared"
            elif int(self.enumerated[example, node]):
                out[ids] = "enumerated"
            else:
                out[ids] = "not reached"
        return out

    def estimated_nodes(self, example: int = 0) -> list[tuple[int, ...]]:
        """The inner nodes (as feature ids) whose values are estimates, not enumerated."""
        return [ids for ids, how in self.node_status(example).items() if how != "enumerated"]
