"""Bivariate Shapley: the directed d x d matrix of feature importance given another feature."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from captum.attr import PerturbationAttribution
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame, prepare_game
from ..graphs import FeatureGraph
from ..plans.bivariate import (
    DEFAULT_PERMUTATIONS,
    bivariate_from_all_coalitions,
    bivariate_from_kernel,
    bivariate_from_permutations,
    default_kernel_samples,
    kernel_plan,
    kernel_rows,
    local_plan,
    min_kernel_samples,
    permutation_plan,
    permutation_rows,
)
from ..plans.exact import all_coalitions
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ._common import check_order, default_graph_mask, resolve_graphs
from ._options import check_generator

METHODS = ("exact", "sampling", "kernel")

#: Largest number of features: the output holds d^2 values per example.
MAX_FEATURES = 4096


class BivariateShapley(PerturbationAttribution):
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

    Methods (``E2[i, j]`` is the Shapley value of ``i`` in the game
    ``1[j in S] v(S)``, which every one of them exploits):

    - ``"exact"``: all ``2^d`` coalitions; refuses ``d > 20`` with the count.
    - ``"sampling"``: the paper's Alg. 1; ``n_samples`` permutations (default
      100), ``d - 1`` rows each; unbiased.
    - ``"kernel"``: the paper's Alg. 2; ``n_samples`` paired coalitions from
      the Shapley kernel (default ``2 d + 2048``, at least ``2 d``, odd
      counts rounded up; the draws of
      :class:`~captum_graphshap.attr.sampling.PairedKernelShap`) plus the
      two endpoints, one constrained least-squares projection applied to the
      labels masked by ``1[j in S]`` for every ``j``: the rows of one
      KernelSHAP run.
    - ``graph=`` (with ``k``): the graph-local variant, exact for the game
      restricted to each feature's neighbourhood ``N_k(i)`` (features outside
      at the baseline), only for ``j`` in ``N_k(i)`` (other entries 0), at a
      cost linear in ``d`` on bounded-degree graphs
      (:func:`~captum_graphshap.bivariate.local_plan`).

    All methods share one plan across the batch, evaluate each distinct
    coalition once, and run on the inputs' device.
    """

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        """
        Args:
            forward_func: the model, or any function of the inputs returning a
                tensor with one row per example.
        """
        super().__init__(forward_func)

    def attribute(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        n_samples: int | None = None,
        perturbations_per_eval: int | None = None,
        show_progress: bool = False,
        *,
        method: str = "exact",
        generator: torch.Generator | None = None,
        graph: FeatureGraph | Sequence[FeatureGraph] | str | None = None,
        k: int = 1,
        references: Tensor | tuple[Tensor, ...] | None = None,
        value: str = "output",
        return_shapley: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The ``(batch, d, d)`` bivariate Shapley matrix of each example.

        Arguments shared with Captum mean what they mean in
        :meth:`~captum_graphshap.ExactShapley.attribute` (tensor or tuple
        inputs, token ids, baselines, target, feature masks, references,
        ``value``).

        Args:
            n_samples: permutations for ``"sampling"`` (default 100),
                coalitions for ``"kernel"`` (default ``2 d + 2048``, at least
                ``2 d``); must be None for ``"exact"`` and with ``graph``.
            method: ``"exact"``, ``"sampling"`` or ``"kernel"``.
            generator: the random source of ``"sampling"`` and ``"kernel"``;
                the same seed gives the same result. Sampling happens on the
                generator's device.
            graph: a :class:`~captum_graphshap.FeatureGraph` over the feature
                ids (or one per example), or ``"auto"`` for the line or grid
                inferred from the input as the other graph methods do; selects
                the graph-local variant (``method="exact"`` only).
            k: neighbourhood radius of the graph-local variant.
            return_shapley: also return the ``(batch, d)`` univariate values
                the same rows give: exact Shapley, the permutation estimate,
                the KernelSHAP fit, or L-Shapley for the graph-local variant.

        Returns:
            ``(batch, d, d)`` tensor on the inputs' device, ``out[b, i, j] =
            E2[i, j]``, zero diagonal; the inputs' floating dtype (token ids:
            the default dtype). With ``return_shapley``, the pair
            ``(matrix, shapley)``.
        """
        check_choice(method, METHODS, "method")
        check_generator(generator)
        local = graph is not None
        if local:
            k = check_order(k)
            if method != "exact":
                raise ValueError(
                    f"graph= selects the graph-local variant, which enumerates each "
                    f"neighbourhood exactly; use method='exact' with it, not {method!r}."
                )
        n_samples = _check_samples(n_samples, method, local)
        game, _ = prepare_game(
            self.forward_func,
            inputs,
            baselines,
            target,
            additional_forward_args,
            default_graph_mask(inputs, feature_mask) if local else feature_mask,
            perturbations_per_eval,
            references=references,
            value=value,
        )
        d = game.num_features
        if d > MAX_FEATURES:
            raise ValueError(
                f"BivariateShapley would return {d}^2 = {d * d:,} values per example "
                f"(d = {d} features, at most {MAX_FEATURES}); group elements into fewer "
                "features with feature_mask."
            )
        progress = _Progress(show_progress, f"BivariateShapley({method})")
        if local:
            matrix, shapley = _graph_local(game, graph, k, progress)
        elif method == "exact":
            coalitions = all_coalitions(d, game.device, method="BivariateShapley(method='exact')")
            values = game.evaluate(
                coalitions, distinct=True, show_progress=progress.show, desc=progress.desc
            )
            matrix, shapley = bivariate_from_all_coalitions(values)
        elif method == "sampling":
            count = DEFAULT_PERMUTATIONS if n_samples is None else n_samples
            _check_rows(permutation_rows(d, count), method, count)
            rank, coalitions = permutation_plan(d, count, generator, game.device)
            matrix, shapley = bivariate_from_permutations(
                game.evaluate(coalitions, show_progress=progress.show, desc=progress.desc), rank
            )
        else:
            count = default_kernel_samples(d) if n_samples is None else n_samples
            if count < min_kernel_samples(d):
                raise ValueError(
                    f"n_samples={count} is too small for method='kernel' with d = {d} "
                    f"features: the least squares needs at least 2 d = {min_kernel_samples(d)} "
                    "coalitions (d complementary pairs); pass a larger n_samples or use "
                    "method='sampling'."
                )
            _check_rows(kernel_rows(count), method, count)
            sampled = kernel_plan(d, count, generator, game.device)
            ends = torch.zeros(2, d, dtype=torch.bool, device=game.device)
            ends[1] = True  # the empty and the full coalition, enforced by the constraint
            coalitions = torch.cat([ends, sampled])
            values = game.evaluate(coalitions, show_progress=progress.show, desc=progress.desc)
            matrix, shapley = bivariate_from_kernel(
                sampled, values[:, 2:], values[:, 0], values[:, 1]
            )
        dtype = game.attribution_dtype()
        if return_shapley:
            return matrix.to(dtype), shapley.to(dtype)
        return matrix.to(dtype)


class _Progress(NamedTuple):
    show: bool
    desc: str


def _check_samples(n_samples: Any, method: str, local: bool) -> int | None:
    if n_samples is None:
        return None
    if method == "exact":
        where = "the graph-local variant" if local else "method='exact'"
        raise ValueError(
            f"n_samples is not used by {where}, which enumerates its coalitions; leave it None "
            "or choose method='sampling' or 'kernel'."
        )
    if isinstance(n_samples, bool) or not isinstance(n_samples, int):
        raise TypeError(
            f"n_samples must be a positive int or None, got {type(n_samples).__name__}."
        )
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}.")
    return n_samples


def _check_rows(rows: int, method: str, count: int) -> None:
    check_plan_size(
        rows,
        MAX_COALITIONS,
        f"BivariateShapley(method={method!r}) with n_samples={count}",
        "use a smaller n_samples or group features with feature_mask.",
    )


def _graph_local(
    game: CoalitionGame, graph: Any, k: int, progress: _Progress
) -> tuple[Tensor, Tensor]:
    """The graph-local matrix and L-Shapley values; one plan per distinct graph,
    all built (and refused) before the model is called."""
    graphs = resolve_graphs(None if isinstance(graph, str) and graph == "auto" else graph, game)
    d = game.num_features
    if isinstance(graphs, FeatureGraph):
        coalitions, pairs, single = local_plan(graphs, k)
        values = game.evaluate(
            coalitions, distinct=True, show_progress=progress.show, desc=progress.desc
        )
        return pairs.apply(values).view(-1, d, d), single.apply(values)
    plans = [local_plan(g, k) for g in graphs]
    blocks = []
    for coalitions, _, _ in plans:
        padded = torch.zeros(coalitions.shape[0], d, dtype=torch.bool)
        padded[:, : coalitions.shape[1]] = coalitions
        blocks.append(padded)
    sizes = [block.shape[0] for block in blocks]
    example_index = torch.repeat_interleave(torch.arange(len(blocks)), torch.tensor(sizes))
    values = game.evaluate_rows(
        example_index.to(game.device),
        torch.cat(blocks).to(game.device),
        distinct=True,
        show_progress=progress.show,
        desc=progress.desc,
    )
    matrix = values.new_zeros(game.batch_size, d, d)
    shapley = values.new_zeros(game.batch_size, d)
    for example, (chunk, (_, pairs, single)) in enumerate(zip(values.split(sizes), plans)):
        own = single.num_outputs
        matrix[example, :own, :own] = pairs.apply(chunk[None]).view(own, own)
        shapley[example, :own] = single.apply(chunk[None])[0]
    return matrix, shapley
