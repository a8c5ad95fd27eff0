"""The FastSHAP objective (Jethani et al., ICLR 2022) without storing coalition values.

FastSHAP trains the explainer on each example's sampled coalitions ``S``
(Shapley-kernel distribution, paired) by the weighted least squares

    ``L_x(phi) = sum_S w_S (v_x(S) - v_x(empty) - 1_S^T phi)^2``

with ``phi`` the network's efficient values (``sum phi = v_x(D) - v_x(empty)``).
``L_x`` is a quadratic in ``phi``: ``phi^T A_x phi - 2 b_x^T phi + c_x`` with
``A_x = sum_S w_S z_S z_S^T``. The paired kernel fit ``phi_hat_x`` (the
``"kernel"`` label of the same coalitions) is its minimiser over efficient
``phi``, so ``A_x phi_hat_x - b_x`` is a multiple of ``1``, and for every
efficient ``phi``

    ``L_x(phi) = (phi - phi_hat_x)^T A_x (phi - phi_hat_x) + constant_x``.

So the objective needs each example's kernel label and ``A_x`` only, and
``A_x`` is the shared plan's matrix with the example's features relabelled
(``labels.py``): stored as one ``(d, d)`` matrix per labelling call and a
permutation per example (:class:`KernelMetric`), never ``N d^2`` numbers.
Against a plain squared error to the same labels, the loss weighs each
direction of the residual by how well the example's coalitions pin it, and
its expectation over i.i.d. kernel draws is the exact objective, whose
minimiser is the exact Shapley value (the fit's distinct pairs are weighted by
their draws' counts over the number of draws, a stopping time: nearly so).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor


def normalised_gram(gram: Tensor) -> Tensor:
    """A ``(d, d)`` matrix scaled to trace ``d``: a metric whose error is the mean squared
    error when it is the identity (the loss's scale, and the learning rate's, stays)."""
    return gram * (gram.shape[-1] / gram.trace())


def metric_errors(residual: Tensor, grams: Tensor, order: Tensor) -> Tensor:
    """``(..., N, K)``: ``r^T A_n r / d`` for each example ``n`` and output column.

    ``residual`` ``(..., N, d, K)`` in feature order; ``grams`` ``(N, d, d)`` in
    plan positions; ``order[n, j]`` the feature that plan position ``j`` stands
    for in example ``n``, so ``A_n[order[n, j], order[n, k]] = grams[n, j, k]``.
    """
    index = order[..., None].expand(residual.shape)
    positioned = residual.gather(-2, index)  # r[order[n, j]] at position j
    quadratic = torch.einsum("...njc,njk,...nkc->...nc", positioned, grams, positioned)
    return quadratic / residual.shape[-2]


@dataclasses.dataclass
class KernelMetric:
    """Each example's FastSHAP matrix ``A_x``, factored: ``grams[gram_index[n]]``
    relabelled by ``order[n]``.

    ``grams`` ``(C, d, d)`` float64, one per labelling call (its shared plan's,
    scaled to trace ``d``: :func:`normalised_gram`), ``gram_index`` ``(N,)``
    which of them each example drew, ``order`` ``(N, d)`` its features'
    relabelling (``order[n, j]``: the feature plan position ``j`` stands for).
    """

    grams: Tensor
    gram_index: Tensor
    order: Tensor

    def __len__(self) -> int:
        return self.order.shape[0]

    def rows(self, index: Tensor) -> KernelMetric:
        return KernelMetric(self.grams, self.gram_index[index], self.order[index])

    def errors(self, residual: Tensor) -> Tensor:
        """``(..., N, K)`` :func:`metric_errors` of ``residual`` ``(..., N, d, K)``."""
        return metric_errors(residual, self.grams[self.gram_index], self.order)

    def dense(self) -> Tensor:
        """``(N, d, d)`` every example's matrix in feature order (small fits and tests)."""
        grams = self.grams[self.gram_index]
        position = self.order.argsort(dim=1)
        rows = grams.gather(1, position[:, :, None].expand_as(grams))
        return rows.gather(2, position[:, None, :].expand_as(grams))

    @staticmethod
    def concatenate(parts: list[KernelMetric]) -> KernelMetric:
        """The metrics of consecutive labelling calls as one, examples in order."""
        offsets = torch.tensor([0] + [len(p.grams) for p in parts]).cumsum(0).tolist()
        return KernelMetric(
            torch.cat([p.grams for p in parts]),
            torch.cat([p.gram_index + offset for p, offset in zip(parts, offsets)]),
            torch.cat([p.order for p in parts]),
        )


def squared_errors(residual: Tensor, metric: KernelMetric | None) -> Tensor:
    """The loss of ``residual`` ``(..., N, d, K)`` to the labels: its mean square, or with
    ``metric`` the FastSHAP objective less each example's constant (:func:`metric_errors`,
    averaged over examples and columns)."""
    if metric is None:
        return (residual**2).mean()
    return metric.errors(residual).mean()
