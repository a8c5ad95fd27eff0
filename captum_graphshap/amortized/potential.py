r"""Shapley values as differences of one potential, learnt from the coalitions' values.

Hart and Mas-Colell (1989): every game ``v`` has a *potential* ``P``, defined on
its subgames by ``P(empty) = 0`` and

    ``sum_{i in A} (P(A) - P(A - i)) = v(A) - v(empty)``  for every coalition ``A``,

and the Shapley value of feature ``i`` is ``P(D) - P(D - i)``. For a model and a
baseline the subgame on the coalition ``A`` is the game of the *masked input*
``x_A`` (the features outside ``A`` at the baseline, where they are null
players), so one function of the input, ``P(z)``, holds every subgame's
potential, and

    ``phi_i(x) = P(x) - P(x with feature i at its baseline)``.

An explainer network that outputs ``P`` then gives the Shapley values of any
input with ``d + 1`` evaluations of itself, and it is trained on exactly what
the engine measures: each sampled coalition row ``z = x_A`` and its value
``v(A)`` give one equation of the recursion, whose residual
(:func:`recursion_residuals`) needs the network at ``z`` and its ``|A|``
children ``z - i`` (the model at ``z`` alone). Unlike a label, the equation has no
sampling noise: the only randomness is which coalitions are seen. Balanced
contributions (``phi_i(x) - phi_i(x - j) = phi_j(x) - phi_j(x - i)``), the
property that with efficiency characterises the Shapley value (Myerson 1980),
holds by construction; the recursion is efficiency at every masked input. For
an additive game the potential is the game itself (``P(A) = v(A)``), so the
fit starts from a regression of ``P`` on the rows' values.

The coalitions' masked inputs are the model's own inputs with features set to
their baseline, so the explainer learns the game on every face of the data,
192,000 rows for 3,000 examples at ``budget=64``, where a network regressing
``phi`` on the examples sees 3,000 points (benchmarks/amortized.py: on a ReLU
MLP, 0.083 against 0.130 held-out error to exact values; the per-example
default at the same budget 0.100).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

#: the most input elements one body call sees: ``d + 1`` rows an example make a
#: potential's forward ``d + 1`` times the network's, so it runs in chunks (a
#: 224 x 224 RGB image with 196 patches is 29 million elements)
BODY_ELEMENTS = 2**24


def masked_inputs(
    inputs: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    example: Tensor,
    present: Tensor,
) -> tuple[Tensor, ...]:
    """``(R, *S)`` per input: example ``example[r]`` with the features absent from
    ``present[r]`` (``(R, d)`` bool) at their baseline.

    ``masks`` ``(1, *S)`` are the shared feature ids and ``baselines`` ``(1, *S)``
    the shared baselines, one per input.
    """
    out = []
    for tensor, mask, baseline in zip(inputs, masks, baselines):
        keep = present[:, mask.reshape(-1)].view(-1, *tensor.shape[1:])
        out.append(torch.where(keep, tensor[example], baseline.to(tensor.dtype)))
    return tuple(out)


def children(present: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's children: the row ``parent[c]`` with one present feature removed.

    ``present`` ``(R, d)`` bool; returns ``parent`` ``(C,)`` and the children's
    presence ``(C, d)``, ``C = present.sum()``, in row order.
    """
    parent, feature = present.nonzero(as_tuple=True)
    child = present[parent].clone()
    child[torch.arange(len(parent), device=present.device), feature] = False
    return parent, child


def recursion_residuals(
    row_potentials: Tensor, child_potentials: Tensor, parent: Tensor, values: Tensor
) -> Tensor:
    """``(R, K)``: ``sum_{i in A} (P(A) - P(A - i)) - v(A)`` for each row ``A``.

    ``row_potentials`` ``(R, K)``, ``child_potentials`` ``(C, K)`` of the rows'
    children (:func:`children`), ``values`` ``(R, K)`` the rows' ``v(A) - v(empty)``.
    Zero for every row exactly when ``P`` is the game's potential.
    """
    count = torch.zeros(len(row_potentials), device=parent.device, dtype=row_potentials.dtype)
    count.index_add_(0, parent, torch.ones_like(parent, dtype=row_potentials.dtype))
    below = torch.zeros_like(row_potentials).index_add_(0, parent, child_potentials)
    return count[:, None] * row_potentials - below - values


