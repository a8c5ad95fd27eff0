r"""BayesSHAP (Slack, Hilgard, Singh and Lakkaraju, NeurIPS 2021) as docs/definitions.md pins it.

KernelSHAP as a Bayesian weighted linear regression of the game on the
members of sampled coalitions ``z``:

.. math::
    y(z) = v(z) - v(\emptyset) = \phi^\top z + \varepsilon, \quad
    \varepsilon \sim \mathcal N(0, \sigma^2 / w(z)), \quad
    \phi \mid \sigma^2 \sim \mathcal N(0, \sigma^2 I), \quad
    \sigma^2 \sim \text{Inv-}\chi^2(n_0 \to 0),

conditioned on the endpoint ``1^T phi = v(D) - v(empty)`` (efficiency; the
empty coalition is the intercept). The posterior is Normal-Inv-chi^2 and the
marginal of each ``phi_i`` a Student t, which gives analytic credible
intervals.

Three departures from the authors' release, all so that the intervals cover
the exact Shapley value at about their nominal rate:

- the weights ``w`` are the KernelSHAP kernel divided by the density the
  coalitions were drawn from, normalised to mean 1, so the unit prior weighs
  like one observation instead of dwarfing kernel weights of ``1e-5``;
- the endpoints are enforced exactly (the authors fit a free intercept);
- the t has ``n - (d - 1)`` degrees of freedom and ``s2`` divides the
  residual by them, as under the flat reference prior, instead of the
  conjugate prior's ``n`` (``n`` the observations, ``d - 1`` the free
  attributions): with the conjugate ``n`` the 95% intervals covered 0.91-0.92
  at 100-200 evaluations of a 10-feature game (``benchmarks/uncertainty.py``).

Coalitions are drawn from the KernelSHAP distribution itself (size ``s``
with probability proportional to ``1 / (s (d - s))``, members uniform given
the size), so the normalised weights are all 1. Only sufficient statistics
(``d x d`` per example) are kept: never an ``n x n`` weight matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, Plan
from ..plans.draws import distinct_ids
from ..plans.paired_designs import (
    filled_kernel_pairs,
    kernel_size_probabilities,
    sample_kernel_coalitions,
)
from .intervals import student_t_quantile

#: Focused sampling (the paper's Alg. 2): candidates drawn per selected row,
#: at most this many per example and round.
FOCUS_CANDIDATES_PER_ROW = 8
FOCUS_MAX_CANDIDATES = 4096
#: rounds after the initial half of the budget
FOCUS_ROUNDS = 4
#: softmax temperature, relative to the mean candidate variance (the paper's
#: absolute 1e-2 depends on the scale of the model's output)
FOCUS_TEMPERATURE = 0.5
#: precision of the prior ``phi ~ N(0, s2 / PRIOR_PRECISION)``, in units of one
#: row's (normalised) weight: weak, as with 0/1 designs a unit prior shrinks
#: the contrasts between features (each direction gets only ~2 per pair from
#: the sizes-1 and d-1 rows) and made the mean 2-10x less accurate than
#: paired KernelSHAP
PRIOR_PRECISION = 1e-3
#: ``max_samples=None`` with a ``target_width`` stops at this many coalitions
#: per example
DEFAULT_MAX_SAMPLES = 2**16

#: ``(example_index (R,), coalitions (R, d) bool) -> values (R,)``
RowEvaluator = Callable[[Tensor, Tensor], Tensor]


# ----------------------------------------------------------------- sampling
# ------------------------------------------------------------------ posterior
@dataclass
class DesignStatistics:
    """Sufficient statistics of each example's weighted regression.

    ``gram = sum w z z^T``, ``cross = sum w z y``, ``square = sum w y^2``,
    ``weight_sum = sum w`` and ``count`` rows, all per example: ``O(d^2)``
    memory whatever the number of samples.
    """

    gram: Tensor
    cross: Tensor
    square: Tensor
    weight_sum: Tensor
    count: Tensor

    @classmethod
    def zeros(
        cls, batch: int, d: int, dtype: torch.dtype, device: torch.device
    ) -> DesignStatistics:
        def make(*shape: int) -> Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(make(batch, d, d), make(batch, d), make(batch), make(batch), make(batch))

    def add(
        self,
        examples: Tensor,
        design: Tensor,
        targets: Tensor,
        weights: Tensor,
        draws: Tensor | None = None,
    ) -> None:
        """Add rows to some examples.

        Args:
            examples:
                ``(A,)`` which examples the rows belong to.
            design:
                ``(A, n, d)`` coalitions (bool or 0/1).
            targets:
                ``(A, n)`` ``v(z) - v(empty)``.
            weights:
                ``(A, n)``; 0 marks padding rows.
            draws:
                ``(A, n)`` how many draws each row stands for (a row drawn
                ``m`` times has weight ``m``); None: one each.
        """
        z = design.to(self.gram.dtype)
        weighted = z * weights[..., None]
        self.gram.index_add_(0, examples, weighted.transpose(1, 2) @ z)
        self.cross.index_add_(0, examples, (weighted * targets[..., None]).sum(dim=1))
        self.square.index_add_(0, examples, (weights * targets.square()).sum(dim=1))
        self.weight_sum.index_add_(0, examples, weights.sum(dim=1))
        rows = (weights > 0).to(self.count.dtype) if draws is None else draws.to(self.count.dtype)
        self.count.index_add_(0, examples, rows.sum(dim=1))


@dataclass(frozen=True)
class BayesPosterior:
    """The posterior of each example's attributions given the efficiency constraint.

    ``phi ~ t_dof(mean, s2 * scale)`` (a multivariate Student t); the credible
    interval of feature i at level c is
    ``mean_i ± t_dof((1 + c)/2) sqrt(s2 scale_ii)``.
    """

    mean: Tensor  # (N, d)
    scale: Tensor  # (N, d, d): V restricted to the plane sum(phi) = delta
    s2: Tensor  # (N,)
    dof: Tensor  # (N,): observations less the d - 1 free attributions (at least 1)
    count: Tensor | None = None  # (N,) observations; None: dof

    def standard_deviation(self) -> Tensor:
        """``(N, d)`` posterior scale of each attribution, before the t quantile."""
        variance = self.s2[:, None] * torch.diagonal(self.scale, dim1=1, dim2=2)
        return variance.clamp(min=0).sqrt()

    def half_width(self, confidence: float) -> Tensor:
        """``(N, d)`` half-widths of the central credible intervals at ``confidence``."""
        # One quantile per distinct dof (usually one for the whole batch).
        distinct, inverse = torch.unique(self.dof, return_inverse=True)
        quantiles = torch.tensor(
            [student_t_quantile(confidence, float(dof)) for dof in distinct.tolist()],
            dtype=self.mean.dtype,
            device=self.mean.device,
        )
        return quantiles[inverse][:, None] * self.standard_deviation()


def fit_posterior(stats: DesignStatistics, delta: Tensor) -> BayesPosterior:
    """Conjugate posterior with ``sum(phi) = delta`` enforced.

    Weights are normalised to mean 1 over each example's rows. The
    unconstrained posterior ``N(V b, s2 V)`` with ``V = (G + l I)^-1``
    (``l = PRIOR_PRECISION``) is
    conditioned on the constraint (a Gaussian restricted to a plane):
    ``mean = phi + V1 (delta - 1^T phi) / 1^T V 1`` and
    ``scale = V - V1 1^T V / 1^T V 1``; ``s2`` is the weighted residual sum
    of squares plus the prior term, over ``dof = n - (d - 1)`` (at least 1).
    """
    d = stats.cross.shape[1]
    count = stats.count.clamp(min=1)
    normalise = count / stats.weight_sum.clamp(min=torch.finfo(stats.gram.dtype).tiny)
    gram = stats.gram * normalise[:, None, None]
    cross = stats.cross * normalise[:, None]
    square = stats.square * normalise
    eye = torch.eye(d, dtype=gram.dtype, device=gram.device)
    covariance = torch.cholesky_inverse(torch.linalg.cholesky(gram + PRIOR_PRECISION * eye))
    unconstrained = (covariance @ cross[..., None])[..., 0]
    pull = covariance.sum(dim=2)  # V 1
    total = pull.sum(dim=1)  # 1^T V 1
    mean = unconstrained + pull * ((delta - unconstrained.sum(dim=1)) / total)[:, None]
    scale = covariance - pull[:, :, None] * pull[:, None, :] / total[:, None, None]
    fitted = (mean[:, None, :] @ gram @ mean[..., None])[:, 0, 0]
    residual = square - 2 * (mean * cross).sum(dim=1) + fitted
    prior = PRIOR_PRECISION * (mean.square().sum(dim=1) - delta.square() / d)
    dof = (count - (d - 1)).clamp(min=1)
    s2 = (residual + prior).clamp(min=0) / dof
    return BayesPosterior(mean, scale, s2, dof, count)


def perturbations_needed(
    posterior: BayesPosterior, confidence: float, target_width: float
) -> Tensor:
    """Estimated further coalitions per example until every half-width is at most
    ``target_width``.

    Half-widths shrink as ``1 / sqrt(n)`` (the posterior scale is the inverse
    of a sum over rows), so ``n * (width / target)^2`` rows in all are needed:
    the paper's "perturbations to go" without its kernel-mean factor, which
    normalised weights make 1. The t quantile also shrinks with ``n``, so
    this errs on the safe side. ``(N,)`` long, 0 where the target is met.
    """
    widest = posterior.half_width(confidence).amax(dim=1)
    count = posterior.dof if posterior.count is None else posterior.count
    total = count * (widest / target_width).square()
    return torch.ceil(total - count).clamp(min=0).to(torch.long)


# ------------------------------------------------------------------ sampling loop
@dataclass(frozen=True)
class BayesShapReport:
    """How a BayesSHAP run went, per example.

    Attributes:
        samples:
            ``(N,)`` coalitions sampled (the two endpoints, evaluated besides, not
            counted).
        stopped_by:
            Per example: ``"n_samples"`` (no ``target_width``), ``"target_width"``
            (every half-width reached it) or ``"max_samples"`` (the budget ran
            out first).
        max_half_width:
            ``(N,)`` the widest interval of each example.
        perturbations_needed:
            ``(N,)`` estimated further coalitions to reach ``target_width`` (0
            where it is met); None without ``target_width``.
    """

    samples: Tensor
    stopped_by: tuple[str, ...]
    max_half_width: Tensor
    perturbations_needed: Tensor | None


@dataclass(eq=False)
class BayesShapRounds:
    """BayesSHAP's adaptive sampling as a sequence of plans.

    Each round is a :class:`~captum_graphshap.engine.plan.Plan` of
    per-example coalitions, evaluated by the engine like every other plan;
    its estimator adds the rows to the sufficient statistics and returns the
    updated posterior. :meth:`next_plan` then says what to sample next (None:
    done), so a method is plan -> evaluate -> estimate, round after round::

        rounds = BayesShapRounds(v_empty, v_full, d, n_samples, confidence=0.95)
        plan = rounds.next_plan()
        while plan is not None:
            plan.estimator(evaluate(plan))
            plan = rounds.next_plan()
        posterior, report = rounds.result()

    Coalitions are drawn in complementary pairs (each draw from the
    KernelSHAP distribution followed by its complement, as PairedKernelShap),
    and each pair is one observation of the game's odd part:
    ``(v(z) - v(1 - z)) / 2 = phi^T (z - 1/2) + noise``. The even part
    carries no Shapley value; regressing it too would inflate the residual
    variance (intervals covering ~100%) and pull the mean. The posterior
    mean is then as accurate as paired KernelSHAP, the intervals near their
    nominal level, and the degrees of freedom are the pairs.

    Args:
        v_empty, v_full: ``(N,)`` values of the endpoints.
        n_samples: sampled coalitions per example, besides the endpoints.
        focused: draw half of them from the KernelSHAP distribution, the rest
            in ``FOCUS_ROUNDS`` rounds of the paper's Alg. 2: candidates from
            the same distribution, chosen with probability
            ``softmax(z^T V z / (T mean))``, the predictive variance of the
            current posterior (a pair's two members have the same). Rows keep
            their KernelSHAP weight, as in the paper.
        target_width: keep sampling, in rounds sized by
            :func:`perturbations_needed`, until every half-width of an
            example is at most this, or it has ``max_samples`` coalitions.
        fill: the first round's ``n_samples`` (or its focused share) count
            distinct coalitions, not draws (``budget=``): draws go on until
            that many are distinct
            (:func:`~captum_graphshap.plans.paired_designs.filled_kernel_pairs`),
            each pair weighted and counted as often as it was drawn, so the
            posterior is the one of those i.i.d. draws; once every pair has
            come up, the rest of the draws are added as multiplicities (free);
            the focused rounds likewise pick on until their pairs are
            distinct (:func:`_distinct_picks`).
    """

    v_empty: Tensor
    v_full: Tensor
    d: int
    n_samples: int
    _: KW_ONLY
    confidence: float
    focused: bool = False
    target_width: float | None = None
    max_samples: int | None = None
    generator: torch.Generator | None = None
    fill: bool = False

    def __post_init__(self) -> None:
        v_empty, d, n_samples, cap = self.v_empty, self.d, self.n_samples, self.max_samples
        self.delta = self.v_full - v_empty
        self.cap = cap if cap is not None else max(DEFAULT_MAX_SAMPLES, n_samples)
        batch = v_empty.shape[0]
        self.examples = torch.arange(batch, device=v_empty.device)
        self.stats = DesignStatistics.zeros(batch, d, v_empty.dtype, v_empty.device)
        self.posterior = _single_feature(self.delta) if d < 2 else None
        self.needed: Tensor | None = None
        self.stage = "first" if d >= 2 else "done"
        self.focus_round = 0
        # focused: a first round of at least d draws (the posterior that focuses the
        # rest needs them), never more than n_samples (then nothing is focused)
        self.first = min(n_samples, max(d, n_samples // 2)) if self.focused else n_samples

    # ---------------------------------------------------------------- plans
    def next_plan(self) -> Plan | None:
        """The next round's plan, or None when sampling is over."""
        batch = self.examples.shape[0]
        if self.stage == "first":
            self.stage = "focus" if self.focused else "width"
            first = torch.full((batch,), self.first)
            return self._plan(self.examples, first, focused=False, fill=self.fill)
        if self.stage == "focus":
            # in pairs, as _plan draws them (the first round: at least one)
            remaining = (self.n_samples - 2 * max(self.first // 2, 1)) // 2
            rounds = min(FOCUS_ROUNDS, remaining)
            if self.focus_round < rounds:
                index = self.focus_round
                self.focus_round += 1
                size = remaining // rounds + (1 if index < remaining % rounds else 0)
                sizes = torch.full((batch,), 2 * size)
                return self._plan(self.examples, sizes, focused=True, fill=self.fill)
            self.stage = "width"
        if self.stage == "width" and self.target_width is not None:
            assert self.posterior is not None
            # the statistics count pairs; plans count coalitions
            pairs = perturbations_needed(self.posterior, self.confidence, self.target_width)
            self.needed = 2 * pairs
            room = (self.cap - 2 * self.stats.count).to(torch.long)
            active = (self.needed > 0) & (room > 0)
            if bool(active.any()):
                minimum = torch.clamp(2 * self.stats.count.to(torch.long) // 8, min=2 * self.d)
                counts = torch.minimum(torch.maximum(self.needed, minimum), room)[active]
                return self._plan(self.examples[active], counts.cpu(), focused=self.focused)
        self.stage = "done"
        return None

    def _plan(self, examples: Tensor, counts: Tensor, focused: bool, fill: bool = False) -> Plan:
        """``counts`` coalitions per example, rounded down to pairs (at least one).

        The draws are shared by the examples (each takes a prefix of one
        draw), so an example's explanation does not depend on the others in
        its batch, in the first round (every round without ``target_width``
        or ``focused``). When a round draws at least as many pairs as there
        are distinct ones (:func:`enumerable_pairs`), it draws how often each
        distinct pair comes up instead of the pairs themselves: the same
        distribution, with memory for the distinct pairs only, whatever the
        budget.
        """
        d, device, dtype = self.d, self.v_empty.device, self.v_empty.dtype
        pair_counts = torch.clamp(counts.to(device) // 2, min=1)
        pairs = int(pair_counts.max())
        draws: Tensor | None = None
        if focused and self.posterior is not None:
            # Alg. 2: pairs chosen by predictive variance; with fill, picked on until distinct
            picks = FOCUS_FILL_PICKS_PER_PAIR * pairs if fill else pairs
            candidates, chosen = _focused_picks(
                self.posterior, examples, pairs, self.generator, picks
            )
            if fill:
                drawn, draws = _distinct_picks(candidates, chosen, pairs)
                drawn, draws = drawn.to(device), draws.to(device=device, dtype=dtype)
                valid = draws > 0
            else:
                drawn = candidates.gather(1, chosen[..., None].expand(-1, -1, d)).to(device)
                valid = torch.arange(pairs, device=device)[None, :] < pair_counts[:, None]
        elif fill:
            shared, multiplicity = filled_draws(d, pairs, self.generator, device, dtype)
            drawn = shared.expand(len(examples), *shared.shape)
            draws = multiplicity.expand(len(examples), -1)
            valid = draws > 0
        elif pairs >= enumerable_pairs(d):
            canonical, probability = canonical_pairs(d, device)
            drawn = canonical.expand(len(examples), *canonical.shape)
            draws = pair_multiplicities(pair_counts, probability.to(dtype), self.generator)
            valid = draws > 0
        else:
            shared = sample_kernel_coalitions((pairs,), d, self.generator).to(device)
            drawn = shared.expand(len(examples), pairs, d)
            valid = torch.arange(pairs, device=device)[None, :] < pair_counts[:, None]
        rows = torch.stack([drawn, ~drawn], dim=2)[valid].reshape(-1, d)  # (2R, d)
        width = drawn.shape[1]
        rows_example = examples[:, None].expand(-1, width)[valid].repeat_interleave(2)

        def estimate(values: Tensor) -> BayesPosterior:
            pair_values = values.to(dtype).view(-1, 2)
            targets = torch.zeros(len(examples), width, dtype=dtype, device=device)
            targets[valid] = (pair_values[:, 0] - pair_values[:, 1]) / 2
            weights = valid.to(dtype) if draws is None else draws
            self.stats.add(examples, drawn.to(dtype) - 0.5, targets, weights, draws)
            self.posterior = fit_posterior(self.stats, self.delta)
            return self.posterior

        return Plan(DenseCoalitions(rows), estimate, rows_example)

    # ---------------------------------------------------------------- result
    def result(self) -> tuple[BayesPosterior, BayesShapReport]:
        """The final posterior and the report of how sampling went."""
        posterior = self.posterior
        assert posterior is not None
        batch = self.examples.shape[0]
        needed = None
        if self.target_width is not None and self.d >= 2:
            needed = 2 * perturbations_needed(posterior, self.confidence, self.target_width)
        widest = (
            posterior.half_width(self.confidence).amax(dim=1)
            if self.d >= 2
            else self.delta.new_zeros(batch)
        )
        if self.target_width is None:
            stopped = ("n_samples",) * batch
        else:
            stopped = tuple(
                "target_width" if met else "max_samples"
                for met in (widest <= self.target_width).tolist()
            )
        report = BayesShapReport(
            samples=2 * self.stats.count.to(torch.long),
            stopped_by=stopped,
            max_half_width=widest,
            perturbations_needed=needed,
        )
        return posterior, report


def run_bayes_shap(
    evaluate: RowEvaluator,
    v_empty: Tensor,
    v_full: Tensor,
    d: int,
    n_samples: int,
    *,
    confidence: float,
    focused: bool = False,
    target_width: float | None = None,
    max_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[BayesPosterior, BayesShapReport]:
    """BayesSHAP for a batch of games: :class:`BayesShapRounds` with a row evaluator.

    Args:
        evaluate: values of ``(example, coalition)`` rows, e.g. a game's
            ``evaluate_rows``.
        v_empty, v_full, d, n_samples: as :class:`BayesShapRounds`.
        confidence, focused, target_width, max_samples, generator: as
            :class:`BayesShapRounds`.
    """
    rounds = BayesShapRounds(
        v_empty,
        v_full,
        d,
        n_samples,
        confidence=confidence,
        focused=focused,
        target_width=target_width,
        max_samples=max_samples,
        generator=generator,
    )
    plan = rounds.next_plan()
    while plan is not None:
        assert plan.example_index is not None
        plan.estimator(evaluate(plan.example_index, plan.coalitions.dense()))
        plan = rounds.next_plan()
    return rounds.result()


#: a round drawing this many pairs or more, with at most this many distinct ones,
#: draws multiplicities of the distinct pairs instead (memory bounded by them)
MAX_ENUMERATED_PAIRS = 2**12


def enumerable_pairs(d: int) -> int | float:
    """Distinct complementary pairs besides the endpoints, ``2^(d-1) - 1``, when they
    are few enough to enumerate (:data:`MAX_ENUMERATED_PAIRS`); infinity otherwise."""
    count = 2 ** (d - 1) - 1 if d <= 30 else math.inf
    return count if count <= MAX_ENUMERATED_PAIRS else math.inf


def filled_draws(
    d: int, pairs: int, generator: torch.Generator | None, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``(P, d)`` distinct pairs of ``pairs`` or more i.i.d. kernel draws and ``(P,)`` counts.

    Draws until ``pairs`` are distinct
    (:func:`~captum_graphshap.plans.paired_designs.filled_kernel_pairs`); when that
    exhausts every pair in fewer than ``pairs`` draws, the rest are
    drawn as multiplicities (:func:`pair_multiplicities`): they need no
    further evaluation.
    """
    found, counts = filled_kernel_pairs(d, pairs, generator, device)
    left = pairs - int(counts.sum())
    if left <= 0 or found.shape[0] < enumerable_pairs(d):
        return found, counts.to(dtype)
    canonical, probability = canonical_pairs(d, device)
    extra = pair_multiplicities(
        torch.tensor([left], device=device), probability.to(torch.float64), generator
    )[0]
    bits = torch.ones(d, dtype=torch.long, device=device) << torch.arange(d, device=device)
    found_codes = (found.long() * bits).sum(dim=1)
    order = torch.argsort(found_codes)
    at = torch.searchsorted(found_codes[order], (canonical.long() * bits).sum(dim=1))
    return canonical, (counts[order][at] + extra).to(dtype)


def canonical_pairs(d: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(K, d)`` one coalition of each complementary pair (the one holding feature 0,
    not the full one) and ``(K,)`` the pair's probability under the KernelSHAP draw."""
    codes = torch.arange(2 ** (d - 1), 2**d - 1, device=device)  # bit d-1 set, not all
    members = (codes[:, None] >> torch.arange(d - 1, -1, -1, device=device)) & 1 == 1
    sizes = members.sum(dim=1)
    by_size = kernel_size_probabilities(d).to(device)  # index s - 1
    combinations = torch.tensor([math.comb(d, int(s)) for s in range(1, d)], device=device)
    single = by_size / combinations.to(by_size.dtype)  # P(z) for one coalition of size s
    # a pair is drawn as either member: P(z) + P(D - z), equal by the kernel's symmetry
    probability = single[sizes - 1] + single[d - sizes - 1]
    return members, probability / probability.sum()


def pair_multiplicities(
    counts: Tensor, probability: Tensor, generator: torch.Generator | None
) -> Tensor:
    """``(A, K)`` how often each of ``K`` pairs comes up in ``counts[a]`` i.i.d. draws.

    A multinomial drawn as conditional binomials, so it costs ``O(A K)``
    whatever the counts (``10^12`` draws included); examples with equal
    counts share one draw (batch invariance).
    """
    distinct, inverse = torch.unique(counts, return_inverse=True)
    device = generator.device if generator is not None else torch.device("cpu")
    left = distinct.to(device=device, dtype=torch.float64)
    p = probability.double().tolist()  # K numbers: the loop below needs no device sync
    out = torch.zeros(len(distinct), len(p), dtype=torch.float64, device=device)
    rest = 1.0
    for k in range(len(p) - 1):
        share = min(max(p[k] / rest, 0.0), 1.0) if rest > 0 else 0.0
        drawn = torch.binomial(left, torch.full_like(left, share), generator=generator)
        out[:, k] = drawn
        left = left - drawn
        rest -= p[k]
    out[:, -1] = left
    return out.to(counts.device)[inverse].to(probability.dtype)


def _focused_picks(
    posterior: BayesPosterior,
    examples: Tensor,
    width: int,
    generator: torch.Generator | None,
    picks_count: int,
) -> tuple[Tensor, Tensor]:
    """The candidates ``(A, C, d)`` of a focused round of ``width`` pairs (Alg. 2) and
    ``picks_count`` picks ``(A, picks)`` among them, by predictive variance."""
    d = posterior.mean.shape[1]
    candidates_count = min(FOCUS_MAX_CANDIDATES, max(FOCUS_CANDIDATES_PER_ROW * width, 2 * d))
    # candidates and the uniforms that pick among them are shared by the batch
    # (inverse-CDF picks per example): an example's draws do not depend on the others
    shared = sample_kernel_coalitions((1, candidates_count), d, generator)
    candidates = shared.expand(len(examples), -1, -1)
    scale = posterior.scale[examples.to(posterior.scale.device)].to(candidates.device)
    z = candidates.to(scale.dtype)
    spread = torch.einsum("acd,ade,ace->ac", z, scale, z)  # z^T V z, per candidate
    logits = spread / (FOCUS_TEMPERATURE * spread.mean(dim=1, keepdim=True).clamp(min=1e-300))
    cumulative = torch.softmax(logits, dim=1).cumsum(dim=1)
    source = generator.device if generator is not None else candidates.device
    picks = torch.rand(1, picks_count, generator=generator, device=source, dtype=cumulative.dtype)
    picks = picks.to(cumulative.device) * cumulative[:, -1:]
    chosen = torch.searchsorted(cumulative, picks).clamp(max=candidates_count - 1)
    return candidates, chosen


#: a filled focused round draws at most this many picks per pair it needs
FOCUS_FILL_PICKS_PER_PAIR = 32


def _distinct_picks(candidates: Tensor, chosen: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """A filled focused round of ``width`` distinct pairs: ``(A, width, d)``, draws ``(A, width)``.

    The picks of :func:`_focused_picks` (up to :data:`FOCUS_FILL_PICKS_PER_PAIR`
    ``width``, shared uniforms) are taken until an example has ``width``
    distinct pairs, or the candidates run out; each pair is counted as often
    as it was picked (0: padding).
    """
    batch, picks = chosen.shape
    d = candidates.shape[2]
    pool = candidates[0]
    canonical = torch.where(pool[:, :1], pool, ~pool)  # a pair and its complement are one
    pair_id = distinct_ids(canonical)[chosen]  # (A, picks)
    ids = int(pair_id.max()) + 1
    position = torch.arange(picks, device=chosen.device).expand(batch, -1)
    flat = pair_id + ids * torch.arange(batch, device=chosen.device)[:, None]
    first = torch.full((batch * ids,), picks, dtype=torch.long, device=chosen.device)
    first = first.scatter_reduce(0, flat.reshape(-1), position.reshape(-1), "amin")
    new = first[flat] == position  # (A, picks): the pick brings a new pair
    # stop at the pick that brings the width-th new pair (all picks when it never comes)
    enough = new.cumsum(dim=1) >= width
    stop = torch.where(enough.any(dim=1), enough.to(torch.long).argmax(dim=1), picks - 1)
    kept = position <= stop[:, None]
    slot = (new.cumsum(dim=1) - 1).clamp(min=0)  # a new pair's rank among the example's
    draws = torch.zeros(batch, width, dtype=torch.float64, device=chosen.device)
    slot_of_id = torch.full((batch * ids,), -1, dtype=torch.long, device=chosen.device)
    firsts = new & kept
    slot_of_id[flat[firsts]] = slot[firsts]
    target = slot_of_id[flat[kept]]
    draws.view(-1).index_add_(
        0,
        target + width * torch.arange(batch, device=chosen.device)[:, None].expand(-1, picks)[kept],
        torch.ones_like(target, dtype=torch.float64),
    )
    rows = torch.zeros(batch, width, d, dtype=torch.bool, device=chosen.device)
    example = torch.arange(batch, device=chosen.device)[:, None].expand(-1, picks)
    rows[example[firsts], slot[firsts]] = canonical[chosen[firsts]]
    return rows, draws


def _single_feature(delta: Tensor) -> BayesPosterior:
    """One feature: efficiency alone gives ``phi = v(D) - v(empty)``, exactly."""
    batch = delta.shape[0]
    return BayesPosterior(
        mean=delta[:, None].clone(),
        scale=delta.new_zeros(batch, 1, 1),
        s2=delta.new_zeros(batch),
        dof=delta.new_ones(batch),
    )
