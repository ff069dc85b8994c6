"""`nmt score` (cli/score.py): per-token scores as text and JSON, an ensemble of a model
with itself, and files of different lengths as a one-line error."""

from __future__ import annotations

import json

import pytest

from transformer_nmt.cli import main


def test_nmt_score_per_token_text_and_json(model_file, tmp_path, capsys):
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("the house is small\na dog runs\n", encoding="utf-8")
    tgt.write_text("the cat sleeps\nchildren play\n", encoding="utf-8")
    common = ["score", "--model", str(model_file), "--src", str(src), "--tgt", str(tgt)]
    assert main(common + ["--per-token"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    score, token_scores = lines[0].split(" ||| ")
    assert main(common + ["--raw", "--format", "json", "--output", str(tmp_path / "s.json")]) == 0
    first = json.loads((tmp_path / "s.json").read_text(encoding="utf-8").splitlines()[0])
    assert [float(x) for x in token_scores.split()] == pytest.approx(first["token_scores"],
                                                                      abs=1e-4)
    assert first["score"] == first["log_prob"] == pytest.approx(sum(first["token_scores"]),
                                                                abs=1e-3)
    assert float(score) > first["log_prob"]  # normalized: divided by lp > 1
    ensemble = ["score", "--model", str(model_file), str(model_file), "--src", str(src),
                "--tgt", str(tgt), "--per-token"]
    assert main(ensemble) == 0  # a model with itself scores as the model
    assert capsys.readouterr().out.splitlines() == lines
    tgt.write_text("one line\n", encoding="utf-8")
    assert main(common) == 2
    assert "fewer lines" in capsys.readouterr().err
