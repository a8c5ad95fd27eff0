"""The graph of a prompt's features: tokens, or template segments, in text order.

For a :class:`~captum.attr.TextTokenInput` the features are the prompt's
tokens (those not skipped) and the graph is a line over them, the graph the
L-/C-Shapley classes infer from a ``(1, n)`` input. For a
:class:`~captum.attr.TextTemplateInput` the features are the template's
values (or their mask groups) in the order of ``values``, which need not be
their order in the text: ``"{1} lives in {0}"`` puts value 1 first, and a
value may appear twice. The inferred line over value indices would then join
segments that are not neighbours in the prompt. :func:`prompt_graph` finds
the text order by formatting the template with sentinel values and joins
segments that follow each other in the prompt.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from captum.attr import TextTemplateInput, TextTokenInput

from ..graphs import FeatureGraph, LineGraph

_SENTINEL = re.compile("\ue000(\\d+)\ue001")


def segment_order(inp: TextTemplateInput) -> list[int]:
    """Interpretable feature ids of ``inp``'s segments in the order they appear in its text."""
    markers = [f"\ue000{i}\ue001" for i in range(len(inp.values))]
    if inp.dict_keys:
        text = inp.format_fn(**dict(zip(inp.dict_keys, markers)))
    else:
        text = inp.format_fn(*markers)
    values = [int(match.group(1)) for match in _SENTINEL.finditer(text)]
    if inp.mask is None:
        return values
    return [inp.formatted_mask[value] for value in values]


def prompt_graph(inp: Any) -> FeatureGraph:
    """The feature graph of a Captum text input: a line in the prompt's order.

    Args:
        inp: a ``TextTokenInput`` (a line over its interpretable tokens) or a
            ``TextTemplateInput`` (segments adjacent when one follows the
            other in the formatted prompt; a :class:`~captum_graphshap.LineGraph`
            when that order is the order of ``values``).

    Returns:
        A graph whose nodes are the interpretable features of ``inp``.

    Example:
        >>> from captum.attr import TextTemplateInput
        >>> from captum_graphshap.llm import prompt_graph
        >>> prompt_graph(TextTemplateInput("{1} lives in {0}", ["Paris", "Ana"])).edges()
        [(0, 1)]
        >>> prompt_graph(TextTemplateInput("{2}, {0} and {1}", ["a", "b", "c"])).edges()
        [(0, 1), (0, 2)]
    """
    if isinstance(inp, TextTokenInput):
        return LineGraph(int(inp.n_itp_features))
    if not isinstance(inp, TextTemplateInput):
        raise TypeError(
            f"prompt_graph takes a TextTokenInput or TextTemplateInput, got {type(inp).__name__}; "
            "pass graph= yourself for other inputs."
        )
    n = int(inp.n_itp_features)
    order = segment_order(inp)
    edges = {(min(a, b), max(a, b)) for a, b in itertools.pairwise(order) if a != b}
    if edges == {(i, i + 1) for i in range(n - 1)}:
        return LineGraph(n)
    return FeatureGraph.from_edges(n, sorted(edges))
