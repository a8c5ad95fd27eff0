"""``graphshap demo`` runs end to end and its numbers are right."""

from __future__ import annotations

import base64
import contextlib
import io
import re
import sys
import types

import pytest
import torch

import captum_graphshap.apps
from captum_graphshap.apps import cli, demo

from .optional_deps import optional

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """Run ``graphshap demo --quick`` once through ``main``; keep the result object."""
    optional("sklearn")
    out = tmp_path_factory.mktemp("report")
    captured: list[demo.DemoResult] = []
    run_demo = demo.run_demo

    def recording(*args, **kwargs):
        captured.append(run_demo(*args, **kwargs))
        return captured[-1]

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(demo, "run_demo", recording)
        status = cli.main(["demo", "--quick", "--out", str(out), "--seed", "1"])
    assert status == 0
    return out, printed.getvalue(), captured[0]


def test_demo_writes_a_report_with_its_figures(quick_demo):
    out, printed, result = quick_demo
    report = out / "report.html"
    assert result.report == report and report.exists()
    page = report.read_text()
    for name in (*demo.METHODS, demo.RANDOM):
        assert name in page and name in printed
    # One self-contained file: every image is embedded, the figures' own bytes.
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) >= 2
    embedded = [base64.b64decode(s.removeprefix("data:image/png;base64,")) for s in sources]
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    for figure in ("heatmaps.png", "masking.png"):
        assert (out / figure).read_bytes()[:8] == PNG
        assert (out / figure).read_bytes() in embedded
    assert "The table has one row per method" in page and "one symmetric colour scale" in page
    assert str(report) in printed
    assert "masking AUC" in printed
    assert "text section skipped" in printed  # --quick has no text section


def test_demo_model_is_trained_and_attributions_have_the_input_shape(quick_demo):
    _, _, result = quick_demo
    assert result.accuracy > 0.85
    n = result.examples.shape[0]
    assert result.examples.shape == (n, 1, 8, 8) and n >= 4
    assert float(result.examples.min()) >= 0 and float(result.examples.max()) <= 1
    for name in (*demo.METHODS, demo.RANDOM):
        attributions = result.attributions[name]
        assert attributions.shape == (n, 1, 8, 8)
        assert bool(torch.isfinite(attributions).all())
        assert float(attributions.abs().max()) > 0


def test_exact_shapley_on_four_patches_is_efficient(quick_demo):
    _, _, result = quick_demo
    # Sum of the 4 patch values = log p(x) - log p(0) of the predicted class.
    torch.testing.assert_close(result.exact_total, result.exact_gain, atol=1e-4, rtol=0)
    assert float(result.exact_gain.abs().min()) > 0.1  # the check is not 0 == 0
    exact = result.attributions[demo.EXACT_PATCHES][:, 0]
    # One value per 4x4 patch, repeated on its pixels.
    blocks = exact.reshape(-1, 2, 4, 2, 4)
    assert torch.all(blocks == blocks[:, :, :1, :, :1])


def test_samplers_get_c_shapley_k1_budget_and_counts_are_stated(quick_demo):
    _, printed, result = quick_demo
    evaluations = result.evaluations
    budget = evaluations[demo.C_SHAPLEY_1]
    assert evaluations[demo.CAPTUM_KERNEL] == budget
    # ShapleyValueSampling spends 64 evaluations per permutation (+1).
    assert abs(evaluations[demo.CAPTUM_SAMPLING] - budget) <= 32
    assert evaluations[demo.EXACT_PATCHES] == 2**4
    # k=2 needs far more connected sets around each pixel than k=1.
    assert evaluations[demo.C_SHAPLEY_2] > 10 * budget > 10 * evaluations[demo.L_SHAPLEY]
    assert f"{budget:.0f}" in printed
    # the prose quotes the counts of the table, of the same run
    used = f"used {evaluations[demo.CAPTUM_SAMPLING]:.0f}, KernelShap {budget:.0f}."
    assert used in printed and used in result.report.read_text()
    assert (evaluations[demo.CAPTUM_SAMPLING] - 1) % 64 == 0  # whole permutations of 64


