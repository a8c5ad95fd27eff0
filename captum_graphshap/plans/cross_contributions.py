"""SHEAR's cooperator choice from cross-contributions.

SHEAR (Wang et al., ICML 2023) gives each feature ``i`` the few features it
interacts with most, its *contributive cooperators*, ranked by the
second-order cross-contribution at the input ``x``::

    eta_ij = | delta_i^T (H + H^T) delta_j |

with ``H`` the Hessian of the explained scalar output with respect to the
input and ``delta_i`` the input difference ``x - baseline`` restricted to the
elements of feature ``i`` (docs/definitions.md).

``eta`` itself comes from the model's derivatives, computed and counted by
:mod:`captum_graphshap.engine.derivatives`; here it is a given tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor


def select_cooperators(eta: Tensor, count: int) -> Tensor:
    """``(N, d, count)`` long: for each feature, the ``count`` others with largest ``eta``.

    A feature is never its own cooperator. Ties go to the lower index (a
    stable sort), so the choice is deterministic.
    """
    scores = eta.clone()
    scores.diagonal(dim1=1, dim2=2).fill_(-torch.inf)
    order = torch.sort(scores, dim=2, descending=True, stable=True).indices
    return order[..., :count]
