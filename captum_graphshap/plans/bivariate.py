r"""Bivariate Shapley (Masoomi et al., ICLR 2022): plans and estimators.

The bivariate value of feature ``i`` given feature ``j`` (Eq. 6)::

    E2[i, j] = sum_{S subset D - i, j in S} |S|! (d - |S| - 1)! / d! (v(S + i) - v(S))

is the Shapley value of ``i`` in the game ``v_j(S) = 1[j in S] v(S)``: for
``i != j`` the marginal contribution of ``i`` to ``v_j`` is that to ``v``
when ``j`` is present and 0 otherwise. Every estimator here uses that
identity, so each is "one univariate method, read d times":

- :func:`bivariate_from_all_coalitions` — exact, from the ``2^d`` coalitions;
- :func:`bivariate_permutation_plan` / :func:`bivariate_from_permutations` — the
  paper's Alg. 1: each sampled permutation gives every feature's marginal
  contribution; ``E2[i, j]`` averages those where ``j`` comes before ``i``;
- :func:`kernel_plan` / :func:`bivariate_from_kernel` — the paper's Alg. 2:
  one KernelSHAP least-squares projection, applied to the labels ``v(S)``
  masked by ``1[j in S]`` for every ``j`` at once;
- :func:`local_plan` — the graph-local variant: bivariate values of the game
  restricted to each feature's neighbourhood, as L-Shapley restricts the
  univariate value.

Each estimator also returns the univariate values its rows give for free.
Outputs are ``(N, d, d)`` with ``out[n, i, j] = E2[i, j]`` and a zero
diagonal, in the dtype of the values (float64 from the engine).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from ..graphs import FeatureGraph
from ..graphs.bitsets import masks_to_rows
from .limits import MAX_COALITIONS, check_neighbourhood_plan_size
from .linear import SparseLinearMap, shapley_weights
from .paired_designs import MAX_FILL_DRAWS, filled_kernel_pairs, kernel_coalitions
from .permutations import filled_orderings, permutation_ranks

#: ``budget=`` with ``estimator="kernel"``: at most this many i.i.d. draws per distinct
#: pair while filling (the fit runs on the draws, repeats included)
FILL_DRAWS_PER_PAIR = 32

#: Default permutations of ``estimator="permutation"`` (each costs ``d - 1`` rows).
#: Captum's ShapleyValueSampling uses 25; a bivariate entry averages over the
#: half of the permutations where ``j`` precedes ``i``, so it needs more.
DEFAULT_PERMUTATIONS = 100

#: Elements of the intermediate blocks the estimators build at once (32 MB in float64).
_BLOCK_ELEMENTS = 2**22


def default_kernel_samples(d: int) -> int:
    """Default coalitions of ``estimator="kernel"``: ``2 d + 2048``, the rule of
    SHAP's KernelExplainer (and of PairedKernelShap)."""
    return 2 * d + 2048


def min_kernel_samples(d: int) -> int:
    """Fewest coalitions ``estimator="kernel"`` accepts: ``2 d`` (``d`` pairs).

    A pair ``(S, D - S)`` adds one direction to the least-squares design
    besides the all-ones one the endpoint constraint fixes, so fewer than
    ``d - 1`` pairs cannot determine ``d`` values.
    """
    return 2 * d


# ---------------------------------------------------------------------- exact


