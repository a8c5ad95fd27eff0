"""Random draws on the inputs' device, and ids of distinct coalitions.

The primitives the samplers of ``permutations.py``, ``paired_designs.py``,
``stratified.py`` and ``shear.py`` share: uniform keys and integers drawn
from a ``torch.Generator`` on its own device, uniform subsets of given sizes,
and an id per coalition that is equal exactly when the coalitions are.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine.plan import DenseCoalitions, PrefixCoalitions


def uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform [0, 1) draws on ``device`` from ``generator`` (drawn on its own device)."""
    source = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=source).to(device)


def random_indices(
    high: int, shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform integers in ``[0, high)`` on ``device`` from ``generator``."""
    source = generator.device if generator is not None else device
    return torch.randint(high, shape, generator=generator, device=source).to(device)


def uniform_subsets(sizes: Tensor, d: int, generator: torch.Generator | None) -> Tensor:
    """``(len(sizes), d)`` bool: row ``r`` a uniform subset of ``sizes[r]`` members.

    Drawn on the generator's device (CPU without one): the members are the
    ``sizes[r]`` smallest of ``d`` uniform keys.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    keys = torch.rand(sizes.shape[0], d, generator=generator, device=device)
    order = keys.argsort(dim=1)
    # each key's rank: the inverse permutation by a scatter, not a second argsort
    ranks = torch.empty_like(order).scatter_(
        1, order, torch.arange(d, device=device).expand_as(order)
    )
    return ranks < sizes.to(device)[:, None]


def distinct_ids(coalitions: Tensor | PrefixCoalitions) -> Tensor:
    """``(M,)`` an id per coalition, equal exactly when the coalitions are (the engine's keys)."""
    from ..engine.plan import coalition_keys

    store = DenseCoalitions(coalitions) if isinstance(coalitions, Tensor) else coalitions
    keys = coalition_keys(store)
    ids = torch.unique(keys[:, 0], return_inverse=True)[1]  # bit codes: a flat sort
    # hashed words: a flat sort per word and one of the pair of ranks (exact: two rows
    # are equal when both words are), about ten times faster than ``unique(dim=0)``
    for column in range(1, keys.shape[1]):
        word = torch.unique(keys[:, column], return_inverse=True)[1]
        ids = torch.unique(ids * (int(word.max()) + 1) + word, return_inverse=True)[1]
    return ids