def test_word_values_are_printed_with_their_scale(quick_demo, tmp_path):
    import dataclasses
    import shutil

    out, _, result = quick_demo
    for figure in ("heatmaps.png", "masking.png"):
        shutil.copy(out / figure, tmp_path / figure)
    words = (["a", "dull", "film"], [0.25, -0.5, 0.0], "negative")
    report = tmp_path / "report.html"
    demo.write_report(
        dataclasses.replace(result, report=report, text=[words]), "heatmaps.png", "masking.png"
    )
    page = report.read_text()
    # every value is on the page, not only in a tooltip, and the scale is +-0.50
    for word, value in zip(words[0], words[1]):
        assert f"{word}<small>{value:+.2f}</small>" in page
    assert "scale: -0.50" in page and "+0.50 (white: 0)" in page


def test_masking_curves_start_at_zero_and_c_shapley_beats_random(quick_demo):
    _, _, result = quick_demo
    n = result.examples.shape[0]
    for curve in result.curves.values():
        assert curve.shape == (n, len(result.fractions))
        assert torch.all(curve[:, 0] == 0)
    # Masking well-ranked pixels lowers the log-odds of the predicted class much
    # more than masking random pixels (most of which are blank background).
    for name in demo.METHODS:
        assert result.auc[name] < result.auc[demo.RANDOM] - 0.5, name
        assert result.curves[name][:, -1].mean() < 0, name


def test_demo_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["demo", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert "digits" in text and "masking" in text and "--quick" in text and "--out" in text


def test_missing_scikit_learn_names_the_extra(monkeypatch, tmp_path, capsys):
    # A None entry in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    assert cli.main(["demo", "--quick", "--out", str(tmp_path)]) == 1
    assert 'pip install "captum-graphshap[demo]"' in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()


def test_text_section_uses_explain_sentiment(monkeypatch, capsys):
    calls = []

    def explain_sentiment(texts, k=2, method="c_shapley"):
        calls.append((list(texts), k, method))
        return [
            types.SimpleNamespace(
                words=text.split(), attributions=torch.ones(len(text.split())), label="positive"
            )
            for text in texts
        ]

    fake = types.ModuleType("captum_graphshap.apps.minilm")
    fake.explain_sentiment = explain_sentiment  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "captum_graphshap.apps.minilm", fake)
    monkeypatch.setattr(captum_graphshap.apps, "minilm", fake, raising=False)
    rows, note = demo.text_section(["good film", "bad"])
    assert note is None and calls == [(["good film", "bad"], 2, "c_shapley")]
    assert rows == [(["good", "film"], [1.0, 1.0], "positive"), (["bad"], [1.0], "positive")]
    assert "good(+1.00)" in capsys.readouterr().out


def test_text_section_is_skipped_without_the_text_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "captum_graphshap.apps.minilm", None)
    monkeypatch.delattr(captum_graphshap.apps, "minilm", raising=False)
    rows, note = demo.text_section(["good film"])
    assert rows is None and note is not None and "captum-graphshap[text]" in note


def test_report_says_why_the_ranking_looks_as_it_does(quick_demo):
    out, printed, result = quick_demo
    page = (out / "report.html").read_text()
    assert "Why the ranking looks as it does" in page and "Why the ranking" in printed
    check = result.locality
    n = result.examples.shape[0]
    assert check is not None and 0.85 < check.accuracy <= 1
    # The second setting uses the same 8x8 grid and k, so the same budget.
    assert check.evaluations == result.evaluations[demo.C_SHAPLEY_1]
    assert check.captum_evaluations == result.evaluations[demo.CAPTUM_SAMPLING]
    assert f"({check.evaluations:.0f} and {check.captum_evaluations:.0f} evaluations" in page
    for areas in (check.c_shapley, check.captum):
        assert areas.shape == (n,) and bool(torch.isfinite(areas).all())
        assert float(areas.mean()) < result.auc[demo.RANDOM] - 0.5
    mean, _, wins = demo.paired_difference(check.c_shapley, check.captum)
    assert f"{mean:+.2f}" in page and f"lower on {wins} of {n} digits" in page