def bivariate_from_all_coalitions(values: Tensor) -> tuple[Tensor, Tensor]:
    """Exact bivariate and univariate Shapley values from all ``2^d`` coalitions.

    Args:
        values:
            ``(N, 2^d)``; column ``m`` is the value of the coalition whose members
            are the set bits of ``m`` (:func:`~captum_graphshap.plans.exact.all_coalitions`).

    Returns:
        ``(N, d, d)`` bivariate values and ``(N, d)`` Shapley values. Per feature
        ``i`` the gains ``w(|S|) (v(S + i) - v(S))`` over the ``2^(d-1)`` sets
        without ``i`` are one matrix product with their membership matrix:
        ``O(d^2 2^d)`` time, ``O(2^d)`` extra memory per example.
    """
    batch, count = values.shape
    d = count.bit_length() - 1
    if count != 1 << d:
        raise ValueError(f"values must have 2^d columns, got {count}.")
    out = values.new_zeros(batch, d, d)
    phi = values.new_zeros(batch, d)
    if d == 0:
        return out, phi
    codes = torch.arange(count, device=values.device)
    members = ((codes[:, None] >> torch.arange(d, device=values.device)) & 1).to(values.dtype)
    sizes = members.sum(dim=1).long()
    weights = torch.tensor(shapley_weights(d), dtype=values.dtype, device=values.device)
    for i in range(d):
        # Columns as (high bits, bit i, low bits): pairs every S without i with S + i.
        paired = values.view(batch, count >> (i + 1), 2, 1 << i)
        without_i = (slice(None), 0, slice(None))
        size = sizes.view(count >> (i + 1), 2, 1 << i)[without_i].reshape(-1)
        gains = (paired[:, :, 1, :] - paired[:, :, 0, :]).reshape(batch, -1) * weights[size]
        member = members.view(count >> (i + 1), 2, 1 << i, d)[without_i].reshape(-1, d)
        out[:, i, :] = gains @ member
        phi[:, i] = gains.sum(dim=1)
    out.diagonal(dim1=1, dim2=2).zero_()
    return out, phi


# ------------------------------------------------------------------- sampling


def permutation_prefixes(rank: Tensor) -> Tensor:
    """The coalitions permutations visit: ``rank`` ``(P, d)`` -> ``(2 + P (d - 1), d)`` bool.

    ``rank[p, f]`` is the position of feature ``f`` in permutation ``p``. The
    rows are the empty set, the full set, then the ``d - 1`` proper non-empty
    prefixes of each permutation in order. Rows repeat across permutations;
    the engine evaluates each once.
    """
    d, device = rank.shape[1], rank.device
    steps = torch.arange(1, d, device=device)
    prefixes = rank[:, None, :] < steps[None, :, None]  # (P, d - 1, d)
    ends = torch.stack(
        [
            torch.zeros(d, dtype=torch.bool, device=device),
            torch.ones(d, dtype=torch.bool, device=device),
        ]
    )
    return torch.cat([ends, prefixes.reshape(-1, d)])


