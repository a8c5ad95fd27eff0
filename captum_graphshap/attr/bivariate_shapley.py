"""Bivariate Shapley (Masoomi et al., ICLR 2022): importance of i given j present."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..engine.coalition_game import CoalitionGame
from ..engine.plan import Plan
from ..graphs import FeatureGraph
from ..plans.bivariate import (
    DEFAULT_PERMUTATIONS,
    bivariate_exact_plan,
    bivariate_kernel_plan,
    bivariate_local_plan,
    bivariate_permutation_plan,
    default_kernel_samples,
    kernel_rows,
    min_kernel_samples,
    permutation_rows,
)
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ._options import check_generator
from .base import Options, Outcome, SampledAttribution, evaluate_plan
from .budget import check_budget, samples_within
from .graph_family import GraphArgument, check_order, evaluate_plans, resolve_graphs
from .renames import Renames

#: ``estimator=`` choices of :class:`BivariateShapley`
BIVARIATE_ESTIMATORS = ("exact", "permutation", "kernel")

#: Largest number of features: the output holds d^2 values per example.
MAX_FEATURES = 4096


@dataclasses.dataclass(frozen=True)
class BivariateOptions(Options):
    """Options of :class:`BivariateShapley`.

    Args:
        n_samples: permutations for ``"permutation"`` (default 100), coalitions
            for ``"kernel"`` (default ``2 d + 2048``, at least ``2 d``); must
            be None for ``"exact"`` and the graph-local variant.
        budget: model evaluations per example instead of ``n_samples``
            (``"permutation"``: ``2 + (d - 1)`` per permutation; ``"kernel"``:
            ``budget - 2`` coalitions).
        estimator: ``"exact"``, ``"permutation"`` or ``"kernel"`` (``method=``
            and ``"sampling"`` before: still accepted for one release, with a
            warning).
        generator: the random source of ``"permutation"`` and ``"kernel"``; the
            same seed gives the same result.
        graph: the feature graph of the graph-local variant (a
            :class:`~captum_graphshap.FeatureGraph` or one per example);
            giving it selects that variant, with ``k = 1`` by default.
        k: None (the whole game) or the neighbourhood radius of the
            graph-local variant, on ``graph`` (inferred from the input when
            None, as the other graph methods do).
        return_shapley: also return ``shapley``, the ``(batch, d)`` univariate
            values the same rows give: exact Shapley, the permutation
            estimate, the KernelSHAP fit, or L-Shapley for the graph-local
            variant.
    """

    n_samples: int | None = None
    budget: int | None = None
    graph: GraphArgument = None
    estimator: str = "exact"
    generator: torch.Generator | None = None
    k: int | None = None
    return_shapley: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.estimator, BIVARIATE_ESTIMATORS, "estimator")
        check_generator(self.generator)
        check_budget(self.budget, self.n_samples)
        if self.local:
            if self.k is not None:
                check_order(self.k)
            if self.estimator != "exact":
                raise ValueError(
                    f"graph= selects the graph-local variant, which enumerates each "
                    f"neighbourhood exactly; use estimator='exact' with it, not {self.estimator!r}."
                )
        if self.budget is not None and self.estimator == "exact":
            raise ValueError(
                "budget= is for estimator='permutation' or 'kernel'; estimator='exact' enumerates "
                "its coalitions."
            )
        _check_samples(self.n_samples, self.estimator, self.local)

    @property
    def local(self) -> bool:
        return self.k is not None or self.graph is not None

    @property
    def radius(self) -> int:
        return 1 if self.k is None else int(self.k)


class BivariateShapley(SampledAttribution):
    r"""Bivariate Shapley values (Masoomi et al., ICLR 2022, Eq. 6).

    The importance of feature ``i`` when feature ``j`` is present:

    .. math::
        E_2[i, j] = \sum_{S \subseteq D \setminus i,\; j \in S}
        \frac{|S|!\,(d-|S|-1)!}{d!} \big(v(S \cup i) - v(S)\big)

    ``attribute`` returns a ``(batch, d, d)`` tensor with ``out[b, i, j] =
    E2[i, j]`` and a zero diagonal, ``d`` the features of ``feature_mask``.
    Read as a directed graph (edge ``j -> i`` with weight ``E2[i, j]``, see
    :class:`~captum_graphshap.analysis.ExplanationGraph`) it shows mutually
    redundant features (``E2[i, j] = E2[j, i] = 0``: either one suffices),
    directional redundancy and, through PageRank, the most influential ones.

    Estimators (``estimator=``; ``E2[i, j]`` is the Shapley value of ``i`` in the game
    ``1[j in S] v(S)``, which every one of them exploits):

    - ``"exact"``: all ``2^d`` coalitions; refuses ``d > 20`` with the count.
    - ``"permutation"``: the paper's Alg. 1; ``n_samples`` permutations (default
      100), ``d - 1`` rows each; unbiased.
    - ``"kernel"``: the paper's Alg. 2; ``n_samples`` paired coalitions from
      the Shapley kernel (default ``2 d + 2048``, at least ``2 d``, odd
      counts rounded up; the draws of
      :class:`~captum_graphshap.attr.PairedKernelShap`) plus the
      two endpoints, one constrained least-squares projection applied to the
      labels masked by ``1[j in S]`` for every ``j``: the rows of one
      KernelSHAP run.
    - ``k=`` (with ``graph``, inferred when None): the graph-local variant, exact for the game
      restricted to each feature's neighbourhood ``N_k(i)`` (features outside
      at the baseline), only for ``j`` in ``N_k(i)`` (other entries 0), at a
      cost linear in ``d`` on bounded-degree graphs
      (:func:`~captum_graphshap.plans.bivariate.local_plan`).

    All estimators share one plan across the batch, evaluate each distinct
    coalition once, and run on the inputs' device.

    Example:
        >>> import torch
        >>> from captum_graphshap import BivariateShapley
        >>> model = torch.nn.Linear(4, 1)
        >>> BivariateShapley(model).attribute(torch.ones(2, 4), target=0).shape
        torch.Size([2, 4, 4])
    """

    Options = BivariateOptions
    renames = Renames(
        options={"method": "estimator"}, values={"estimator": {"sampling": "permutation"}}
    )

    def uses_graph_mask(self, options: BivariateOptions) -> bool:
        return options.local

    @staticmethod
    def _plan(options: BivariateOptions, d: int, device: torch.device) -> Plan:
        if options.estimator == "exact":
            return bivariate_exact_plan(d, device)
        if options.estimator == "permutation":
            count = _permutations(options, d)
            _check_rows(permutation_rows(d, count), options.estimator, count)
            return bivariate_permutation_plan(
                d, count, options.generator, device, budget=options.budget
            )
        count = _kernel_samples(options, d)
        _check_rows(kernel_rows(count), options.estimator, count)
        fill = options.budget is not None  # budget= counts distinct evaluations: spend them
        return bivariate_kernel_plan(d, count, options.generator, device, fill=fill)

    returns = (
        "``(batch, d, d)`` tensor on the inputs' device, ``out[b, i, j] = E2[i, j]``, zero "
        "diagonal; the inputs' floating dtype (token ids: the default dtype)."
    )

    def explain(
        self, game: CoalitionGame, options: BivariateOptions, show_progress: bool
    ) -> Outcome:
        d = game.num_features
        if d > MAX_FEATURES:
            raise ValueError(
                f"BivariateShapley would return {d}^2 = {d * d:,} values per example "
                f"(d = {d} features, at most {MAX_FEATURES}); group elements into fewer "
                "features with feature_mask."
            )
        progress = _Progress(show_progress, self.progress_desc)
        if options.local:
            # "auto" is the former spelling of graph=None with k (inferred graph)
            graph = (
                None
                if isinstance(options.graph, str) and options.graph == "auto"
                else options.graph
            )
            matrix, shapley = _graph_local(game, graph, options.radius, progress)
        else:
            plan = self._plan(options, d, game.device)
            values = evaluate_plan(game, plan, progress.show, progress.desc)
            matrix, shapley = plan.estimator(values)
        dtype = game.attribution_dtype()
        return Outcome(matrix.to(dtype), {"shapley": shapley.to(dtype)}, packed=False)


def _permutations(options: BivariateOptions, d: int) -> int:
    if options.budget is not None:
        return samples_within(options.budget, 2, max(1, d - 1), 1, "BivariateShapley(permutation)")
    return DEFAULT_PERMUTATIONS if options.n_samples is None else options.n_samples


def _kernel_samples(options: BivariateOptions, d: int) -> int:
    if options.budget is not None:
        count = samples_within(options.budget, 2, 1, 2 * d, "BivariateShapley(kernel)")
        return count - count % 2
    count = default_kernel_samples(d) if options.n_samples is None else options.n_samples
    if count < min_kernel_samples(d):
        raise ValueError(
            f"n_samples={count} is too small for estimator='kernel' with d = {d} "
            f"features: the least squares needs at least 2 d = {min_kernel_samples(d)} "
            "coalitions (d complementary pairs); pass a larger n_samples or use "
            "estimator='permutation'."
        )
    return count


class _Progress(NamedTuple):
    show: bool
    desc: str


def _check_samples(n_samples: Any, estimator: str, local: bool) -> int | None:
    if n_samples is None:
        return None
    if estimator == "exact":
        where = "the graph-local variant" if local else "estimator='exact'"
        raise ValueError(
            f"n_samples is not used by {where}, which enumerates its coalitions; leave it None "
            "or choose estimator='permutation' or 'kernel'."
        )
    if isinstance(n_samples, bool) or not isinstance(n_samples, int):
        raise TypeError(
            f"n_samples must be a positive int or None, got {type(n_samples).__name__}."
        )
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}.")
    return n_samples


def _check_rows(rows: int, estimator: str, count: int) -> None:
    check_plan_size(
        rows,
        MAX_COALITIONS,
        f"BivariateShapley(estimator={estimator!r}) with n_samples={count}",
        "use a smaller n_samples or group features with feature_mask.",
    )


def _graph_local(
    game: CoalitionGame, graph: Any, k: int, progress: _Progress
) -> tuple[Tensor, Tensor]:
    """The graph-local matrix and L-Shapley values; one plan per distinct graph,
    all built (and refused) before the model is called."""
    graphs = resolve_graphs(graph, game)
    d = game.num_features
    plans = [
        bivariate_local_plan(g, k)
        for g in ([graphs] if isinstance(graphs, FeatureGraph) else graphs)
    ]
    values = evaluate_plans(game, plans, progress.show, progress.desc)
    if len(plans) == 1:
        return plans[0].estimator(values[0])
    matrix = values[0].new_zeros(game.batch_size, d, d)
    shapley = values[0].new_zeros(game.batch_size, d)
    for example, (chunk, plan) in enumerate(zip(values, plans)):
        pairs, single = plan.estimator(chunk)
        own = single.shape[1]
        matrix[example, :own, :own] = pairs[0]
        shapley[example, :own] = single[0]
    return matrix, shapley
