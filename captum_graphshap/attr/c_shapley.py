"""C-Shapley: marginal contributions to the connected sets around each feature."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import captum.attr as captum_attr

from ..plans.l_c_shapley import (
    C_WEIGHTS,
    L_CONTEXTS,
    c_shapley_plan,
    c_shapley_regression_plan,
)
from ..plans.limits import check_choice
from .graph_family import (
    GRAPH_RENAMES,
    GraphAttribution,
    GraphOptions,
    PlanBuilder,
    check_order,
)
from .renames import Renames, deprecated

#: ``estimator=`` choices of :class:`CShapley`
C_ESTIMATORS = ("exact", "kernel")
#: largest connected set size (square side on a grid) of ``estimator="kernel"``
DEFAULT_MAX_SIZE = 2


def _kernel_size_from_k(options: dict[str, Any]) -> dict[str, Any]:
    """``k`` is the neighbourhood radius only; the kernel variant's size bound is ``max_size``."""
    if options.get("estimator") == "kernel" and "k" in options and "max_size" not in options:
        deprecated(
            "CShapley.attribute(estimator='kernel'): the largest set size is max_size= "
            f"(k is the neighbourhood radius of estimator='exact'); k={options['k']!r} is "
            "read as max_size."
        )
        options = dict(options)
        options["max_size"] = options.pop("k")
    return options


@dataclasses.dataclass(frozen=True)
class CShapleyOptions(GraphOptions):
    """Options of :class:`CShapley`.

    Args:
        k: neighbourhood radius in graph hops (default 2; ``estimator="exact"``).
        context: ``"baseline"`` or ``"input"``, as in
            :class:`~captum_graphshap.LShapley` (``"exact"`` only).
        weights: ``"myerson"`` or ``"paper"`` (``"exact"`` only).
        estimator: ``"exact"`` (Eq. 6) or ``"kernel"`` (Sec. 4.3.2: a
            Shapley-kernel-weighted least-squares fit over the connected sets
            of size at most ``max_size``). ``method="regression"`` before,
            still accepted for one release with a warning (its ``k`` is read
            as ``max_size``).
        max_size: the largest connected set size of ``estimator="kernel"``
            (n-grams on a line, ``max_size x max_size`` squares on a grid;
            default 2).
    """

    k: int = 2
    context: str = "baseline"
    weights: str = "myerson"
    estimator: str = "exact"
    max_size: int = DEFAULT_MAX_SIZE

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.k)
        if isinstance(self.max_size, bool) or not isinstance(self.max_size, int):
            raise TypeError(
                f"max_size must be an int (the largest connected set size), got "
                f"{type(self.max_size).__name__}."
            )
        if self.max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {self.max_size}.")
        check_choice(self.estimator, C_ESTIMATORS, "estimator")
        check_choice(self.context, L_CONTEXTS, "context")
        check_choice(self.weights, C_WEIGHTS, "weights")


class CShapley(GraphAttribution, captum_attr.ShapleyValueSampling):
    r"""C-Shapley (Chen, Song, Wainwright and Jordan, ICLR 2019, Eq. 6).

    Only connected sets of features cooperate: for the connected sets
    :math:`U` within distance ``k`` of feature i that contain it,

    .. math::
        \tilde\phi_i = \sum_{U \in C_k(i)} w(U) \big(v(U) - v(U \setminus i)\big).

    With ``weights="myerson"`` (default), :math:`w(U) = (|U|-1)!\,b!/(|U|+b)!`
    where b counts the nodes adjacent to U outside it: Eq. (6)'s
    :math:`2/((|U|+2)(|U|+1)|U|)` for interior sets of a line, and, once
    ``k`` reaches the graph's diameter, exactly the Myerson value for models
    that decompose over connected components (Eq. (6)'s constant is off at
    sequence ends and on grids; ``weights="paper"`` applies it anyway).
    :math:`O(k^2 d)` coalitions on a line. ``estimator="kernel"`` is the
    paper's Sec. 4.3.2 variant: a KernelSHAP-weighted least-squares fit over
    the connected sets of size at most ``max_size`` (n-grams; squares on a
    grid) with efficiency enforced.

    Example:
        >>> import torch
        >>> from captum_graphshap import CShapley
        >>> model = torch.nn.Linear(8, 1)
        >>> CShapley(model).attribute(torch.ones(2, 8), target=0, k=2).shape
        torch.Size([2, 8])
    """

    Options = CShapleyOptions
    renames = Renames(
        options={"method": "estimator"},
        values={**GRAPH_RENAMES.values, "estimator": {"regression": "kernel"}},
        adjust=_kernel_size_from_k,
    )

    def graph_plan(self, options: CShapleyOptions) -> PlanBuilder:
        if options.estimator == "kernel":
            return functools.partial(c_shapley_regression_plan, k=options.max_size)
        return functools.partial(
            c_shapley_plan, k=options.k, context=options.context, weights=options.weights
        )
