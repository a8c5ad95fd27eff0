"""Owen and Winter values on a feature hierarchy (SHAP's ``PartitionExplainer``, batched)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import captum.attr as captum_attr
import torch

from .._compat import is_int
from ..engine.coalition_game import CoalitionGame
from ..graphs import FeatureGraph
from ..graphs.hierarchy import Hierarchy, parse_nested
from ..plans.limits import MAX_COALITIONS, check_choice
from ..plans.owen import winter_coalition_count, winter_value_plan
from ..plans.owen_budgeted import LEFTOVER_SHARES, budgeted_winter_values
from ._options import check_generator
from .base import GameAttribution, Options, Outcome, evaluate_plan
from .graph_family import resolve_graphs
from .owen_report import OwenReport

#: the ``hierarchy`` option: nested ids (an id, or a list or tuple of nested ids), a
#: Hierarchy, or a list of Hierarchy (one per example); None infers one
HierarchyArgument = Hierarchy | Sequence[Any] | int | None


@dataclasses.dataclass(frozen=True)
class OwenOptions(Options):
    """Options of :class:`OwenValue`.

    Args:
        hierarchy: the tree over the feature ids: nested lists or tuples
            (``[[0, 1, 2], [[3, 4], [5, 6]]]``), a
            :class:`~captum_graphshap.Hierarchy`, or a list with one
            ``Hierarchy`` per example. None: the inputs' graph's
            ``.hierarchy()`` (balanced halves of a sequence, alternating
            halves of an image's rows and columns, balanced splits of the
            mask's ids otherwise).
        budget: the most model evaluations per example (at least 2, the
            empty and full coalitions). None: exact, refused with the count
            above :data:`~captum_graphshap.plans.limits.MAX_COALITIONS`
            coalitions. When the exact plan needs more, the budgeted walk
            gives each node's contexts a share of the budget by their
            contribution: a share that covers a node's exact split buys it,
            a smaller one buys sampled orderings of its children (Owen
            sampling), so the whole budget is spent on any tree; it stays
            efficient and is exact at the exact count. Without ``target``, a
            multi-output model's outputs share one walk (its splits go
            where their contributions summed over the outputs are
            largest), so the budget bounds the evaluations of all together.
        leftover: how the budgeted walk shares what it leaves unsplit among
            a node's leaves: ``"profile"`` (default: each child's average
            gain where the node was split, shifted to the unsplit total;
            equal shares where it never was) or ``"equal"`` (SHAP's).
            ``benchmarks/partition.py --cases leftover`` measures both.
        generator: the seed of the budgeted walk's sampled orderings (an
            example's orderings depend on the seed, the node and its
            context, not on the batch). The exact value draws nothing.
        return_report: also return ``report``, an
            :class:`~captum_graphshap.attr.owen_report.OwenReport`: per
            example and node, the contexts enumerated, sampled or shared,
            and whether the values are exact.
    """

    hierarchy: HierarchyArgument = None
    budget: int | None = None
    leftover: str = "profile"
    generator: torch.Generator | None = None
    return_report: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "hierarchy", as_hierarchy_argument(self.hierarchy))
        if self.budget is not None:
            if not is_int(self.budget):
                raise TypeError(
                    f"budget must be an int (evaluations per example), got {self.budget!r}."
                )
            if int(self.budget) < 2:
                raise ValueError(
                    f"budget must be >= 2 evaluations per example (the empty and the full "
                    f"coalition), got {self.budget}."
                )
        check_generator(self.generator)
        check_choice(self.leftover, LEFTOVER_SHARES, "leftover")


def as_hierarchy_argument(value: Any) -> Any:
    """None, one :class:`Hierarchy`, a list of them (one per example), or nested ids.

    Nested ids are parsed here for their types and checked against the
    inputs' feature ids once those are known (still before any model call).
    """
    if value is None or isinstance(value, Hierarchy):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Hierarchy) for v in value):
        return list(value)
    if isinstance(value, FeatureGraph):
        raise TypeError("hierarchy must be a Hierarchy or nested ids; use graph.hierarchy().")
    parse_nested(value)
    return value


class OwenValue(GameAttribution, captum_attr.ShapleyValues):
    r"""Owen and Winter values: Shapley values that respect a hierarchy of the features.

    Feature i's value is its average marginal contribution over every
    ordering in which the members of each node of ``hierarchy`` come
    together, each node ordering its children uniformly at random (the
    Winter value; with one level of unions, the Owen value; with every
    feature under the root, the Shapley value). It is efficient, and a
    node's total is its Shapley value in the game of its siblings, so
    correlated groups share the credit the group earns. A balanced binary
    tree needs about :math:`0.67 d^2` distinct coalitions (172 at d = 16),
    all of one call evaluated in batches; ``budget=`` splits only the nodes
    that matter most. The values are those of SHAP's
    ``PartitionExplainer`` for the same tree and baseline
    (``benchmarks/partition.py`` compares speed at equal evaluations).

    Example:
        >>> import torch
        >>> from captum_graphshap import OwenValue
        >>> model = lambda x: x[:, 0] * x[:, 1] + x[:, 2]
        >>> x = torch.ones(1, 4)
        >>> OwenValue(model).attribute(x, hierarchy=[[0, 2], [1, 3]])
        tensor([[0.5000, 0.5000, 1.0000, 0.0000]])
    """

    Options = OwenOptions
    budget_accounting = "own"  # budget.py: it counts references itself
    graph_mask = True

    def explain(self, game: CoalitionGame, options: OwenOptions, show_progress: bool) -> Outcome:
        d = game.num_features
        hierarchy = _resolve(options.hierarchy, game)
        extra = int(game.value == "log_prob" and game.target is None)
        references = game.num_references
        limit = (
            MAX_COALITIONS
            if options.budget is None
            else max(1, (options.budget - extra) // references)
        )
        desc = self.progress_desc
        if isinstance(hierarchy, Hierarchy):
            count = winter_coalition_count(hierarchy)
            if count <= limit:
                plan = winter_value_plan(hierarchy, game.device)
                values = plan.estimator(evaluate_plan(game, plan, show_progress, desc))
                report = OwenReport.of_exact(hierarchy, game.batch_size, game.device)
                return Outcome(values, {"report": report})
            hierarchies = [hierarchy] * game.batch_size
        else:
            hierarchies = hierarchy
            count = max(winter_coalition_count(h) for h in hierarchies)
        if options.budget is None and count <= limit:
            limit = count  # per-example trees: the walk, run to the end, is exact
        elif options.budget is None:
            raise ValueError(
                f"OwenValue's exact Winter value needs {count:,} coalitions per example, above "
                f"the limit of {MAX_COALITIONS:,}; pass budget= (model evaluations per "
                "example) for the budgeted estimate, or a more balanced hierarchy."
            )
        if limit < 2:
            raise ValueError(
                f"budget={options.budget} leaves fewer than 2 coalitions with {references} "
                "references; raise budget."
            )

        def evaluate(example_index: torch.Tensor, coalitions: Any) -> torch.Tensor:
            # every output: a multi-output model's outputs share one walk (and the budget)
            return game.evaluate_rows(
                example_index,
                coalitions,
                distinct=True,
                show_progress=show_progress,
                desc=desc,
                every_output=True,
            )

        walk = budgeted_winter_values(
            evaluate,
            hierarchies,
            limit,
            game.device,
            leftover=options.leftover,
            generator=options.generator,
        )
        report = OwenReport.of_walk(tuple(hierarchies), walk.counts)
        return Outcome(walk.values[:, :d, game.output_index], {"report": report})


def _per_example_nested(hierarchy: Any, game: CoalitionGame) -> list[Hierarchy] | None:
    """One Hierarchy per example from a list of nested trees, or None if it is not one."""
    if not isinstance(hierarchy, (list, tuple)) or len(hierarchy) != game.batch_size:
        return None
    counts = game.features.features_per_example().tolist()
    try:
        return [
            Hierarchy.from_nested(item, num_features=counts[n] if len(counts) > 1 else counts[0])
            for n, item in enumerate(hierarchy)
        ]
    except (ValueError, TypeError):
        return None


def _resolve(hierarchy: Any, game: CoalitionGame) -> Hierarchy | list[Hierarchy]:
    """The hierarchy of each example, checked against the mask's feature ids."""
    d = game.num_features
    if hierarchy is None:
        graph = cast(FeatureGraph, resolve_graphs(None, game))  # None infers one graph
        hierarchy = graph.hierarchy()
    if isinstance(hierarchy, Hierarchy):
        hierarchy.check_features(d)
        return hierarchy
    if not (hierarchy and all(isinstance(h, Hierarchy) for h in hierarchy)):
        try:
            return Hierarchy.from_nested(hierarchy, num_features=d)
        except ValueError:
            # a list with one nested tree per example, which cannot be one tree
            per_example = _per_example_nested(hierarchy, game)
            if per_example is None:
                raise
            hierarchy = per_example
    if len(hierarchy) != game.batch_size:
        raise ValueError(
            f"hierarchy is a list of {len(hierarchy)} hierarchies but inputs has "
            f"{game.batch_size} examples; pass one per example or a single hierarchy."
        )
    counts = game.features.features_per_example().tolist()
    for position, item in enumerate(hierarchy):
        expected = counts[position] if len(counts) > 1 else counts[0]
        item.check_features(expected, name=f"hierarchy[{position}]")
    if all(h == hierarchy[0] for h in hierarchy[1:]) and hierarchy[0].num_features == d:
        return hierarchy[0]
    return list(hierarchy)
