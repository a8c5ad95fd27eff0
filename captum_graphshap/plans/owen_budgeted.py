"""Winter values within a budget: a walk down the hierarchy that spends it on any tree.

:func:`budgeted_winter_values` starts from the root's item ``(root, {}, 1)``
and resolves items round by round, each round one engine call over the
batch (two when it both enumerates and samples):

* every pending item of an example gets a share of what that example has
  left, in proportion to its ``|v(c + B) - v(c)| * w`` (summed over the
  outputs) and never more than the item's *full* cost, the evaluations
  that would resolve it exactly all the way down (water-filling);
* an item whose share covers its full cost, or whose exact split costs at
  most half its share (all of it, when its children are leaves), is split
  exactly (``2^k - 2`` evaluations);
* any other item is estimated: sampled orderings of its children (Owen
  sampling, antithetic pairs, ``k - 1`` evaluations each) within its share,
  whose children's items go on down the walk;
* when no share buys anything, the remainder goes to the items of largest
  gain, a whole ordering or a cheap exact split each, and at last to one
  partial ordering, so little of the budget is left unspent.

Items that no budget reaches are shared among their node's leaves at the
end (``leftover=``). Every step keeps the item's gain, so the estimate is
efficient; when the budget covers the exact count, every share is a full
cost and the walk is the exact Winter value. A multi-output model's outputs
share one walk: its shares follow the gains summed over the outputs, so
every output is credited from the same evaluations and the budget holds for
all of them together. ``benchmarks/partition.py`` compares it with SHAP's
``PartitionExplainer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..graphs.hierarchy import Hierarchy
from .owen import Forest
from .owen_items import (
    Evaluate,
    Items,
    Profile,
    Tails,
    credit_leaves,
    share_equally,
    split_by_orderings,
    split_exactly,
)
from .owen_sampling import segment_cumsum, segment_starts

__all__ = ["LEFTOVER_SHARES", "WalkCounts", "WalkResult", "budgeted_winter_values"]

#: ``leftover=`` choices of :func:`budgeted_winter_values`
LEFTOVER_SHARES = ("profile", "equal")

#: Exact splits of nodes with more children than this are never planned (the
#: ``2^k - 2`` evaluations are past any budget); their items are sampled.
MAX_SPLIT_CHILDREN = 40

#: The part of an item's share its own split may take when its children are
#: inner nodes: the rest is left for the children's items.
SPLIT_SHARE = 0.5

#: Shares are float sums: a share of 2 computed as 1.9999999999 still buys 2 rows.
_SLACK = 1e-6


class WalkCounts(NamedTuple):
    """Per example and node (numbered within the example's hierarchy): how items were resolved.

    ``enumerated``: contexts split exactly; ``sampled``: contexts estimated by
    sampled orderings of the node's children, ``orderings`` of them in all;
    ``shared``: contexts (or tails of a partial ordering) left whole and
    shared among the node's leaves by the ``leftover`` rule.
    """

    enumerated: Tensor
    sampled: Tensor
    orderings: Tensor
    shared: Tensor


class WalkResult(NamedTuple):
    """``values`` ``(N, d, O)`` float64, ``spent`` ``(N,)`` evaluations, and the walk's counts."""

    values: Tensor
    spent: Tensor
    counts: WalkCounts


def budgeted_winter_values(
    evaluate: Evaluate,
    hierarchies: Sequence[Hierarchy],
    budget: int,
    device: torch.device,
    leftover: str = "profile",
    generator: torch.Generator | None = None,
) -> WalkResult:
    """Winter values within ``budget`` evaluations per example, one hierarchy per example.

    ``evaluate`` gives ``(rows, O)`` values, ``O`` outputs of the model that
    share the walk. The evaluations spent are never above ``budget``,
    whatever ``O``; the values are exact when the budget covers the exact
    count. ``leftover`` shares what no budget reached among a node's leaves:
    ``"equal"`` (SHAP's ``lower_credit``) or ``"profile"`` (each child's
    average gain per unit weight where the node was split, shifted to the
    unsplit total; equal shares where it never was); both efficient.
    ``generator`` draws the seed of the sampled orderings.
    """
    distinct = list(dict.fromkeys(hierarchies))
    d = max(h.num_features for h in hierarchies)
    forest = Forest.of(distinct, d, device)
    walk = _Walk.start(evaluate, forest, hierarchies, distinct, generator)
    items = walk.root_items()
    tails: list[Tails] = []
    while items.example.numel():
        exact, rows = walk.plan_round(items, budget)
        if not bool((exact | (rows > 0)).any()):
            break
        sampled = rows > 0
        resolved: list[Items] = []
        if bool(exact.any()):
            resolved.append(walk.split_exactly(items.select(exact)))
        if bool(sampled.any()):
            children, tail = walk.split_by_orderings(items.select(sampled), rows[sampled])
            resolved.append(children)
            tails.append(tail)
        items = Items.cat([items.select(~exact & ~sampled), *resolved])
        items = credit_leaves(items, forest, walk.credit)
    walk.share(items, Tails.cat(tails) if tails else None, leftover)
    return WalkResult(walk.credit, walk.spent, walk.counts)


@dataclass
class _Walk:
    """The walk's state: its forest and costs, what was spent and credited, and its counts."""

    evaluate: Evaluate
    forest: Forest
    tree_of: Tensor
    credit: Tensor  # (N, d, outputs)
    spent: Tensor  # (N,)
    profile: Profile
    counts: WalkCounts
    split_cost: Tensor  # per node: 2^k - 2, float64
    full_cost: Tensor  # per node: the evaluations that resolve one of its items exactly
    children_cost: Tensor  # per node: its children's full costs, added up
    seed: int
    first_values: Tensor  # (N, 2, outputs): v(empty), v(full)

    @classmethod
    def start(
        cls,
        evaluate: Evaluate,
        forest: Forest,
        hierarchies: Sequence[Hierarchy],
        distinct: list[Hierarchy],
        generator: torch.Generator | None,
    ) -> _Walk:
        device = forest.parent.device
        tree_of = torch.tensor([distinct.index(h) for h in hierarchies], device=device)
        batch = len(hierarchies)
        examples = torch.arange(batch, device=device)
        roots = forest.roots[tree_of]
        pair = torch.stack([torch.full_like(roots, -1), roots], dim=1).view(-1, 1)
        values = evaluate(examples.repeat_interleave(2), forest.coalitions(pair)).double()
        values = values.view(batch, 2, values.shape[-1])
        outputs = values.shape[-1]
        d = forest.orders.shape[1]
        nodes = max(h.num_nodes for h in hierarchies)
        zeros = torch.zeros(batch, nodes, dtype=torch.long, device=device)
        split_cost, full_cost, children_cost = _node_costs(forest)
        source = generator.device if generator is not None else torch.device("cpu")
        seed = int(torch.randint(2**62, (1,), generator=generator, device=source))
        return cls(
            evaluate,
            forest,
            tree_of,
            torch.zeros(batch, d, outputs, dtype=torch.float64, device=device),
            torch.full((batch,), 2, dtype=torch.long, device=device),
            Profile.empty(batch, forest, outputs),
            WalkCounts(zeros, zeros.clone(), zeros.clone(), zeros.clone()),
            split_cost,
            full_cost,
            children_cost,
            seed,
            values,
        )

    def root_items(self) -> Items:
        batch = self.tree_of.shape[0]
        device = self.tree_of.device
        items = Items(
            torch.arange(batch, device=device),
            self.forest.roots[self.tree_of],
            torch.full((batch, 0), -1, dtype=torch.long, device=device),
            self.first_values[:, 0],
            self.first_values[:, 1],
            torch.ones(batch, dtype=torch.float64, device=device),
        )
        return credit_leaves(items, self.forest, self.credit)

    def plan_round(self, items: Items, budget: int) -> tuple[Tensor, Tensor]:
        """Per item: split exactly (bool), or the sampled prefixes to evaluate (0: neither)."""
        node = items.node
        split, full = self.split_cost[node], self.full_cost[node]
        per_ordering = (self.forest.num_children[node] - 1).double()
        remaining = (budget - self.spent).double()
        share = _water_fill(_priority(items), full, items.example, remaining)
        # an ordering's children's items cost at most children_cost to resolve: take
        # what leaves them that (all where the children are leaves), at least SPLIT_SHARE
        here = per_ordering / (per_ordering + self.children_cost[node])
        spendable = share * here.clamp(min=SPLIT_SHARE)
        # less than one whole ordering: a partial one's tail is shared, never split,
        # so nothing is left for the children and the whole share is spent here
        spendable = torch.where(spendable < per_ordering, share, spendable)
        exact = (share >= full) | (split <= spendable + _SLACK)
        prefixes = torch.floor(spendable + _SLACK)
        # inner children get items only from whole orderings (a partial one's tail is
        # shared), each resolved at children_cost at most. Where an example's items
        # cannot take all it has left that way (no later item would: the rest goes
        # unspent), its sampled items round up to whole orderings their shares cover,
        # largest gain first, until they can
        prefixes = _round_up_orderings(items, share, spendable, prefixes, remaining, exact, self)
        rows = torch.where(exact, 0.0, prefixes).long()
        _top_up(items, share, remaining, split, self.children_cost[node] > 0, exact, rows)
        idle = torch.ones_like(remaining, dtype=torch.bool)
        idle[items.example[exact | (rows > 0)]] = False
        idle &= remaining > 0
        if bool(idle.any()):
            _spend_the_rest(items, idle, remaining, split, per_ordering, exact, rows)
        return exact, rows

    def split_exactly(self, items: Items) -> Items:
        children = split_exactly(items, self.forest, self.evaluate, self.spent)
        self.profile.record(items, children)
        self._count(self.counts.enumerated, items.example, items.node, 1)
        return children

    def split_by_orderings(self, items: Items, rows: Tensor) -> tuple[Items, Tails]:
        done = split_by_orderings(items, rows, self.forest, self.evaluate, self.spent, self.seed)
        self.profile.record(done.profile_split, done.profile_children)
        self._count(self.counts.sampled, items.example, items.node, 1)
        self._count(self.counts.orderings, items.example, items.node, done.orderings)
        return done.children, done.tails

    def share(self, items: Items, tails: Tails | None, leftover: str) -> None:
        """Share what no budget reached among the leaves (after the last round).

        A partial ordering's tail goes to its children by the parent's profile
        (``"profile"``) or by their sizes (``"equal"``), then down like an
        unsplit item of each child.
        """
        self._count(self.counts.shared, items.example, items.node, 1)
        if tails is not None:
            first = segment_starts(tails.tail)  # one count per tail
            self._count(self.counts.shared, tails.items.example[first], tails.parent[first], 1)
            shared = tails.by_profile(self.profile) if leftover == "profile" else tails.items
            items = Items.cat([items, shared])
        if not items.example.numel():
            return
        if leftover == "equal":
            share_equally(items, self.forest, self.tree_of, self.credit)
        else:
            self.profile.share(items, self.forest, self.credit)

    def _count(self, table: Tensor, example: Tensor, node: Tensor, amount: int | Tensor) -> None:
        local = node - self.forest.roots[self.forest.tree[node]]
        added = torch.as_tensor(amount, device=table.device).expand(example.shape[0])
        table.index_put_((example, local), added.long(), accumulate=True)


def _round_up_orderings(
    items: Items,
    share: Tensor,
    spendable: Tensor,
    prefixes: Tensor,
    remaining: Tensor,
    exact: Tensor,
    walk: _Walk,
) -> Tensor:
    """``prefixes`` with sampled items of inner children rounded up to whole orderings
    where their example could not spend what it has left otherwise.

    An item's capacity is what it and its children's items can spend: its full
    cost when split exactly, else its prefixes plus ``children_cost`` per whole
    ordering. Where an example's capacities fall short of its remainder, its
    candidates (a whole ordering within the share) round up, largest gain
    first, until the shortfall is covered.
    """
    node = items.node
    children = walk.children_cost[node]
    full = walk.full_cost[node]
    step = (walk.forest.num_children[node] - 1).double().clamp(min=1)

    def capacity(rows: Tensor) -> Tensor:
        return torch.where(exact, full, rows + torch.floor(rows / step + _SLACK) * children)

    deficit = remaining - _per_example(capacity(prefixes), items.example, remaining)
    whole = torch.ceil(spendable / step - _SLACK) * step
    candidate = (deficit[items.example] > _SLACK) & (children > 0) & ~exact
    candidate &= (whole > prefixes) & (whole <= share + _SLACK)
    if not bool(candidate.any()):
        return prefixes
    picked, example = _by_gain(items, candidate)
    gained = (capacity(whole) - capacity(prefixes))[picked]
    before = segment_cumsum(gained, example) - gained
    taken = picked[before < deficit[example] - _SLACK]
    rounded = prefixes.clone()
    rounded[taken] = whole[taken]
    return rounded


def _priority(items: Items) -> Tensor:
    """``|v(c + B) - v(c)| * w``, summed over the outputs."""
    return (items.high - items.low).abs().sum(dim=1) * items.weight


def _water_fill(priority: Tensor, cap: Tensor, example: Tensor, remaining: Tensor) -> Tensor:
    """Per item, a share of its example's ``remaining`` by ``priority``, at most ``cap``.

    Where the caps of an example's items add up to no more than what it has
    left, every item gets its cap (the exact walk); otherwise the shares of
    capped items are their caps and the others split the rest by priority.
    """
    everything = _per_example(cap, example, remaining) <= remaining
    capped = everything[example].clone()
    level = torch.zeros_like(remaining)
    for _ in range(64):  # each pass caps more items; few passes in practice
        free = remaining - _per_example(torch.where(capped, cap, 0.0), example, remaining)
        weight = _per_example(torch.where(capped, 0.0, priority), example, remaining)
        level = torch.where(weight > 0, free.clamp(min=0) / weight.clamp(min=1e-300), 0.0)
        now = capped | (cap <= level[example] * priority)
        if bool((now == capped).all()):
            break
        capped = now
    return torch.where(capped, cap, level[example] * priority)


def _top_up(
    items: Items,
    share: Tensor,
    remaining: Tensor,
    split: Tensor,
    inner: Tensor,
    exact: Tensor,
    rows: Tensor,
) -> None:
    """Spend what whole rows left of the shares of items whose children are leaves.

    Such an item ends the walk below it, so the fraction of a row its share
    could not buy would be lost: per example, what is neither spent by these
    items nor kept by the others' shares makes the sampled items of largest
    gain exact where that fits, and the rest adds prefixes to the next one.
    Updates ``exact`` and ``rows`` in place.
    """
    kept = torch.where(inner, share, torch.where(exact, split, rows.double()))
    left = remaining - _per_example(kept, items.example, remaining)
    candidate = ~inner & ~exact & (rows > 0)
    if not bool((candidate & (left[items.example] >= 1 - _SLACK)).any()):
        return
    picked, example = _by_gain(items, candidate)
    extra = split[picked] - rows[picked].double()
    fits = segment_cumsum(extra, example) <= left[example] + _SLACK
    fits &= _before_first_miss(fits, example)
    exact[picked[fits]] = True
    rows[picked[fits]] = 0
    left -= _per_example(torch.where(fits, extra, 0.0), example, left)
    top = _first_in_segment(~fits, example)
    rows[picked[top]] += torch.floor(left[example[top]] + _SLACK).long()


def _spend_the_rest(
    items: Items,
    idle: Tensor,
    remaining: Tensor,
    split: Tensor,
    per_ordering: Tensor,
    exact: Tensor,
    rows: Tensor,
) -> None:
    """Examples whose shares bought nothing: their items of largest gain, cheapest first.

    Each item takes its cheapest resolution (an exact split where it costs at
    most two orderings, else one whole ordering) in order of gain while the
    example's remainder lasts; where the top item's does not fit, the first
    item whose does, and where none does, the top item takes a partial
    ordering of what is left. Updates ``exact`` and ``rows`` in place.
    """
    picked, example = _by_gain(items, idle[items.example])
    cheap_exact = split[picked] <= 2 * per_ordering[picked]
    cost = torch.where(cheap_exact, split[picked], per_ordering[picked])
    room = remaining[example] + _SLACK
    fits = segment_cumsum(cost, example) <= room
    fits &= _before_first_miss(fits, example)
    stuck = _per_example(fits.double(), example, remaining)[example] == 0
    alone = _first_in_segment(stuck & (cost <= room), example)
    buy = fits | alone
    helped = _per_example(alone.double(), example, remaining)[example] > 0
    partial = _first_in_segment(stuck & ~helped, example)
    exact[picked[buy & cheap_exact]] = True
    whole = picked[buy & ~cheap_exact]
    rows[whole] = per_ordering[whole].long()
    rows[picked[partial]] = torch.floor(room[partial]).long()


def _by_gain(items: Items, chosen: Tensor) -> tuple[Tensor, Tensor]:
    """The ``chosen`` items' indices by example, largest gain first, and their examples."""
    picked = torch.nonzero(chosen)[:, 0]
    order = torch.argsort(-_priority(items)[picked], stable=True)
    picked = picked[order[torch.argsort(items.example[picked][order], stable=True)]]
    return picked, items.example[picked]


def _per_example(values: Tensor, example: Tensor, like: Tensor) -> Tensor:
    return torch.zeros_like(like, dtype=values.dtype).index_add_(0, example, values)


def _before_first_miss(fits: Tensor, segment: Tensor) -> Tensor:
    """Within each segment (sorted), the positions before its first False."""
    return segment_cumsum((~fits).long(), segment) == 0


def _first_in_segment(mask: Tensor, segment: Tensor) -> Tensor:
    """Within each segment (sorted), the first position where ``mask`` holds."""
    return mask & (segment_cumsum(mask.long(), segment) == 1)


def _node_costs(forest: Forest) -> tuple[Tensor, Tensor, Tensor]:
    """Per node: its exact split's cost, its full cost, and its children's full costs.

    The full cost of an item of node B resolves it exactly all the way down:
    ``2^k - 2`` for B's split plus, for each child, its full cost in each of
    the ``2^(k - 1)`` contexts the split gives it. Float64: inf past range.
    """
    k = forest.num_children.double()
    split = torch.where(forest.num_children > MAX_SPLIT_CHILDREN, torch.inf, torch.exp2(k) - 2)
    split = torch.where(forest.num_children == 0, 0.0, split)
    full = split.clone()
    children = torch.zeros_like(split)
    for level in range(int(forest.level.max()), 0, -1):
        nodes = torch.nonzero(forest.level == level)[:, 0]
        up = forest.parent[nodes]
        children.index_add_(0, up, full[nodes])
        full.index_add_(0, up, full[nodes] * torch.exp2(k[up] - 1))
    return split, full, children
