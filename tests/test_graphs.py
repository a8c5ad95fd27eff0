"""Feature graphs against networkx and brute force over all node subsets."""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from captum_graphshap import graphs as graphs_package
from captum_graphshap.graphs import (
    FeatureGraph,
    GridGraph,
    LineGraph,
    SuperpixelGraph,
    default_feature_mask,
    graph_from_feature_mask,
    infer_graph,
)
from captum_graphshap.graphs import caches as caches_module
from captum_graphshap.graphs import distances as distances_module

from .optional_deps import optional


def _disconnected() -> FeatureGraph:
    # A path, a triangle and an isolated node.
    return FeatureGraph.from_edges(7, [(0, 1), (1, 2), (3, 4), (4, 5), (5, 3)])


GRAPHS = {
    "line7": LineGraph(7),
    "grid3x3": GridGraph(3, 3),
    "random8": FeatureGraph.from_networkx(nx.gnp_random_graph(8, 0.35, seed=7)),
    "disconnected": _disconnected(),
    "star": FeatureGraph.from_networkx(nx.star_graph(5)),
}


def _rows(tensor: torch.Tensor) -> list[tuple[int, ...]]:
    return [tuple(torch.nonzero(row).flatten().tolist()) for row in tensor]


def _order(sets: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    return sorted(sets, key=lambda s: (len(s), s))


def _brute_connected(g: nx.Graph, within: set[int] | None = None) -> list[tuple[int, ...]]:
    nodes = sorted(g.nodes) if within is None else sorted(within)
    found = []
    for size in range(1, len(nodes) + 1):
        for subset in itertools.combinations(nodes, size):
            if nx.is_connected(g.subgraph(subset)):
                found.append(subset)
    return found


# ------------------------------------------------------------ connected sets


@pytest.mark.parametrize("name", GRAPHS)
def test_all_connected_subsets_match_brute_force_in_order(name: str) -> None:
    graph = GRAPHS[name]
    got = _rows(graph.all_connected_subsets())
    want = _brute_connected(graph.to_networkx())
    assert len(got) == len(set(got))
    assert got == _order(want)


@pytest.mark.parametrize("name", GRAPHS)
def test_connected_subsets_match_brute_force_in_order(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    for i in range(graph.num_nodes):
        for k in range(4):
            ball = set(nx.single_source_shortest_path_length(g, i, cutoff=k))
            want = [s for s in _brute_connected(g, ball) if i in s]
            got = _rows(graph.connected_subsets(i, k))
            assert len(got) == len(set(got))
            assert got == _order(want), (i, k)


def test_connected_set_counts_on_a_line_have_closed_forms() -> None:
    for n in range(1, 13):
        assert LineGraph(n).all_connected_subsets().shape == (n * (n + 1) // 2, n)
    line = LineGraph(21)
    for k in range(6):
        assert line.connected_subsets(10, k).shape == ((k + 1) ** 2, 21)


def test_max_count_stops_enumeration_and_is_checked_against_the_cache() -> None:
    line = LineGraph(30)
    with pytest.raises(ValueError, match="more than 100 connected subsets"):
        line.all_connected_subsets(max_count=100)
    assert line.all_connected_subsets(max_count=465).shape == (465, 30)
    with pytest.raises(ValueError, match="more than 464 connected subsets"):
        line.all_connected_subsets(max_count=464)
    with pytest.raises(ValueError, match=r"more than 3 connected subsets.*smaller k"):
        line.connected_subsets(10, 1, max_count=3)
    assert line.connected_subsets(10, 1, max_count=4).shape == (4, 30)
    complete = FeatureGraph.from_adjacency(torch.ones(21, 21))
    with pytest.raises(ValueError, match="more than 1,048,575 connected subsets"):
        complete.all_connected_subsets(max_count=2**20 - 1)


def test_results_are_cached_and_graphs_are_cache_keys() -> None:
    grid = GridGraph(3, 4)
    assert grid.all_connected_subsets() is grid.all_connected_subsets()
    assert grid.connected_subsets(5, 2) is grid.connected_subsets(5, 2)
    assert grid.neighbourhoods(1) is grid.neighbourhoods(1)
    same = FeatureGraph.from_edges(12, grid.edges()[::-1])
    assert same == grid and hash(same) == hash(grid)
    assert {grid: 1}[same] == 1
    assert grid != GridGraph(4, 3)
    messy = [(1, 0), (1, 2), (3, 2), (3, 4), (0, 1), (2, 2)]  # both directions, repeats, a loop
    assert LineGraph(5) == FeatureGraph.from_edges(5, messy)
    assert LineGraph(5) != LineGraph(6)
    assert LineGraph(3) != "LineGraph(3)"
    assert copy.deepcopy(grid) is grid


def test_bitmask_primitives() -> None:
    line = LineGraph(6)
    assert line._neighbour_masks == (0b10, 0b101, 0b1010, 0b10100, 0b101000, 0b10000)
    assert line._components_of_mask(0b110111) == [0b111, 0b110000]
    masks = line._connected_masks(2, 0b111111)
    assert sorted(masks) == sorted(
        sum(1 << j for j in range(a, b + 1)) for a in range(3) for b in range(2, 6)
    )
    with pytest.raises(ValueError, match="more than 5 connected subsets"):
        line._connected_masks(2, 0b111111, max_count=5)


# ------------------------------------------------------ distances and balls


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("scipy", [True, False], ids=["scipy", "bfs"])
def test_distances_and_diameter_match_networkx(
    name: str, scipy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(distances_module, "has_scipy", lambda: scipy)
    graph = FeatureGraph.from_edges(GRAPHS[name].num_nodes, GRAPHS[name].edges())  # fresh cache
    g = graph.to_networkx()
    want = np.full((graph.num_nodes, graph.num_nodes), -1)
    for source, lengths in nx.all_pairs_shortest_path_length(g):
        for target, length in lengths.items():
            want[source, target] = length
    np.testing.assert_array_equal(graph.distances(), want)
    finite = max(max(lengths.values()) for _, lengths in nx.all_pairs_shortest_path_length(g))
    assert graph.diameter() == finite


def test_diameter_of_connected_graphs() -> None:
    assert LineGraph(9).diameter() == 8
    assert GridGraph(4, 6).diameter() == 8
    assert GridGraph(4, 6).diameter() == nx.diameter(GridGraph(4, 6).to_networkx())
    assert LineGraph(1).diameter() == 0


@pytest.mark.parametrize("name", GRAPHS)
def test_neighbourhoods_match_networkx(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    fresh = FeatureGraph.from_edges(graph.num_nodes, graph.edges())
    fresh.distances()  # the other code path: balls read off the distance matrix
    for k in range(5):
        table = graph.neighbourhoods(k)
        assert table.dtype == torch.bool and table.shape == (graph.num_nodes,) * 2
        assert torch.equal(table, fresh.neighbourhoods(k))
        for i in range(graph.num_nodes):
            want = tuple(sorted(nx.single_source_shortest_path_length(g, i, cutoff=k)))
            assert graph.neighbourhood(i, k) == want
            assert tuple(torch.nonzero(table[i]).flatten().tolist()) == want


# --------------------------------------------------- components, boundary


@pytest.mark.parametrize("name", GRAPHS)
def test_components_and_boundary_size_match_brute_force(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    rng = np.random.default_rng(0)
    for _ in range(30):
        member = rng.random(graph.num_nodes) < 0.5
        nodes = np.flatnonzero(member).tolist()
        want = sorted(tuple(sorted(c)) for c in nx.connected_components(g.subgraph(nodes)))
        assert graph.components(nodes) == want
        assert graph.components(torch.from_numpy(member)) == want
        boundary = {v for v in g.nodes if v not in nodes and any(u in nodes for u in g[v])}
        assert graph.boundary_size(nodes) == len(boundary)
        assert graph.boundary_size(member) == len(boundary)
    assert graph.components([]) == []


# ------------------------------------------------------------ constructors


def test_from_adjacency_symmetrises_and_ignores_the_diagonal() -> None:
    matrix = np.array([[1, 2, 0], [0, 0, 0], [0, 1, 1]])
    for given_matrix in (matrix, torch.from_numpy(matrix).bool(), matrix.tolist()):
        graph = FeatureGraph.from_adjacency(given_matrix)
        assert graph.num_nodes == len(graph) == 3
        assert graph.edges() == [(0, 1), (1, 2)]
    adjacency = FeatureGraph.from_adjacency(matrix).adjacency()
    np.testing.assert_array_equal(adjacency, [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    assert adjacency.dtype == np.bool_


def test_from_networkx_node_orders() -> None:
    g = nx.Graph([("b", "a"), ("a", "c")])
    assert FeatureGraph.from_networkx(g).edges() == [(0, 1), (1, 2)]  # b, a, c: g's order
    ordered = FeatureGraph.from_networkx(g, nodelist=["a", "b", "c"])
    assert ordered.edges() == [(0, 1), (0, 2)]
    assert FeatureGraph.from_networkx(g, nodelist=["c", "b", "a"]).edges() == [(0, 2), (1, 2)]
    shuffled = nx.Graph()
    shuffled.add_nodes_from([2, 0, 1])
    shuffled.add_edges_from([(2, 0), (1, 1)])
    assert FeatureGraph.from_networkx(shuffled).edges() == [(0, 2)]  # sorted ints, no loop
    directed = FeatureGraph.from_networkx(nx.DiGraph([(0, 1), (1, 0), (2, 1)]))
    assert directed == LineGraph(3)
    roundtrip = FeatureGraph.from_networkx(GRAPHS["random8"].to_networkx())
    assert roundtrip == GRAPHS["random8"]


def test_neighbour_list_constructor() -> None:
    assert FeatureGraph([[1], [0, 2], []]) == LineGraph(3)
    assert FeatureGraph([[1, 1], [], [2]]).edges() == [(0, 1)]
    with pytest.raises(ValueError, match="neighbours"):
        FeatureGraph([[3], []])


def test_from_edges_accepts_arrays_and_empty_graphs() -> None:
    assert FeatureGraph.from_edges(4, np.array([[0, 1], [3, 2]])).edges() == [(0, 1), (2, 3)]
    assert FeatureGraph.from_edges(4, torch.tensor([[3, 2]])).edges() == [(2, 3)]
    empty = FeatureGraph.from_edges(3, [])
    assert empty.edges() == [] and empty.diameter() == 0
    assert _rows(empty.all_connected_subsets()) == [(0,), (1,), (2,)]
    assert repr(empty) == "FeatureGraph(num_nodes=3, num_edges=0)"
    nothing = FeatureGraph.from_edges(0, [])
    assert nothing.distances().shape == (0, 0) and nothing.diameter() == 0
    assert nothing.all_connected_subsets().shape == (0, 0)


def test_line_and_grid_graphs() -> None:
    assert LineGraph(4).edges() == [(0, 1), (1, 2), (2, 3)]
    assert repr(LineGraph(4)) == "LineGraph(4)"
    grid = GridGraph(2, 3)
    assert (grid.height, grid.width, grid.num_nodes) == (2, 3, 6)
    assert grid.edges() == [(0, 1), (0, 3), (1, 2), (1, 4), (2, 5), (3, 4), (4, 5)]
    assert torch.equal(grid.feature_mask(), torch.tensor([[0, 1, 2], [3, 4, 5]]))
    assert grid.feature_mask().dtype == torch.long
    lattice = nx.convert_node_labels_to_integers(nx.grid_2d_graph(5, 4), ordering="sorted")
    assert GridGraph(5, 4) == FeatureGraph.from_networkx(lattice)
    assert repr(grid) == "GridGraph(height=2, width=3)"
    big = GridGraph(100, 100)
    assert big.num_edges == 2 * 100 * 99


def test_grid_patches_including_uneven_sizes() -> None:
    graph, mask = GridGraph.patches(4, 4, 2)
    assert graph == GridGraph(2, 2)
    assert torch.equal(mask, torch.tensor([[0, 0, 1, 1]] * 2 + [[2, 2, 3, 3]] * 2))
    graph, mask = GridGraph.patches(5, 7, (2, 3))
    assert (graph.height, graph.width) == (3, 3)
    assert mask.dtype == torch.long and mask.shape == (5, 7)
    want = torch.tensor(
        [
            [0, 0, 0, 1, 1, 1, 2],
            [0, 0, 0, 1, 1, 1, 2],
            [3, 3, 3, 4, 4, 4, 5],
            [3, 3, 3, 4, 4, 4, 5],
            [6, 6, 6, 7, 7, 7, 8],
        ]
    )
    assert torch.equal(mask, want)
    assert graph_from_feature_mask(mask) == graph


def test_superpixel_graph_from_a_label_map() -> None:
    labels = np.array(
        [
            [3, 3, 1, 1],
            [3, 3, 1, 1],
            [8, 8, 8, 1],
            [8, 8, 8, 2],
        ]
    )
    # 1 -> 0, 2 -> 1, 3 -> 2, 8 -> 3; 2 and 3 never touch.
    for given_labels in (labels, torch.from_numpy(labels), labels.tolist()):
        graph = SuperpixelGraph.from_segments(given_labels)
        assert graph.num_nodes == 4
        assert graph.edges() == [(0, 1), (0, 2), (0, 3), (1, 3), (2, 3)]
        assert graph.feature_mask.dtype == torch.long
        relabelled = torch.from_numpy(np.searchsorted([1, 2, 3, 8], labels))
        assert torch.equal(graph.feature_mask, relabelled)
    assert SuperpixelGraph.from_segments(np.zeros((3, 3), dtype=np.int32)).num_nodes == 1


def test_slic_on_astronaut() -> None:
    data = optional("skimage.data")
    transform = optional("skimage.transform")
    image = transform.resize(data.astronaut(), (64, 64), anti_aliasing=True)
    graph = SuperpixelGraph.slic(image, n_segments=30)
    assert graph.feature_mask.shape == (64, 64)
    assert graph.num_nodes == len(torch.unique(graph.feature_mask)) > 1
    assert torch.equal(torch.unique(graph.feature_mask), torch.arange(graph.num_nodes))
    assert nx.is_connected(graph.to_networkx())
    chw = SuperpixelGraph.slic(torch.from_numpy(image).permute(2, 0, 1), n_segments=30)
    assert chw == graph and torch.equal(chw.feature_mask, graph.feature_mask)
    gray = SuperpixelGraph.slic(torch.from_numpy(image[..., 0]), n_segments=20)
    assert gray.feature_mask.shape == (64, 64)


# ------------------------------------------------------- masks and inference


def test_graph_from_feature_mask() -> None:
    assert graph_from_feature_mask(torch.tensor([0, 0, 1, 2, 2, 2, 3])) == LineGraph(4)
    assert FeatureGraph.from_feature_mask(torch.tensor([[0, 0, 1, 2, 2, 2, 3]])) == LineGraph(4)
    patches = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]])
    assert graph_from_feature_mask(patches[None, None]).edges() == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert graph_from_feature_mask(np.array([0, 2, 0])).edges() == [(0, 2)]  # 1: isolated
    assert graph_from_feature_mask(np.array([0, 2, 0])).num_nodes == 3


def test_infer_graph_and_default_feature_mask() -> None:
    assert infer_graph((5, 7)) == LineGraph(7)
    assert infer_graph(torch.Size([2, 4, 5])) == GridGraph(4, 5)
    assert infer_graph((2, 3, 4, 5)) == GridGraph(4, 5)
    assert torch.equal(default_feature_mask((5, 7)), torch.arange(7)[None])
    assert torch.equal(default_feature_mask((2, 4, 5)), torch.arange(20).reshape(1, 4, 5))
    assert torch.equal(default_feature_mask((2, 3, 4, 5)), torch.arange(20).reshape(1, 1, 4, 5))
    for shape in ((5, 7), (2, 4, 5), (2, 3, 4, 5)):
        assert infer_graph(shape, default_feature_mask(shape)) == infer_graph(shape)
    words = torch.tensor([[0, 0, 1, 2, 2, 3]])
    assert infer_graph((3, 6), words) == LineGraph(4)
    assert infer_graph((3, 6), words[0]) == LineGraph(4)
    graph, patches = GridGraph.patches(4, 6, 2)
    assert infer_graph((2, 3, 4, 6), patches) == graph
    assert infer_graph((2, 3, 4, 6), patches.expand(1, 3, 4, 6)) == graph
    assert infer_graph((2, 4, 6), patches[None]) == graph


# ----------------------------------------------------------------- bad input


BAD_INPUT = [
    (lambda: FeatureGraph.from_adjacency(np.ones((2, 3))), ValueError, r"matrix.*\(2, 3\)"),
    (lambda: FeatureGraph.from_adjacency(np.ones(3)), ValueError, "matrix"),
    (lambda: FeatureGraph.from_adjacency([[1, 0], [0]]), ValueError, "matrix"),
    (lambda: FeatureGraph.from_adjacency(np.array([["a"]])), TypeError, "matrix"),
    (lambda: FeatureGraph.from_networkx("line"), TypeError, "g must be a networkx graph"),
    (lambda: FeatureGraph.from_networkx(nx.path_graph(3), [0, 1]), ValueError, "nodelist"),
    (lambda: FeatureGraph.from_networkx(nx.path_graph(3), [0, 1, 1]), ValueError, "nodelist"),
    (lambda: FeatureGraph.from_edges(3, [(0, 3)]), ValueError, r"edges.*0\.\.2"),
    (lambda: FeatureGraph.from_edges(3, [(0, -1)]), ValueError, "edges"),
    (lambda: FeatureGraph.from_edges(3, [(0, 1, 2)]), ValueError, "edges"),
    (lambda: FeatureGraph.from_edges(3, [(0.5, 1)]), TypeError, "edges"),
    (lambda: FeatureGraph.from_edges(-1, []), ValueError, "num_nodes"),
    (lambda: LineGraph(0), ValueError, "n must"),
    (lambda: LineGraph(2.5), TypeError, "n must"),
    (lambda: GridGraph(0, 3), ValueError, "height"),
    (lambda: GridGraph(3, True), TypeError, "width"),
    (lambda: GridGraph.patches(4, 4, 0), ValueError, "patch_size"),
    (lambda: GridGraph.patches(4, 4, (2,)), ValueError, "patch_size"),
    (lambda: GridGraph.patches(0, 4, 2), ValueError, "height"),
    (lambda: LineGraph(5).neighbourhood(7, 1), ValueError, r"i must be a node id in 0\.\.4"),
    (lambda: LineGraph(5).neighbourhood(0, -1), ValueError, "k must"),
    (lambda: LineGraph(5).neighbourhood(0, 1.5), TypeError, "k must"),
    (lambda: LineGraph(5).neighbourhoods(-2), ValueError, "k must"),
    (lambda: LineGraph(5).connected_subsets(0, 1, max_count=-1), ValueError, "max_count"),
    (lambda: LineGraph(5).components([7]), ValueError, "nodes"),
    (lambda: LineGraph(5).components(torch.ones(3, dtype=torch.bool)), ValueError, "nodes"),
    (lambda: LineGraph(5).boundary_size([0.5]), TypeError, "nodes"),
    (lambda: SuperpixelGraph.from_segments(np.zeros((2, 2, 2), int)), ValueError, "labels"),
    (lambda: SuperpixelGraph.from_segments(np.zeros((2, 2))), TypeError, "labels"),
    (lambda: SuperpixelGraph.slic(np.zeros((2, 2, 2, 2))), ValueError, "image"),
    (lambda: graph_from_feature_mask(torch.zeros(2, 2, 2, dtype=torch.long)), ValueError, "mask"),
    (lambda: graph_from_feature_mask(torch.zeros(4)), TypeError, "mask"),
    (lambda: graph_from_feature_mask(torch.tensor([0, -1])), ValueError, "mask"),
    (lambda: infer_graph((4,)), ValueError, r"cannot infer a graph for inputs of shape \(4,\)"),
    (lambda: infer_graph((1, 2, 3, 4, 5)), ValueError, "pass graph="),
    (lambda: default_feature_mask((4,)), ValueError, "cannot infer a graph"),
    (lambda: infer_graph((2, 5), torch.zeros(2, 5, dtype=torch.long)), ValueError, "feature_mask"),
    (lambda: infer_graph((2, 5), torch.zeros(4, dtype=torch.long)), ValueError, "feature_mask"),
    (
        lambda: infer_graph((2, 2, 3, 3), torch.arange(18).reshape(1, 2, 3, 3)),
        ValueError,
        "feature_mask differs between channels",
    ),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD_INPUT)
def test_bad_input_names_the_argument(
    call: Callable[[], object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------- property


@st.composite
def _graph_node_radius(draw: st.DrawFn) -> tuple[FeatureGraph, int, int]:
    n = draw(st.integers(1, 8))
    pairs = list(itertools.combinations(range(n), 2))
    edges = draw(st.lists(st.sampled_from(pairs), max_size=12)) if pairs else []
    return FeatureGraph.from_edges(n, edges), draw(st.integers(0, n - 1)), draw(st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(_graph_node_radius())
def test_connected_subsets_property(case: tuple[FeatureGraph, int, int]) -> None:
    graph, i, k = case
    g = graph.to_networkx()
    ball = set(graph.neighbourhood(i, k))
    rows = _rows(graph.connected_subsets(i, k))
    assert rows == _order(rows) and len(rows) == len(set(rows))
    for subset in rows:
        assert i in subset and set(subset) <= ball
        assert nx.is_connected(g.subgraph(subset))
    want = sum(1 for s in _brute_connected(g, ball) if i in s)
    assert len(rows) == want


# ------------------------------------------------------------ the public API of the plans


def _csr(members: torch.Tensor, offsets: torch.Tensor) -> list[tuple[int, ...]]:
    return [tuple(members[offsets[m] : offsets[m + 1]].tolist()) for m in range(len(offsets) - 1)]


@pytest.mark.parametrize("name", GRAPHS)
def test_neighbour_table_and_balls_match_networkx(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    table = graph.neighbour_table()
    for i in range(graph.num_nodes):
        row = table[i][table[i] >= 0].tolist()
        assert row == sorted(g.neighbors(i))
    for k in range(5):
        balls = graph.balls(k)
        assert balls is graph.balls(k)  # cached
        for i in range(graph.num_nodes):
            want = sorted(nx.single_source_shortest_path_length(g, i, cutoff=k))
            assert balls[i][balls[i] >= 0].tolist() == want
            assert graph.ball(i, k).tolist() == want == list(graph.neighbourhood(i, k))


@pytest.mark.parametrize("name", GRAPHS)
def test_connected_sets_in_balls_match_brute_force(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    n = graph.num_nodes
    for k in range(3):
        group, members, offsets = graph.connected_sets(torch.arange(n), graph.balls(k))
        sets = _csr(members, offsets)
        for i in range(n):
            got = [s for s, owner in zip(sets, group.tolist()) if owner == i]
            assert len(got) == len(set(got))
            assert all(list(s) == sorted(s) for s in got)
            want = [s for s in _brute_connected(g, set(graph.neighbourhood(i, k))) if i in s]
            assert _order(got) == want
        capped = _csr(*graph.connected_sets(torch.arange(n), graph.balls(k), max_size=2)[1:])
        assert sorted(capped) == sorted(s for s in sets if len(s) <= 2)
    with pytest.raises(ValueError, match="more than 3 connected subsets"):
        LineGraph(6).connected_sets([2], LineGraph(6).balls(2)[2:3], max_count=3)


@pytest.mark.parametrize("name", GRAPHS)
def test_all_connected_sets_and_boundaries_match_brute_force(name: str) -> None:
    graph = GRAPHS[name]
    g = graph.to_networkx()
    members, offsets = graph.all_connected_sets()
    sets = _csr(members, offsets)
    assert _order(sets) == _brute_connected(g)
    which, node = graph.boundaries(members, offsets)
    sizes = graph.boundary_sizes(members, offsets)
    for m, s in enumerate(sets):
        assert node[which == m].tolist() == sorted(nx.node_boundary(g, s))
        assert int(sizes[m]) == graph.boundary_size(s)
    with pytest.raises(ValueError, match="more than 10 connected subsets"):
        LineGraph(6).all_connected_sets(max_count=10)


# ------------------------------------------------------------------ caches


def test_graph_caches_are_bounded_least_recently_used() -> None:
    assert len(GridGraph(2, 2)._cache) == 0 and caches_module.MAX_CACHE_ENTRIES >= 1024
    graph = FeatureGraph.from_edges(6, LineGraph(6).edges())
    graph._cache = caches_module.GraphCache(max_entries=3)
    first = graph.neighbourhoods(1)
    graph.neighbourhoods(2)
    graph.neighbourhoods(1)  # used again: now the most recent
    graph.neighbourhoods(3)
    graph.neighbourhoods(4)  # evicts k=2, the least recently used
    assert len(graph._cache) == 3
    assert graph.neighbourhoods(1) is first
    assert ("neighbourhoods", 2) not in graph._cache
    again = graph.neighbourhoods(2)  # recomputed, equal
    assert torch.equal(again, LineGraph(6).neighbourhoods(2))


def test_clear_caches_drops_every_graph_result_and_results_stay_equal() -> None:
    grid, line = GridGraph(3, 4), LineGraph(5)
    subsets, balls, distances = grid.connected_subsets(5, 2), line.balls(2), grid.distances()
    assert grid.connected_subsets(5, 2) is subsets
    graphs_package.clear_caches()
    assert len(grid._cache) == 0 and len(line._cache) == 0
    assert grid.connected_subsets(5, 2) is not subsets
    assert torch.equal(grid.connected_subsets(5, 2), subsets)
    assert torch.equal(line.balls(2), balls)
    np.testing.assert_array_equal(grid.distances(), distances)
    assert graphs_package.clear_caches is caches_module.clear_caches


def test_cached_results_are_cpu_tensors_and_arrays() -> None:
    grid = GridGraph(3, 3)
    grid.neighbourhoods(1), grid.balls(2), grid.connected_subsets(4, 1), grid.distances()
    grid.neighbour_table(), grid.all_connected_subsets(), grid.neighbourhood(0, 1)
    values = list(grid._cache._entries.values())
    assert len(values) >= 7
    for value in values:
        assert not isinstance(value, torch.Tensor) or value.device.type == "cpu"


# ------------------------------------------------------------------ structure

GRAPH_MODULES = sorted(path.stem for path in Path(graphs_package.__file__).parent.glob("*.py"))


def _graph_imports(module: str) -> list[tuple[str, list[str]]]:
    """``(imported module, names)`` of every relative import in a graphs module, nested too."""
    path = Path(graphs_package.__file__).parent / f"{module}.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:  # from . import bitsets
                found += [(alias.name, []) for alias in node.names]
            else:
                found.append((node.module, [alias.name for alias in node.names]))
    return found


def test_graph_modules_import_downwards_only_and_no_private_names() -> None:
    edges = {name: {target for target, _ in _graph_imports(name)} for name in GRAPH_MODULES}
    # depth-first search for a cycle, function-level imports included
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in edges.get(name, ()):
            assert state.get(target) != 1, f"import cycle: {' -> '.join([*path, target])}"
            if target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in GRAPH_MODULES:
        if name not in state:
            visit(name, [name])
    private = [
        (name, target, imported)
        for name in GRAPH_MODULES
        for target, names in _graph_imports(name)
        for imported in names
        if imported.startswith("_")
    ]
    assert not private, f"private names imported across graphs modules: {private}"
    assert "standard" not in edges["feature_graph"]


def test_one_call_empties_every_cache_of_the_package():
    import captum_graphshap as cg
    from captum_graphshap.attr.caches import cached_functions

    model = torch.nn.Linear(6, 1)
    x = torch.randn(2, 6)
    first = cg.LShapley(model).attribute(x, target=0, k=1)
    cg.ExactShapley(model).attribute(x, target=0, return_evaluations=True)
    cg.MyersonValue(model).attribute(x, target=0)
    functions = cached_functions()
    assert len(functions) >= 10  # the plans', the engine's and the result types' caches
    assert sum(f.cache_info().currsize for f in functions) > 0
    graph = LineGraph(6)
    before = graph.neighbourhoods(1)
    cg.clear_caches()
    assert [f.cache_info().currsize for f in functions] == [0] * len(functions)
    # the graph's own cache was emptied too: its neighbourhoods are computed anew
    assert graph.neighbourhoods(1) is not before
    torch.testing.assert_close(cg.LShapley(model).attribute(x, target=0, k=1), first)
