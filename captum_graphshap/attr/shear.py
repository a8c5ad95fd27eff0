"""SHEAR: Shapley values over each feature's contributive cooperators."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import captum.attr as captum_attr
import torch
from torch import Tensor

from .._compat import BaselineType, TargetType
from ..engine.coalition_game import CoalitionGame
from ..engine.derivatives import (
    CROSS_CONTRIBUTIONS,
    check_floating,
    cross_contribution_cost,
    cross_contributions,
)
from ..plans.cross_contributions import select_cooperators
from ..plans.limits import MAX_COALITIONS, check_choice, check_plan_size
from ..plans.regression_adjusted import cubic_kernel_plan
from ..plans.regression_mc import regression_mc_plan
from ..plans.shear import shear_plan
from ._options import check_count, check_flag, check_generator
from .base import Options, Outcome, SampledAttribution, evaluate_plan
from .budget import check_budget
from .guards import check_attribution_scale
from .renames import Renames

#: ``estimator=`` choices of :class:`Shear`
SHEAR_ESTIMATORS: tuple[str, ...] = ("cubic", "regression_mc", "paper")


@dataclasses.dataclass(frozen=True)
class ShearOptions(Options):
    """Options of :class:`Shear`.

    Args:
        n_samples: ``N``, model evaluations per feature: a power of two
            >= 4 (default 16). ``log2(N/2)`` cooperators per feature;
            ``N >= 2^d`` is exact Shapley.
        budget: model evaluations per example instead of ``n_samples``, the
            cross-contributions included as forward equivalents (``4 d`` for
            the Hessian's ``d`` HVPs, ``3 (d + 1)`` for the gradient form):
            the largest ``N`` whose ``d N`` rows and derivatives fit. Without
            ``target``, a model's ``K`` outputs each have their own
            derivatives and rows: each gets ``budget // K``.
        generator: ``torch.Generator`` for the random non-cooperators; the
            same seed gives the same attributions.
        antithetic: pair each subset of cooperators with its complement and
            give the pair complementary non-cooperators (the paper's
            antithetical sampling).
        cross_contribution: ``"auto"`` (default), ``"hessian"`` or
            ``"gradient"``; see :meth:`Shear.cross_contributions`.
        estimator: ``"cubic"`` (default; ``"regression"`` before, still
            accepted for one release with a warning), the estimator of
            ``PairedKernelShap(estimator="cubic")``: the ``d N`` evaluations are
            complementary pairs stratified by size, and the estimate is the
            Shapley value of a regression-adjusted surrogate whose triples
            are those of strongest cross-contribution (see
            ``plans/regression_adjusted.py``); ``"regression_mc"``: the
            same surrogate (triples from ``eta``) fitted out of fold and
            corrected by the sampled residual, which makes the estimate
            unbiased (``plans/regression_mc.py``); ``"paper"``: the paper's
            Eq. (14) over each feature's cooperators.
        return_derivative_evaluations: also return
            ``derivative_evaluations``, the forward equivalents spent on
            derivatives per example (included in ``n_evaluations``).
    """

    n_samples: int | None = None
    budget: int | None = None
    generator: torch.Generator | None = None
    antithetic: bool = True
    cross_contribution: str = "auto"
    estimator: str = "cubic"
    return_derivative_evaluations: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.references is not None:
            raise ValueError(
                "Shear takes baselines, not references: its cross-contributions are "
                "derivatives at one reference point."
            )
        check_budget(self.budget, self.n_samples)
        if self.n_samples is not None:
            _check_budget(self.n_samples)
        check_flag(self.antithetic, "antithetic")
        check_choice(self.cross_contribution, CROSS_CONTRIBUTIONS, "cross_contribution")
        check_choice(self.estimator, SHEAR_ESTIMATORS, "estimator")
        check_generator(self.generator)


class Shear(SampledAttribution, captum_attr.ShapleyValueSampling):
    r"""SHEAR (Wang et al., ICML 2023): exact Shapley sums over a few cooperators.

    For each feature :math:`i`, the :math:`m = \log_2(N/2)` features with the
    largest cross-contribution :math:`\eta_{ij} = |\delta_i^\top (H + H^\top)
    \delta_j|` (see :meth:`cross_contributions`) are its cooperators
    :math:`S_i`; the others are present at random, each with probability
    1/2, antithetically paired (Eq. 14):

    .. math::
        \phi_i = \frac{1}{m+1} \sum_{S \subseteq S_i} \binom{m}{|S|}^{-1}
        \big(v(S \cup i \cup V_S) - v(S \cup V_S)\big)

    The estimate is exact whenever the features outside :math:`S_i` do not
    interact with :math:`i`, and for :math:`N \ge 2^d`. It costs :math:`N`
    evaluations per feature plus :math:`d` Hessian-vector products per
    example, needs a differentiable model of floating inputs, and refuses
    more than :math:`2^{20}` coalitions per example.

    Eq. (14) is ``estimator="paper"``. By default (``"cubic"``) the same
    ``d N`` evaluations and the same cross-contributions are spent
    differently: complementary pairs of coalitions, stratified by size, fit
    a surrogate game whose triples are those with the largest
    :math:`\eta` among their pairs, and the attribution is its Shapley value
    in closed form (a regression-adjusted KernelSHAP; exact for
    :math:`N \ge 2^d` as well). On smooth models it is several times more
    accurate than Eq. (14) and than antithetic permutations at equal cost
    (``benchmarks/estimators.py``). Derivatives count as forward equivalents
    (4 per Hessian-vector product, 3 per gradient) in ``n_evaluations`` and
    ``budget=``; ``return_derivative_evaluations=True`` returns their share.

    Example:
        >>> import torch
        >>> from captum_graphshap import Shear
        >>> layers = [torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)]
        >>> model = torch.nn.Sequential(*layers)
        >>> phi = Shear(model).attribute(torch.ones(1, 3), target=0, n_samples=8)  # 8 >= 2^3: exact
        >>> phi.shape
        torch.Size([1, 3])
    """

    # Eq. (14) gives a dummy exactly 0, the regression estimator only nearly:
    # feature ids an example does not use are dropped before planning
    exact_for_dummies = False
    drops_null_players = True
    Options = ShearOptions
    renames = Renames(values={"estimator": {"regression": "cubic"}})

    def cross_contributions(
        self,
        inputs: Tensor | tuple[Tensor, ...],
        baselines: BaselineType = None,
        target: TargetType = None,
        additional_forward_args: Any = None,
        feature_mask: Tensor | tuple[Tensor, ...] | None = None,
        *,
        kind: str = "hessian",
        value: str = "output",
    ) -> Tensor:
        """Pairwise cross-contributions ``eta``, a ``(batch, d, d)`` tensor.

        Args:
            inputs, baselines, target, additional_forward_args, feature_mask:
                as in :meth:`attribute`.
            kind: ``"hessian"``: ``eta_ij = |delta_i^T (H + H^T) delta_j|``
                with ``H`` the Hessian of the explained output at the input and
                ``delta_i`` the input difference to the baseline on feature
                ``i``'s elements, from ``d`` batched Hessian-vector products;
                ``"gradient"``: the same form with ``H delta_j`` replaced by the
                change of the gradient when feature ``j`` takes its baseline
                (for piecewise-linear models, whose Hessian is zero);
                ``"auto"``: the Hessian, and the gradient form for examples
                where the Hessian form vanishes (with a warning).
            value: ``"output"`` or ``"log_prob"``, as in :meth:`attribute`.

        Returns:
            ``eta[n, i, j]``, symmetric, in float64 for float64 inputs and the
            inputs' dtype otherwise. The diagonal is not used by SHEAR.
        """
        check_choice(kind, CROSS_CONTRIBUTIONS, "kind")
        game, _ = self._game(
            self._options({"value": value}),  # checked as attribute checks it
            inputs,
            baselines,
            target,
            additional_forward_args,
            feature_mask,
        )
        return cross_contributions(game, kind)

    def explain(self, game: CoalitionGame, options: ShearOptions, show_progress: bool) -> Outcome:
        if game.outputs == 1 or options.budget is None:
            return self._explain(game, options, show_progress)
        # target=None on a model of several outputs: each output has its own derivatives,
        # cooperators and rows, so each gets its share of the budget (which bounds them
        # all together); each output's values are those of target=k at that share
        share = options.budget // game.outputs
        try:
            return self._explain(game, dataclasses.replace(options, budget=share), show_progress)
        except ValueError as error:
            raise ValueError(
                f"{error} (budget={options.budget} is shared by the model's {game.outputs} "
                f"outputs, {share} each: each has its own derivatives and rows; pass a "
                "target to explain one output with all of it.)"
            ) from None

    def _explain(self, game: CoalitionGame, options: ShearOptions, show_progress: bool) -> Outcome:
        check_floating(game)
        d = game.num_features
        n_samples = self._samples(options, d)
        count = min(int(math.log2(n_samples)) - 1, d - 1)
        check_plan_size(
            d * 2 ** (count + 1),
            MAX_COALITIONS,
            "Shear",
            f"lower {'budget' if options.budget is not None else 'n_samples'} or group "
            "features with feature_mask",
        )
        before = game.evaluations.clone()
        if options.estimator == "paper":
            cooperators = self._cooperators(game, count, options.cross_contribution)
            plan = shear_plan(cooperators, options.antithetic, options.generator)
        else:
            strength = (
                None
                if count >= d - 1  # every coalition is evaluated: exact, no eta needed
                else cross_contributions(game, options.cross_contribution)
            )
            spent = int((game.evaluations - before).max())
            pairs = (self._rows(options, d, n_samples, spent) - 2) // 2
            make_plan = (
                regression_mc_plan if options.estimator == "regression_mc" else cubic_kernel_plan
            )
            plan = make_plan(d, pairs, options.generator, game.device, strength=strength)
        derivatives = game.evaluations - before
        values = evaluate_plan(game, plan, show_progress, self.progress_desc)
        extras = {}
        if options.return_derivative_evaluations:
            extras["derivative_evaluations"] = derivatives
        return Outcome(
            check_attribution_scale(type(self).__name__, values, plan.estimator(values)), extras
        )

    @staticmethod
    def _rows(options: ShearOptions, d: int, n_samples: int, derivatives: int) -> int:
        """Coalitions the regression estimator evaluates: ``d N``, or all that the
        budget leaves after the derivatives spent (it needs no power of two)."""
        if options.budget is None:
            return d * n_samples
        return min(options.budget - derivatives, 2**d)

    @staticmethod
    def _samples(options: ShearOptions, d: int) -> int:
        if options.budget is None:
            return 16 if options.n_samples is None else _check_budget(options.n_samples)
        derivatives = cross_contribution_cost(options.cross_contribution, d)

        def cost(n: int) -> int:  # an exact plan (n >= 2^d) needs no derivatives
            return d * n + (0 if n >= 2**d else derivatives)

        if cost(4) > options.budget:
            raise ValueError(
                f"budget={options.budget} is too small for Shear with d = {d} features: "
                f"N = 4 evaluations per feature need {d * 4} rows plus up to {derivatives} "
                f"forward equivalents of derivatives; raise budget to {cost(4)} or more, "
                "or use PairedKernelShap, which needs no derivatives."
            )
        n = 4
        while n < 2**d and cost(2 * n) <= options.budget:
            n *= 2
        return n

    def _cooperators(self, game: CoalitionGame, count: int, kind: str) -> Tensor:
        d = game.num_features
        if count >= d - 1:
            # every other feature cooperates: Eq. (14) is exact Shapley, no eta needed
            others = torch.arange(d, device=game.device).expand(d, d)
            keep = ~torch.eye(d, dtype=torch.bool, device=game.device)
            return others[keep].view(d, d - 1).expand(game.batch_size, d, d - 1)
        return select_cooperators(cross_contributions(game, kind), count)


def _check_budget(n_samples: Any) -> int:
    n = check_count(n_samples, "n_samples", 4, "SHEAR needs at least one cooperator (N = 4).")
    if n & (n - 1):
        lower = 1 << (n.bit_length() - 1)
        raise ValueError(
            f"n_samples must be a power of two (evaluations per feature = 2^(cooperators + 1)), "
            f"got {n}; use {lower} or {lower * 2}."
        )
    return n