def bivariate_from_permutations(values: Tensor, rank: Tensor) -> tuple[Tensor, Tensor]:
    """The paper's Alg. 1 estimator from the values of :func:`permutation_prefixes`.

    With ``Delta_i(p)`` the marginal contribution of ``i`` in permutation ``p``,
    ``E2[i, j] = mean_p 1[j before i in p] Delta_i(p)`` (unbiased) and the
    Shapley value ``phi_i = mean_p Delta_i(p)`` comes from the same rows.

    Args:
        values:
            ``(N, 2 + P (d - 1))`` values in the row order of the prefixes.
        rank:
            ``(P, d)`` positions of the features in the permutations.
    """
    batch = values.shape[0]
    n_perm, d = rank.shape
    interior = values[:, 2:].reshape(batch, n_perm, d - 1)
    prefix = torch.cat(
        [
            values[:, :1, None].expand(-1, n_perm, 1),
            interior,
            values[:, 1:2, None].expand(-1, n_perm, 1),
        ],
        dim=2,
    )  # (N, P, d + 1): value of the first t features of p, t = 0..d
    steps = prefix[:, :, 1:] - prefix[:, :, :-1]  # gain of the feature at position t
    gains = steps.gather(2, rank[None].expand(batch, -1, -1))  # (N, P, d) by feature
    out = values.new_zeros(batch, d, d)
    chunk = max(1, _BLOCK_ELEMENTS // max(1, d * d))
    for start in range(0, n_perm, chunk):
        block = rank[start : start + chunk]
        before = (block[:, None, :] < block[:, :, None]).to(values.dtype)  # [p, i, j]: j before i
        out += torch.einsum("npi,pij->nij", gains[:, start : start + chunk], before)
    out /= n_perm
    out.diagonal(dim1=1, dim2=2).zero_()
    return out, gains.mean(dim=1)


# --------------------------------------------------------------------- kernel


def kernel_plan(
    d: int, n_samples: int, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Paired coalitions drawn from the Shapley kernel, endpoints excluded.

    The plan of :class:`~captum_graphshap.attr.PairedKernelShap`
    (:func:`~captum_graphshap.plans.paired_designs.kernel_coalitions`): sizes ``s`` in
    ``1..d-1`` with probability proportional to ``1 / (s (d - s))``, a
    uniform subset of that size, then its complement, so every coalition is
    drawn with probability proportional to its kernel weight and the
    regression is unweighted. Returns ``(n_samples rounded up to even, d)``
    bool; the same generator state gives PairedKernelShap's coalitions.
    """
    if d < 2:
        return torch.zeros(0, d, dtype=torch.bool, device=device)  # nothing between the ends
    return kernel_coalitions(d, n_samples, generator, device)


def bivariate_from_kernel(
    coalitions: Tensor, values: Tensor, empty: Tensor, full: Tensor
) -> tuple[Tensor, Tensor]:
    """The paper's Alg. 2: one constrained least-squares fit, read for every ``j``.

    KernelSHAP solves ``min sum_m (y_m - z_m . phi)^2`` subject to
    ``sum phi = v(D) - v(empty)`` with ``y_m = v(S_m) - v(empty)``; the
    solution is linear, ``phi = K (Z^T y) + q t`` with ``K, q`` from the
    pseudo-inverse of the KKT matrix ``[[Z^T Z, 1], [1^T, 0]]`` and
    ``t = v(D) - v(empty)``. The game ``v_j(S) = 1[j in S] v(S)`` has labels
    ``z_mj y_m`` (with ``v_j(empty) = 0`` the centring by ``v(empty)`` gives
    the same marginals) and the same ``t``, so all ``d`` fits are
    ``E2 = K (Z^T diag(y) Z) + q t`` — one ``d x d`` product per example on
    top of the ``d x M`` one a univariate fit needs.

    Args:
        coalitions:
            ``(M, d)`` bool, interior sampled coalitions (repeats count twice).
        values:
            ``(N, M)`` their values.
        empty, full:
            ``(N,)`` values of the empty and the full coalition.

    Returns:
        ``(N, d, d)`` bivariate values and ``(N, d)`` KernelSHAP values.
    """
    d = coalitions.shape[1]
    design = coalitions.to(values.dtype)
    kkt = values.new_zeros(d + 1, d + 1)
    kkt[:d, :d] = design.T @ design
    kkt[:d, d] = 1.0
    kkt[d, :d] = 1.0
    # pinv: exact inverse when the samples determine the fit, the minimum-norm
    # solution when an unlucky draw leaves two features inseparable.
    inverse = torch.linalg.pinv(kkt)
    k_matrix, q_vector = inverse[:d, :d], inverse[:d, d]
    labels = values - empty[:, None]
    total = full - empty
    out = (
        k_matrix @ _masked_moments(design, labels) + q_vector[None, :, None] * total[:, None, None]
    )
    out.diagonal(dim1=1, dim2=2).zero_()
    phi = (labels @ design) @ k_matrix.T + q_vector[None, :] * total[:, None]
    return out, phi


def _masked_moments(design: Tensor, labels: Tensor) -> Tensor:
    """``Z^T diag(y_n) Z`` per example: column ``j`` is ``Z^T (z_j * y_n)``, the
    right-hand side of the fit for ``v_j``.

    For paired rows ``(z, 1 - z)`` with labels ``(a, b)``,
    ``a z z^T + b (1 - z)(1 - z)^T = (a + b) z z^T + b (1 1^T - 1 z^T - z 1^T)``:
    one weighted Gram matrix over half the rows plus rank-one terms, which
    halves the dominant cost (``d^2`` per row and example).
    """
    count = design.shape[0]
    if count and count % 2 == 0 and torch.equal(design[1::2], 1 - design[0::2]):
        first, present, complement = design[0::2], labels[:, 0::2], labels[:, 1::2]
        cross = complement @ first  # (N, d): sum of b z
        return (
            _weighted_gram(first, present + complement)
            + complement.sum(dim=1)[:, None, None]
            - cross[:, :, None]
            - cross[:, None, :]
        )
    return _weighted_gram(design, labels)


def _weighted_gram(design: Tensor, weights: Tensor) -> Tensor:
    """``Z^T diag(w_n) Z`` for each row ``w_n`` of ``weights``, in blocks of
    examples of bounded ``(examples, d, M)`` size."""
    batch = weights.shape[0]
    count, d = design.shape
    out = weights.new_empty(batch, d, d)
    step = max(1, _BLOCK_ELEMENTS // max(1, count * d))
    for start in range(0, batch, step):
        block = weights[start : start + step]
        scaled = (design.T[None] * block[:, None, :]).reshape(block.shape[0] * d, count)
        out[start : start + step] = (scaled @ design).reshape(block.shape[0], d, d)
    return out


# ---------------------------------------------------------------- graph-local


def local_plan(
    graph: FeatureGraph, k: int, limit: int = MAX_COALITIONS
) -> tuple[Tensor, SparseLinearMap, SparseLinearMap]:
    r"""Bivariate values of each feature's neighbourhood game.

    For feature ``i`` with ball ``B = N_k(i)`` (``m = |B|`` features, the
    rest at the baseline), and ``j`` in ``B - i``:

    .. math::
        E2^{(k)}[i, j] = \sum_{S \subseteq B \setminus i,\; j \in S}
        \frac{|S|!\,(m-|S|-1)!}{m!} \big(v(S \cup i) - v(S)\big)

    — Eq. (6) in the game restricted to ``B``, as L-Shapley restricts the
    Shapley value; pairs with ``j`` outside ``N_k(i)`` are not computed (0).
    Once ``k`` reaches the diameter of a connected graph it is the exact
    matrix. The univariate output is L-Shapley (Chen et al. Eq. 5) from the
    same rows.

    Returns:
        The coalitions ``(M, d)`` and two linear maps of their values: to the
        flattened ``(d * d)`` matrix (entry ``i * d + j``) and to the ``d``
        L-Shapley values. Refuses ``sum_i 2^|N_k(i)|`` above ``limit`` with the
        count, before enumerating.
    """
    check_neighbourhood_plan_size(graph, k, limit, f"BivariateShapley with graph and k={k}")
    return _local_plan_cached(graph, k)


@functools.lru_cache(maxsize=32)
def _local_plan_cached(
    graph: FeatureGraph, k: int
) -> tuple[Tensor, SparseLinearMap, SparseLinearMap]:
    n = graph.num_nodes
    column: dict[int, int] = {}
    pair_rows: list[int] = []
    pair_cols: list[int] = []
    pair_coeffs: list[float] = []
    uni_rows: list[int] = []
    uni_cols: list[int] = []
    uni_coeffs: list[float] = []
    for i in range(n):
        others = [node for node in graph.neighbourhood(i, k) if node != i]
        weights = shapley_weights(len(others) + 1)
        for subset in range(1 << len(others)):
            chosen = [others[b] for b in range(len(others)) if subset >> b & 1]
            without = sum(1 << node for node in chosen)
            weight = weights[len(chosen)]
            col_with = column.setdefault(without | (1 << i), len(column))
            col_without = column.setdefault(without, len(column))
            uni_rows += [i, i]
            uni_cols += [col_with, col_without]
            uni_coeffs += [weight, -weight]
            for j in chosen:
                pair_rows += [i * n + j, i * n + j]
                pair_cols += [col_with, col_without]
                pair_coeffs += [weight, -weight]
    coalitions = torch.from_numpy(masks_to_rows(list(column), n).copy())

    def linear(rows: list[int], cols: list[int], coeffs: list[float], size: int) -> SparseLinearMap:
        return SparseLinearMap(
            torch.tensor(rows, dtype=torch.long),
            torch.tensor(cols, dtype=torch.long),
            torch.tensor(coeffs, dtype=torch.float64),
            size,
        )

    return (
        coalitions,
        linear(pair_rows, pair_cols, pair_coeffs, n * n),
        linear(uni_rows, uni_cols, uni_coeffs, n),
    )


def local_support(graph: FeatureGraph, k: int) -> Tensor:
    """``(d, d)`` bool: the pairs ``(i, j)`` the graph-local variant computes,
    ``j`` in ``N_k(i)`` and ``j != i``. Pass it as ``support`` to
    :class:`~captum_graphshap.analysis.ExplanationGraph`."""
    support = graph.neighbourhoods(k).clone()
    support.fill_diagonal_(False)
    return support


def kernel_rows(n_samples: int) -> int:
    """Model rows of ``estimator="kernel"`` before deduplication: the samples
    (rounded up to even) and the 2 endpoints."""
    return n_samples + n_samples % 2 + 2


def permutation_rows(d: int, n_permutations: int) -> int:
    """Model rows of ``estimator="permutation"`` before deduplication."""
    return 2 + n_permutations * max(d - 1, 0)


# ------------------------------------------------------------------- as plans


def bivariate_exact_plan(d: int, device: torch.device) -> Plan:
    """All ``2^d`` coalitions; the estimator gives ``(matrix, shapley)``."""
    from .exact import all_coalitions

    coalitions = all_coalitions(d, device, method="BivariateShapley(estimator='exact')")
    return Plan(DenseCoalitions(coalitions), bivariate_from_all_coalitions, distinct=True)


def bivariate_permutation_plan(
    d: int,
    n_permutations: int,
    generator: torch.Generator | None,
    device: torch.device,
    budget: int | None = None,
) -> Plan:
    """The paper's Alg. 1 as a plan: permutations shared by the batch.

    With ``budget`` (distinct evaluations), permutations are added while
    their distinct prefixes fit it (:func:`~captum_graphshap.plans.permutations.filled_orderings`,
    at least ``n_permutations``): each stays uniform given the count, so
    the estimator stays unbiased.
    """
    if budget is not None and d >= 2:
        rank = filled_orderings(d, budget, False, generator, device, minimum=n_permutations)
    else:
        rank = permutation_ranks(1, d, n_permutations, False, generator, device)[0]
    return Plan(
        DenseCoalitions(permutation_prefixes(rank)),
        functools.partial(bivariate_from_permutations, rank=rank),
    )


def bivariate_kernel_plan(
    d: int,
    n_samples: int,
    generator: torch.Generator | None,
    device: torch.device,
    fill: bool = False,
) -> Plan:
    """The paper's Alg. 2 as a plan: the endpoints, then paired kernel draws.

    With ``fill`` the ``n_samples`` are distinct coalitions (``budget=``):
    pairs are drawn i.i.d. until ``n_samples / 2`` are distinct
    (:func:`~captum_graphshap.plans.paired_designs.filled_kernel_pairs`, at most
    :data:`FILL_DRAWS_PER_PAIR` draws a pair and ``MAX_FILL_DRAWS`` in all)
    and the fit runs on the draws, repeats included; the engine evaluates
    each distinct one once.
    """
    if fill and d >= 2:
        most = min(FILL_DRAWS_PER_PAIR * max(1, n_samples // 2), MAX_FILL_DRAWS)
        found, counts = filled_kernel_pairs(d, n_samples // 2, generator, device, most)
        drawn = found.repeat_interleave(counts.long(), dim=0)
        sampled = torch.stack([drawn, ~drawn], dim=1).reshape(-1, d)
    else:
        sampled = kernel_plan(d, n_samples, generator, device)
    ends = torch.zeros(2, d, dtype=torch.bool, device=device)
    ends[1] = True  # the empty and the full coalition, enforced by the constraint

    def estimate(values: Tensor) -> tuple[Tensor, Tensor]:
        return bivariate_from_kernel(sampled, values[:, 2:], values[:, 0], values[:, 1])

    return Plan(DenseCoalitions(torch.cat([ends, sampled])), estimate)


def bivariate_local_plan(graph: FeatureGraph, k: int) -> Plan:
    """The graph-local variant as a plan; the estimator gives ``(matrix, L-Shapley)``."""
    coalitions, pairs, single = local_plan(graph, k)
    d = single.num_outputs

    def estimate(values: Tensor) -> tuple[Tensor, Tensor]:
        return pairs.apply(values).view(-1, d, d), single.apply(values)

    return Plan(DenseCoalitions(coalitions), estimate, distinct=True)
