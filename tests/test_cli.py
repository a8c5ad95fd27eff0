"""The demo command runs end to end and its numbers are right."""

from __future__ import annotations

import csv

import torch

from captum_graphshap.cli import FEATURES, main, train_model


def test_demo_writes_a_table_whose_exact_column_is_efficient(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    assert "exact" in printed and "myerson" in printed
    rows = list(csv.DictReader((tmp_path / "demo_attributions.csv").open()))
    assert len(rows) == 3 * len(FEATURES)
    model, examples = train_model(1)
    with torch.no_grad():
        gains = (model(examples) - model(torch.zeros(1, len(FEATURES))))[:, 0]
    for n in range(3):
        total = sum(float(r["exact_shapley"]) for r in rows if int(r["example"]) == n)
        assert abs(total - float(gains[n])) < 1e-4
        # The dummy feature gets (almost) nothing from the trained model.
        noise = next(
            float(r["exact_shapley"])
            for r in rows
            if int(r["example"]) == n and r["feature"] == "noise"
        )
        assert abs(noise) < 0.1 * max(abs(float(gains[n])), 1.0)