def test_paired_difference_and_positive_share_closed_forms():
    mean, error, wins = demo.paired_difference(
        torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.0, 5.0])
    )
    # differences -1, 0, -2: mean -1, sample SD 1, two of three lower
    assert mean == -1.0 and abs(error - 3**-0.5) < 1e-12 and wins == 2
    assert demo.positive_share(torch.tensor([[1.0, 0.0, -1.0, 2.0], [0.0, 0.0, 0.0, 3.0]])) == 0.375


def test_version_prints_the_package_version_without_loading_torch():
    import subprocess

    import captum_graphshap

    code = (
        "import sys\nfrom captum_graphshap.apps import cli\n"
        "try:\n    cli.main(['--version'])\nexcept SystemExit as stop:\n"
        "    print('exit', stop.code, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        f"graphshap {captum_graphshap.__version__}",
        "exit 0 False",
    ]


def test_report_leads_with_accuracy_against_exact_values_at_equal_cost(quick_demo):
    _, printed, result = quick_demo
    page = result.report.read_text()
    headline = page.index("Accuracy against exact Shapley values, at equal cost")
    assert headline < page.index("Masking experiment")
    assert "accuracy against exact Shapley values at equal cost" in printed
    rows = result.equal_cost
    assert [row.name for row in rows] == [
        demo.accuracy.OURS_KERNEL,
        demo.accuracy.OURS_SAMPLING,
        demo.accuracy.THEIRS_KERNEL,
        demo.accuracy.THEIRS_SAMPLING,
    ]
    for row in rows:  # every estimator within the same budget, a finite error, on the page
        assert demo.accuracy.EQUAL_BUDGET - 16 <= row.evaluations <= demo.accuracy.EQUAL_BUDGET
        assert 0 <= row.error < float("inf")
        assert f"<td>{row.error:.3f}</td>" in page


def test_relative_error_is_zero_for_the_exact_values_and_scales():
    from captum_graphshap.apps.demo.accuracy import relative_error

    exact = torch.arange(1.0, 65.0).reshape(1, 1, 8, 8)
    assert relative_error(exact, exact) == 0.0
    # one value per 2x2 patch is read: doubling every value is an error of exactly 1
    assert relative_error(2 * exact, exact) == pytest.approx(1.0)


def test_report_says_which_digits_it_shows_and_fits_a_phone(quick_demo, tmp_path):
    import dataclasses
    import shutil

    out, _, result = quick_demo
    page = result.report.read_text()
    n = result.examples.shape[0]
    assert f"All {n} explained digits are shown." in page
    assert '<meta name="viewport" content="width=device-width' in page
    assert page.count('<div class="wide"><table>') == page.count("<table>") == 2
    for figure in ("heatmaps.png", "masking.png"):
        shutil.copy(out / figure, tmp_path / figure)
    report = tmp_path / "report.html"
    many = dataclasses.replace(result, report=report, examples=result.examples.repeat(3, 1, 1, 1))
    demo.write_report(many, "heatmaps.png", "masking.png", shown=4)
    assert f"The first 4 of the {3 * n} explained digits are shown" in report.read_text()


def test_report_colours_are_the_red_blue_map():
    from captum_graphshap.apps.demo import report

    assert report.DIVERGING_CMAP == "RdBu"
    assert report._colour(1.0) == "rgb(33,102,172)"  # blue: for
    assert report._colour(-1.0) == "rgb(178,24,43)"  # red: against
    assert report._colour(0.0) == "rgb(255,255,255)"
    assert report._colour(0.5) == "rgb(144,178,214)"  # half way to blue (178.5, 213.5 rounded)