class ShapleyPotential(nn.Module):
    """An explainer ``inputs -> (N, d, outputs)`` whose values are differences of a potential.

    ``body(*masked_inputs, present)`` maps masked inputs and their presence
    ``(R, d)`` (float: 1 for the features kept off their baseline) to ``(R,)``
    or ``(R, outputs)`` potentials; the potential of a masked input is the
    body's value less the body's value at the baseline, so ``P(baseline) = 0``.
    ``phi_i(x) = P(x) - P(x with feature i at its baseline)`` (module notes).

    The fit binds the explainer to its feature masks and baselines
    (:meth:`bind`); any ``nn.Module`` of that signature can be the body.
    """

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.num_features = 0
        self.inputs = 0

    def bind(
        self, masks: list[Tensor], baselines: list[Tensor], shapes: list[tuple[int, ...]], d: int
    ) -> None:
        """Fix the feature masks and baselines (``(1, ...)`` and ``(1, 1, ...)``, one per
        input, broadcasting to its per-example ``shapes``) and the number of features."""
        for position, (mask, baseline, shape) in enumerate(zip(masks, baselines, shapes)):
            # buffers, so they move with the module; not saved: the fit's settings hold them
            device = next((p.device for p in self.parameters()), mask.device)
            full_mask = mask.reshape(mask.shape[0], *mask.shape[1:])[0].expand(shape)
            full_baseline = baseline.reshape(-1, *baseline.shape[2:])[0].expand(shape)
            self.register_buffer(f"mask_{position}", full_mask[None].long().to(device), False)
            self.register_buffer(f"baseline_{position}", full_baseline[None].to(device), False)
        self.num_features, self.inputs = d, len(masks)

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """The body's input standardisation from training inputs (a default body's)."""
        standardise = getattr(self.body, "standardise", None)
        if standardise is not None:
            standardise(inputs)

    def _bound(self) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        if not self.num_features:
            raise RuntimeError("the ShapleyPotential is not bound to a fit's masks yet.")
        masks = tuple(getattr(self, f"mask_{k}") for k in range(self.inputs))
        return masks, tuple(getattr(self, f"baseline_{k}") for k in range(self.inputs))

    def active(self, inputs: tuple[Tensor, ...]) -> Tensor:
        """``(N, d)`` bool: the features with an element off the baseline."""
        masks, baselines = self._bound()
        total = torch.zeros(inputs[0].shape[0], self.num_features, device=inputs[0].device)
        for tensor, mask, baseline in zip(inputs, masks, baselines):
            differs = (tensor != baseline.to(tensor.dtype)).reshape(tensor.shape[0], -1).float()
            total.scatter_add_(1, mask.reshape(1, -1).expand(tensor.shape[0], -1), differs)
        return total > 0

    def potentials(self, inputs: tuple[Tensor, ...], example: Tensor, present: Tensor) -> Tensor:
        """``(R, outputs)``: ``P`` at example ``example[r]`` masked to ``present[r]``.

        ``present`` ``(R, d)`` bool must leave out the features at their
        baseline (:meth:`active`), so that a null feature's child is its parent.
        """
        rows = torch.cat([present, present.new_zeros(1, present.shape[1])])  # and the baseline
        index = torch.cat([example, example.new_zeros(1)])
        elements = sum(t[0].numel() for t in inputs)
        chunk = max(1, BODY_ELEMENTS // max(1, elements))
        raw = torch.cat(
            [
                self._body(inputs, index[start : start + chunk], rows[start : start + chunk])
                for start in range(0, len(rows), chunk)
            ]
        )
        return raw[:-1] - raw[-1:]

    def _body(self, inputs: tuple[Tensor, ...], example: Tensor, present: Tensor) -> Tensor:
        """``(R, outputs)``: the body at the rows' masked inputs."""
        masks, baselines = self._bound()
        raw = self.body(*masked_inputs(inputs, masks, baselines, example, present), present.float())
        raw = raw[:, None] if raw.dim() == 1 else raw
        if raw.dim() != 2 or raw.shape[0] != len(present):
            raise ValueError(
                f"the potential network returned shape {tuple(raw.shape)} for {len(present)} "
                "rows; it must return (R,) or (R, outputs) potentials."
            )
        return raw

    def forward(self, *inputs: Tensor) -> Tensor:
        d, batch = self.num_features, inputs[0].shape[0]
        active = self.active(inputs)
        drop = torch.eye(d, dtype=torch.bool, device=active.device)
        # each example, then each example with one feature at its baseline
        present = torch.cat([active[:, None], active[:, None] & ~drop[None]], dim=1)
        example = torch.arange(batch, device=active.device).repeat_interleave(d + 1)
        out = self.potentials(inputs, example, present.reshape(-1, d)).view(batch, d + 1, -1)
        return out[:, :1] - out[:, 1:]
