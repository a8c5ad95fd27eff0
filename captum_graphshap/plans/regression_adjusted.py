r"""Regression-adjusted Shapley estimation with a cubic surrogate fitted from the samples.

The plan (:func:`cubic_kernel_plan`) is paired and size-stratified
(:func:`~captum_graphshap.plans.stratified.stratified_paired_coalitions`):
each sampled coalition comes with its complement, sizes with few coalitions
are enumerated, and no budget is spent on duplicates.

The estimator splits each pair's values into an odd part
``u(S) = (v(S) - v(D - S)) / 2`` and an even part ``(v(S) + v(D - S)) / 2``.
Only the odd part carries Shapley value, and paired KernelSHAP is the
kernel-weighted least-squares fit of ``u`` by the linear parities
``s_i = 2 z_i - 1`` (so it is exact for games of order two). Here the basis
also holds the parities of the triples whose pairs interact most, chosen from
the even part's pairwise coefficients (free: the same samples) or from SHEAR's
cross-contributions; how many is chosen per example by cross-validating the
fit over folds of the pairs (none, when triples do not predict held-out
pairs better). The estimate is the closed-form Shapley value of the
fitted :class:`~captum_graphshap.plans.surrogates.OddCubicSurrogate`.

Why this is regression adjustment: the linear parities are in the basis, so
the kernel-weighted residual ``v - g`` is orthogonal to them and its
KernelSHAP estimate is 0; ``phi(g)`` is therefore KernelSHAP's estimate,
``phi(g) + KernelSHAP(v - g)``, with the residual's error only, and it is
exact (like KernelSHAP) once every coalition is sampled. On smooth models the
order-three parities carry most of what pairing leaves, so the error drops by
3-20x at 256-4,096 evaluations (``benchmarks/estimators.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from .odd_fit import select_and_fit
from .surrogates import OddCubicSurrogate, select_triples
from .walsh_design import identified_pairs
from .walsh_kernel import cholesky_solve, pseudo_inverse

#: Triples are fitted only when there are at least this many pairs per feature:
#: below, the linear fit needs every sample (measurements: benchmarks/README.md,
#: "Constants and their measurements").
MIN_PAIRS_PER_FEATURE = 6
#: Parameters (linear + triples) as a share of the pairs.
PARAMETERS_PER_PAIR = 0.35
#: The even part's pairwise fit (the free triple selection) up to this many features.
MAX_PAIRWISE_FIT_FEATURES = 64
#: How many triples to fit is chosen per example by cross-validation among
#: these multiples of :func:`triple_count`, with :data:`SELECTION_FOLDS` folds
#: of the pairs, while there are at most :data:`SELECTION_MAX_PAIRS_PER_FEATURE`
#: pairs per feature (beyond, the fit is well determined and the choice
#: changes nothing measurable). Measurements: benchmarks/README.md,
#: "Constants and their measurements".
TRIPLE_FRACTIONS = (0.0, 0.5, 1.0, 1.5)
SELECTION_FOLDS = 5
SELECTION_MAX_PAIRS_PER_FEATURE = 64
#: ... and while the largest candidate fit has at most this many parameters:
#: the selection costs 20 fits, each O(N P p^2), and its gains are at small
#: ``p`` (benchmarks/README.md, "Constants and their measurements").
SELECTION_MAX_PARAMETERS = 320
#: Above this many features (where ``estimator="auto"`` leaves the Walsh-basis
#: process for this fit) the count is not cross-validated: it is a quarter of
#: :func:`triple_count` below :data:`WIDE_HALF_PAIRS_PER_FEATURE` pairs per
#: feature and half of it from there. On five d = 49 models its error was
#: 0.98-1.08x the cross-validated count's on a digits CNN over 49 patches
#: (ReLU and SiLU, 1,024-4,096 evaluations) and 0.90-1.01x on three MLPs (1,024
#: and 2,048), and 1.3-5x below the kernel fit's; the selection cost 20 fits
#: (``benchmarks/wide_cubic.py``, benchmarks/README.md). Triples ranked by
#: SHEAR's cross-contributions keep the selection: without it SHEAR's error on
#: the ReLU CNN rose 1.9x at 1,024 evaluations and 1.3x at 2,048.
WIDE_FEATURES = 32
WIDE_HALF_PAIRS_PER_FEATURE = 16


def triple_count(d: int, pairs: int, informed: bool = False) -> int:
    """Triples the cubic surrogate fits with ``pairs`` sampled pairs.

    Chosen from the samples' own even part (``informed`` False) they need
    ``6 d`` pairs or more; chosen from derivatives (``informed``), any
    pairs left after the linear terms serve.
    """
    if d < 3 or (not informed and pairs < MIN_PAIRS_PER_FEATURE * d):
        return 0
    return max(0, min(d * (d - 1) * (d - 2) // 6, int(PARAMETERS_PER_PAIR * pairs) - d))


def fitted_triple_count(d: int, pairs: int, informed: bool = False) -> int:
    """Triples :func:`cubic_kernel_plan` fits by default: :func:`triple_count`, a
    quarter or half of it above :data:`WIDE_FEATURES` features where the samples'
    even part ranks them (not where SHEAR's cross-contributions do, ``informed``)."""
    count = triple_count(d, pairs, informed)
    if d <= WIDE_FEATURES or informed:
        return count
    return count // 4 if pairs < WIDE_HALF_PAIRS_PER_FEATURE * d else count // 2


def cubic_kernel_plan(
    num_features: int,
    pairs: int,
    generator: torch.Generator | None,
    device: torch.device,
    *,
    triples: int | None = None,
    strength: Tensor | None = None,
) -> Plan:
    """Shared plan: the endpoints, ``pairs`` stratified coalitions, then their complements.

    Args:
        num_features: ``d >= 2``.
        pairs: sampled complementary pairs (``2 pairs + 2`` evaluations).
        triples: triples in the surrogate; None: :func:`fitted_triple_count`.
        strength: ``(N, d, d)`` interaction scores choosing the triples
            (SHEAR's cross-contributions); None: the even part's pairwise fit.

    The estimator maps ``(N, 2 + 2 pairs)`` values to ``(N, d)``.
    """
    d = num_features
    # drawn again while fewer than 2 d pairs leave a direction of the linear fit unseen:
    # there the fit splits it by least norm (d = 8 and 8 pairs did in two draws of four,
    # 0.18-0.58 relative error on an additive game); no draw of 2 d or more failed
    sampled, weights = identified_pairs(d, pairs, generator, device, check_below=2 * d)
    if triples is None:
        count = fitted_triple_count(d, sampled.shape[0], informed=strength is not None)
    else:
        count = triples
    endpoints = torch.zeros(2, d, dtype=torch.bool, device=device)
    endpoints[1] = True
    rows = torch.cat([endpoints, sampled, ~sampled])
    solvers: list[PairwiseSolver] = []
    parameters = 1 + d * (d - 1) // 2

    def estimate(values: Tensor) -> Tensor:
        solver = None
        if count > 0 and strength is None and sampled.shape[0] < parameters:
            # the pairs' kernel is the plan's: factored for its first batch only
            if not solvers:
                solvers.append(PairwiseSolver.of(sampled, weights))
            solver = solvers[0]
        return cubic_shapley(sampled, weights, values, count, strength, solver)

    return Plan(DenseCoalitions(rows), estimate, distinct=True)


def cubic_shapley(
    sampled: Tensor,
    weights: Tensor,
    values: Tensor,
    triples: int,
    strength: Tensor | None = None,
    pairwise: PairwiseSolver | None = None,
) -> Tensor:
    """``(N, d)`` from the values ``(N, 2 + 2P)`` of :func:`cubic_kernel_plan`'s rows.

    ``pairwise``: the :class:`PairwiseSolver` of these pairs, when the caller
    keeps one (it depends on the pairs only).
    """
    pairs = sampled.shape[0]
    empty, full = values[:, 0], values[:, 1]
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    odd = (inside - outside) / 2
    d = sampled.shape[1]
    total = (full - empty) / 2
    largest = d + int(max(TRIPLE_FRACTIONS) * triples)
    select = (
        triples > 0
        and (d <= WIDE_FEATURES or strength is not None)
        and pairs <= SELECTION_MAX_PAIRS_PER_FEATURE * d
        and largest <= SELECTION_MAX_PARAMETERS
    )
    counts = (
        sorted({min(d * (d - 1) * (d - 2) // 6, int(f * triples)) for f in TRIPLE_FRACTIONS})
        if select
        else [triples]
    )
    # best first: a prefix of the ranking is the best k
    even = (inside + outside) / 2
    ranked = ranked_triples(sampled, weights, even, counts[-1], strength, pairwise)
    counts = sorted({min(k, ranked.shape[1]) for k in counts})
    # every count's fit on every fold from per-fold Grams (plans/odd_fit.py)
    coefficients, _ = select_and_fit(sampled, weights, odd, total, ranked, counts, SELECTION_FOLDS)
    fitted = ranked[:, : counts[-1]]
    return OddCubicSurrogate(coefficients[:, :d], coefficients[:, d:], fitted).shapley()


def ranked_triples(
    sampled: Tensor,
    weights: Tensor,
    even: Tensor,
    count: int,
    strength: Tensor | None,
    pairwise: PairwiseSolver | None = None,
) -> Tensor:
    """``(N, k, 3)``, ``k <= count``: the most interacting triples, best first.

    Scored by ``strength`` (SHEAR's cross-contributions) or, without it and
    up to :data:`MAX_PAIRWISE_FIT_FEATURES` features, by the even part's
    pairwise fit (:func:`even_pairwise`); none when ``count`` is 0 or
    nothing scores them.
    """
    d = sampled.shape[1]
    if count > 0 and strength is None and d <= MAX_PAIRWISE_FIT_FEATURES:
        strength = even_pairwise(sampled, weights, even, pairwise)
    if count <= 0 or strength is None:
        return even.new_zeros(even.shape[0], 0, 3, dtype=torch.long)
    return select_triples(strength, count)


def held_out_error(
    sampled: Tensor, weights: Tensor, odd: Tensor, total: Tensor, triples: Tensor
) -> Tensor:
    """``(N,)`` kernel-weighted squared error of the odd fit on each held-out fold."""
    fold = torch.arange(sampled.shape[0], device=sampled.device) % SELECTION_FOLDS
    error = odd.new_zeros(odd.shape[0])
    for k in range(SELECTION_FOLDS):
        held = fold == k
        if not bool(held.any()) or bool(held.all()):
            continue
        surrogate = fit_odd_surrogate(sampled[~held], weights[~held], odd[:, ~held], total, triples)
        residual = odd[:, held] - surrogate.values(sampled[held])
        error += (residual.square() * weights[held].to(odd.dtype)).sum(dim=1)
    return error


def fit_odd_surrogate(
    sampled: Tensor,
    weights: Tensor,
    odd: Tensor,
    total: Tensor,
    triples: Tensor,
    tables: Tensor | None = None,
    every_targets: Tensor | None = None,
) -> OddCubicSurrogate:
    """Kernel-weighted least squares of the odd values with ``sum f = u(D)`` enforced.

    Args:
        sampled: ``(P, d)`` bool, one coalition of each pair.
        weights: ``(P,)`` kernel weights.
        odd: ``(N, P)`` ``(v(S) - v(D - S)) / 2``.
        total: ``(N,)`` ``(v(D) - v(empty)) / 2``: at ``s = 1`` every parity is 1.
        triples: ``(N, k, 3)``.
        tables: ``(1, 2^d)`` Walsh table of these pairs' weights when the caller
            has it (:func:`~captum_graphshap.plans.odd_fit.walsh_tables`).
        every_targets: ``(N, d + C(d, 3))`` targets of every column on these
            pairs when the caller has them
            (:func:`~captum_graphshap.plans.odd_fit.every_column_targets`).
    """
    d = sampled.shape[1]
    # Walsh-table or streamed Gram and one Cholesky (pinv where rank-deficient)
    coefficients, _ = select_and_fit(
        sampled, weights, odd, total, triples, [triples.shape[1]], 1, tables, every_targets
    )
    return OddCubicSurrogate(coefficients[:, :d], coefficients[:, d:], triples)


def even_pairwise(
    sampled: Tensor, weights: Tensor, even: Tensor, solver: PairwiseSolver | None = None
) -> Tensor:
    """``(N, d, d)`` pairwise coefficients of the even part ``c + sum g_ij s_i s_j``.

    A weighted minimum-norm least-squares fit, used only to rank interactions,
    so its accuracy matters little. With more parameters (``1 + d (d - 1) / 2``)
    than pairs it is solved in the pairs' dimension (:class:`PairwiseSolver`;
    ``solver`` when the caller keeps one for these pairs), never forming the
    design's ``P^2 d^2 / 2`` product: at ``d = 49`` and 511 pairs that product
    was most of the cubic fit's time.
    """
    dtype = even.dtype
    d = sampled.shape[1]
    upper = torch.triu_indices(d, d, 1, device=sampled.device)
    if 1 + d * (d - 1) // 2 > sampled.shape[0]:
        if solver is None:
            solver = PairwiseSolver.of(sampled, weights, dtype)
        coefficients = solver.coefficients(even)
    else:
        # the pair parities gathered as rows of s^T (contiguous), then transposed
        columns = (2 * sampled.to(dtype) - 1).T.contiguous()
        parities = columns[upper[0]] * columns[upper[1]]
        design = torch.cat([torch.ones_like(columns[:1]), parities], dim=0).T
        root = weights.to(dtype).sqrt()
        scaled = design * root[:, None]
        # (targets X) pinv(X'X)': the (N, P) targets meet the design once. The
        # pseudo-inverse by a certified Cholesky factor where no direction is null (the
        # eigendecomposition otherwise): torch.linalg.pinv's eigendecomposition took 66
        # of the default's ~150 ms at d = 32 and 1,024 evaluations; 13.5 ms now, equal
        # to 3e-13 of its largest entry
        inverse, _ = pseudo_inverse(scaled.T @ scaled)
        solution = ((even * root) @ scaled) @ inverse
        coefficients = solution[:, 1:]
    matrix = coefficients.new_zeros(even.shape[0], d, d)
    matrix[:, upper[0], upper[1]] = coefficients
    return matrix + matrix.transpose(1, 2)


@dataclass(frozen=True)
class PairwiseSolver:
    """:func:`even_pairwise`'s minimum-norm fit when the pairs ``P`` are fewer than the
    parameters: ``g = X' (X X')^+ W^(1/2) e``, solved in the pairs' dimension.

    The kernel ``X X'`` has a closed form,
    ``sum_{i<j} s_pi s_pj s_qi s_qj = ((s_p . s_q)^2 - d) / 2`` (each product of
    signs squares to one), so building it costs ``P^2 d`` and factoring it
    ``P^3 / 3``; a plan does both once for every batch (:meth:`of`), in float32
    (its coefficients only rank triples). Each batch then costs two triangular
    solves and one product with the pair parities.
    """

    root: Tensor  # (P,) sqrt of the weights
    factor: Tensor  # (P, P) the kernel's lower Cholesky factor, or its pseudo-inverse
    cholesky: bool
    parities: Tensor  # (d (d - 1) / 2, P): s_i s_j for i < j

    @staticmethod
    def of(sampled: Tensor, weights: Tensor, dtype: torch.dtype = torch.float32) -> PairwiseSolver:
        """The solver of these pairs, in ``dtype`` (float32 where the coefficients
        only rank triples: half the time of float64). A kernel float32 cannot
        factor is factored, or pseudo-inverted, in float64."""
        d = sampled.shape[1]
        s = 2 * sampled.to(dtype) - 1
        root = weights.to(dtype).sqrt()
        kernel = (1 + ((s @ s.T).square() - d) / 2) * root[:, None] * root[None, :]
        factor, info = torch.linalg.cholesky_ex(kernel)
        cholesky = not bool(info.any())  # one read-back per plan
        if not cholesky and dtype != torch.float64:
            return PairwiseSolver.of(sampled, weights, torch.float64)
        if not cholesky:  # repeated pairs, say: the pseudo-inverse
            factor, _ = pseudo_inverse(kernel)
        upper = torch.triu_indices(d, d, 1, device=sampled.device)
        columns = s.T.contiguous()
        parities = columns.index_select(0, upper[0])
        parities *= columns.index_select(0, upper[1])
        return PairwiseSolver(root, factor, cholesky, parities)

    def coefficients(self, even: Tensor) -> Tensor:
        """``(N, d (d - 1) / 2)`` the pairwise coefficients of ``even`` ``(N, P)``."""
        scaled = (even.to(self.root.dtype) * self.root).T  # (P, N)
        if self.cholesky:
            alpha = cholesky_solve(scaled, self.factor)
        else:
            alpha = self.factor @ scaled
        return ((alpha.T * self.root) @ self.parities.mT).to(even.dtype)


def cubic_predicts_better(
    sampled: Tensor, weights: Tensor, values: Tensor, fitted: Tensor, rival: Tensor
) -> Tensor:
    """``(N,)`` bool: where the cubic surrogate fitted on the pairs ``fitted`` predicts
    the odd part of the other pairs better than ``rival`` ``(N, P')`` does
    (kernel-weighted squared error over those ``P' = P - len(fitted)`` pairs).

    ``values`` ``(N, 2 + 2P)`` as :func:`cubic_shapley` reads them. Both
    surrogates see the same pairs, so the comparison is an honest held-out one:
    :func:`~captum_graphshap.plans.walsh_gp.adjusted_posterior` keeps the
    process's surrogate only where it predicts unseen coalitions better.
    """
    pairs = sampled.shape[0]
    inside, outside = values[:, 2 : 2 + pairs], values[:, 2 + pairs :]
    odd, even = (inside - outside) / 2, (inside + outside) / 2
    others = torch.ones(pairs, dtype=torch.bool, device=sampled.device)
    others[fitted] = False
    inner, weight = sampled[fitted], weights[fitted]
    count = triple_count(inner.shape[1], len(fitted))
    triples = ranked_triples(inner, weight, even[:, fitted], count, None)
    total = (values[:, 1] - values[:, 0]) / 2
    surrogate = fit_odd_surrogate(inner, weight, odd[:, fitted], total, triples)
    held = weights[others].to(odd.dtype)
    cubic_error = ((odd[:, others] - surrogate.values(sampled[others])).square() * held).sum(1)
    rival_error = ((odd[:, others] - rival).square() * held).sum(1)
    return cubic_error < rival_error
