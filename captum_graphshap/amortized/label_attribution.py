"""The labels of an amortized fit as an attribution method, to make them anywhere.

``AmortizedShapley.fit`` labels its training examples itself. On a data set
too large for one process, the labels can be made by
:class:`ShapleyLabels` on Ray actors (``distributed.explain_dataset``, which
calls any attribution method's ``attribute``) and handed to
``fit(labels=...)``; the draws are the fit's own (:func:`~.labels.sampled_labels`).
"""

from __future__ import annotations

import dataclasses

import torch

from ..attr._options import check_count, check_generator
from ..attr.base import KernelAttribution, Options, Outcome
from ..attr.result import stack_outcomes
from ..engine.coalition_game import CoalitionGame
from ..plans.limits import check_choice
from .labels import STANDALONE_ESTIMATORS, check_label_budget, sampled_labels


@dataclasses.dataclass(frozen=True)
class ShapleyLabelsOptions(Options):
    """Options of :class:`ShapleyLabels`.

    Args:
        budget: model evaluations per example (``fit``'s ``budget``; default
            64).
        n_samples: Captum's ``KernelShap`` name for the same count; give one
            of the two.
        label_estimator: as ``fit``'s: ``"kernel"`` (default),
            ``"permutation"``, ``"regression_mc"`` or ``"default"``; not
            ``"fastshap"``, whose objective needs each example's coalitions
            besides its label (train on ``"kernel"`` labels made here instead).
        generator: the draws (each example's coalitions drawn afresh).
    """

    budget: int | None = None
    n_samples: int | None = None
    label_estimator: str = "kernel"
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget is not None and self.n_samples is not None:
            raise ValueError(
                "give budget or n_samples (the same count of model evaluations per "
                "example), not both."
            )
        for name in ("budget", "n_samples"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 1)
        check_choice(self.label_estimator, STANDALONE_ESTIMATORS, "label_estimator")
        check_generator(self.generator)

    @property
    def evaluations(self) -> int:
        """Model evaluations per example: ``budget``, else ``n_samples``, else 64."""
        return self.budget or self.n_samples or 64


class ShapleyLabels(KernelAttribution):
    r"""The per-example estimates an :class:`~.AmortizedShapley` fit trains on.

    One estimate per example from ``budget`` model evaluations with fresh
    coalitions, efficient (each example's values sum to ``f(x) - f(baseline)``),
    in Captum's shapes. They are noisy; their use is as training labels: make
    them where the data are (Ray actors through
    :func:`captum_graphshap.distributed.explain_dataset`), then
    ``AmortizedShapley(model).fit(train, ..., labels=labels)``. Pass
    ``return_input_shape=False`` for the ``(N, d)`` values ``fit`` takes
    (``(N, outputs, d)`` without a target on a model of several outputs).

    Example:
        >>> import torch
        >>> from captum_graphshap.amortized import ShapleyLabels
        >>> model = torch.nn.Linear(4, 1)
        >>> x = torch.randn(3, 4)
        >>> labels = ShapleyLabels(model).attribute(
        ...     x, baselines=0.0, target=0, budget=16, return_input_shape=False,
        ...     generator=torch.Generator().manual_seed(0))
        >>> labels.shape
        torch.Size([3, 4])
    """

    Options = ShapleyLabelsOptions

    def explain(
        self, game: CoalitionGame, options: ShapleyLabelsOptions, show_progress: bool
    ) -> Outcome:
        budget = options.evaluations
        check_label_budget(budget, options.label_estimator, game.num_features)
        labels = sampled_labels(game, options.label_estimator, budget, options.generator)
        dtype = game.value_dtype()
        outcomes = [Outcome(labels[..., k].to(dtype)) for k in range(labels.shape[-1])]
        return outcomes[0] if len(outcomes) == 1 else stack_outcomes(outcomes, (len(outcomes),))
