"""Brute-force references and synthetic games for the tests.

Everything here is the textbook formula written as plainly as possible, in
float64, with Python loops: slow, obviously right, independent of the package.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import networkx as nx
import torch
from torch import Tensor, nn

Game = Callable[[frozenset[int]], float]


def brute_shapley(v: Game, d: int) -> list[float]:
    """phi_i = sum_{S subset D-i} |S|!(d-|S|-1)!/d! (v(S+i) - v(S))."""
    phi = []
    for i in range(d):
        others = [j for j in range(d) if j != i]
        total = 0.0
        for size in range(d):
            weight = math.factorial(size) * math.factorial(d - size - 1) / math.factorial(d)
            for subset in itertools.combinations(others, size):
                s = frozenset(subset)
                total += weight * (v(s | {i}) - v(s))
        phi.append(total)
    return phi


def brute_permutation_samples(value: Callable[[list[int]], float], ranks: Tensor) -> Tensor:
    """``(M, d)`` marginal contributions along the orderings given by ``ranks`` ``(M, d)``.

    Row ``m``: each feature's ``value(before + [i]) - value(before)``, ``before``
    the features that ordering ``m`` puts ahead of it.
    """
    orderings, d = ranks.shape
    samples = torch.zeros(orderings, d, dtype=torch.float64)
    for m in range(orderings):
        order = ranks[m].argsort().tolist()
        for position, feature in enumerate(order):
            before = order[:position]
            samples[m, feature] = value([*before, feature]) - value(before)
    return samples


def graph_restricted(v: Game, graph: nx.Graph) -> Game:
    """Myerson's v^G(S) = sum over components T of S of v(T) - v(empty)."""
    empty = v(frozenset())

    def restricted(s: frozenset[int]) -> float:
        if not s:
            return 0.0
        parts = nx.connected_components(graph.subgraph(s))
        return sum(v(frozenset(p)) - empty for p in parts)

    return restricted


def brute_myerson(v: Game, graph: nx.Graph) -> list[float]:
    return brute_shapley(graph_restricted(v, graph), graph.number_of_nodes())


def model_game(
    model: Callable[..., Tensor],
    x: Tensor,
    baseline: Tensor,
    mask: Tensor,
    target: int | tuple[int, ...] | None = None,
) -> Game:
    """v(S) for one example: elements whose mask id is in S keep x, others baseline.

    ``x``, ``baseline`` are single examples (no batch dim); ``mask`` broadcasts
    to them. One model call per coalition, as naive as it gets.
    """
    mask = mask.expand(x.shape)
    cache: dict[frozenset[int], float] = {}

    def v(s: frozenset[int]) -> float:
        if s not in cache:
            keep = torch.zeros(x.shape, dtype=torch.bool)
            for feature in s:
                keep |= mask == feature
            row = torch.where(keep, x, baseline)
            with torch.no_grad():
                out = model(row.unsqueeze(0))[0]
            if target is not None:
                out = out[target]
            cache[s] = float(out.reshape(()))
        return cache[s]

    return v


class TableGame(nn.Module):
    """A model whose output on a 0/1 input of d features is ``table[bits]``.

    With input all ones and baseline zeros, ``v(S) = table[sum_{i in S} 2^i]``:
    any game whatsoever can be fed to the attribution classes this way.
    """

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.d = int(table.numel()).bit_length() - 1
        self.register_buffer("table", table)
        self.register_buffer("powers", 2 ** torch.arange(self.d))

    def forward(self, x: Tensor) -> Tensor:
        index = (x.round().long() * self.powers).sum(dim=1)
        return self.table[index]

    def value(self, s: Iterable[int]) -> float:
        return float(self.table[sum(2**i for i in s)])


class ChainSumModel(nn.Module):
    """f(x) = sum over maximal runs of present (nonzero) positions of g(run).

    It decomposes over the connected components of the present features on a
    line graph, so its Myerson value equals its Shapley value.
    """

    def __init__(self, length: int, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weights = torch.randn(length, generator=generator, dtype=torch.float64)
        self.pair = torch.randn(length, generator=generator, dtype=torch.float64)

    def forward(self, x: Tensor) -> Tensor:
        # Interactions only between neighbours, which are in one component
        # exactly when both are present: the function decomposes over runs.
        x = x.to(torch.float64)
        linear = (x * self.weights).sum(dim=1)
        pairwise = (x[:, 1:] * x[:, :-1] * self.pair[1:]).sum(dim=1)
        return linear + pairwise + torch.tanh(x[:, 0] * x[:, 1] * x[:, 2])


def mlp(in_features: int, out_features: int = 3, seed: int = 0, dtype=torch.float32) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(in_features, 16), nn.Tanh(), nn.Linear(16, out_features)).to(
        dtype
    )
    return model.eval()


def _ball(graph: nx.Graph, i: int, k: int) -> set[int]:
    return set(nx.single_source_shortest_path_length(graph, i, cutoff=k))


def brute_l_shapley(v: Game, graph: nx.Graph, k: int, context: str = "baseline") -> list[float]:
    """Chen et al. Eq. (5), literally."""
    d = graph.number_of_nodes()
    phi = []
    for i in range(d):
        ball = _ball(graph, i, k)
        outside = frozenset(set(range(d)) - ball) if context == "input" else frozenset()
        m = len(ball)
        others = sorted(ball - {i})
        total = 0.0
        for size in range(m):
            for subset in itertools.combinations(others, size):
                t = frozenset(subset) | {i}
                total += (v(t | outside) - v((t - {i}) | outside)) / math.comb(m - 1, len(t) - 1)
        phi.append(total / m)
    return phi


def brute_c_shapley(
    v: Game, graph: nx.Graph, k: int, context: str = "baseline", weights: str = "myerson"
) -> list[float]:
    """Chen et al. Eq. (6) over connected sets found by brute force."""
    d = graph.number_of_nodes()
    phi = []
    for i in range(d):
        ball = _ball(graph, i, k)
        outside = frozenset(set(range(d)) - ball) if context == "input" else frozenset()
        others = sorted(ball - {i})
        total = 0.0
        for size in range(len(others) + 1):
            for subset in itertools.combinations(others, size):
                u = frozenset(subset) | {i}
                if not nx.is_connected(graph.subgraph(u)):
                    continue
                n_u = len(u)
                if weights == "myerson":
                    b = len(nx.node_boundary(graph, u))
                    w = math.factorial(n_u - 1) * math.factorial(b) / math.factorial(n_u + b)
                else:
                    w = 2 / ((n_u + 2) * (n_u + 1) * n_u)
                total += w * (v(u | outside) - v((u - {i}) | outside))
        phi.append(total)
    return phi


class CallCounter(nn.Module):
    """Wraps a model and counts its calls: bad input must fail before the first."""

    def __init__(self, inner: Callable[..., Tensor]) -> None:
        super().__init__()
        self.inner = inner
        self.calls = 0

    def forward(self, *args: Tensor) -> Tensor:
        self.calls += 1
        return self.inner(*args)
