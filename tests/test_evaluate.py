"""Scoring (transformer_nmt.evaluate) and `nmt evaluate`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import BLEU

from decode_fixtures import FEATURES_BY_HAND, make_model_file, sentences, with_calibration
from train_fixtures import TINY
from transformer_nmt.cli import main
from transformer_nmt.model_file import model_languages, read_model_file
from transformer_nmt.evaluate import (confidence_report, evaluate_files, score,
                                      sentence_chrf, split_compounds, tokenize_for_bleu)

REFERENCES = [
    "Der Arbeits-Platz ist in Gutach.",
    "Sie sind nicht einmal 100 Meter voneinander entfernt: Am Dienstag ging die neue Ampel in Betrieb.",
    "Zwei Anlagen so nah beieinander: Absicht oder Schildbürgerstreich?",
    "Diese Frage hat Gutachs Bürgermeister gestern klar beantwortet.",
    "\"Damals war er noch nicht hier\", sagte sie.",
]
HYPOTHESES = [
    "Der Arbeitsplatz ist in Gutach.",
    "Sie sind keine 100 Meter voneinander entfernt: Am Dienstag ging die neue Fußgänger-Ampel in Betrieb.",
    "Zwei Ampeln so nah beieinander: Absicht oder Schildbürgerstreich?",
    "Diese Frage beantwortete Gutachs Bürgermeister gestern deutlich.",
    "\"Damals war er nicht hier\", sagte sie.",
]


@pytest.fixture()
def files(tmp_path) -> tuple[Path, Path]:
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    return hyp, ref


def sacrebleu_cli(*args: str) -> float:
    result = subprocess.run([sys.executable, "-m", "sacrebleu", *args, "-b", "-w", "6"],
                            capture_output=True, text=True, check=True)
    return float(result.stdout)


def test_bleu_and_chrf_equal_the_sacrebleu_command(files):
    hyp, ref = files
    result = evaluate_files(hyp, ref, "de")
    assert round(result["bleu"], 6) == sacrebleu_cli(str(ref), "-i", str(hyp))
    assert round(result["chrf"], 6) == sacrebleu_cli(str(ref), "-i", str(hyp), "-m", "chrf")
    assert result["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert 0 < result["bleu"] < 100


def test_compound_splitting_on_known_strings():
    assert split_compounds("Arbeits-Platz") == "Arbeits ##AT##-##AT## Platz"
    assert split_compounds("die 2-Zimmer-Wohnung") == \
        "die 2 ##AT##-##AT## Zimmer ##AT##-##AT## Wohnung"
    # Matches do not overlap: a one-character part between two hyphens is used up.
    assert split_compounds("A-1-B") == "A ##AT##-##AT## 1-B"
    assert split_compounds("a - b -c d-") == "a - b -c d-"


def test_paper_tokenization():
    assert tokenize_for_bleu(["Der Arbeits-Platz, sagte sie."], "de") == \
        ["Der Arbeits ##AT##-##AT## Platz , sagte sie ."]
    assert tokenize_for_bleu(["The work-place, she said."], "en") == \
        ["The work-place , she said ."]


def test_unicode_punctuation_is_replaced_before_tokenizing_as_get_ende_bleu_does():
    # Full-width comma and colon, an ellipsis character, and curly quotes become ASCII
    # before Moses tokenizes, so they score like their ASCII forms.
    assert tokenize_for_bleu(["Ja\uff0c gut\uff1a so\u2026"], "de") == ["Ja , gut : so ..."]
    assert tokenize_for_bleu(["\u201eHallo\u201c"], "de") == tokenize_for_bleu(['\u201eHallo"'], "de")


def test_tokenized_bleu_is_bleu_of_the_tokens():
    hyp = "Die neue Fußgänger-Ampel ist seit Dienstag in Betrieb."
    ref = "Die neue Ampel ist seit Dienstag in Betrieb."
    tokens_hyp = "Die neue Fußgänger ##AT##-##AT## Ampel ist seit Dienstag in Betrieb ."
    tokens_ref = "Die neue Ampel ist seit Dienstag in Betrieb ."
    expected = BLEU(tokenize="none", smooth_method="none").corpus_score([tokens_hyp], [[tokens_ref]])
    assert score([hyp], [ref], "de")["tokenized_bleu"] == pytest.approx(expected.score)
    assert score(REFERENCES, REFERENCES, "de")["tokenized_bleu"] == pytest.approx(100.0)
    assert score(HYPOTHESES, REFERENCES)["tokenized_bleu"] is None


def test_misaligned_files_are_a_user_error(files, capsys):
    hyp, ref = files
    ref.write_text("\n".join(REFERENCES[:3]) + "\n", encoding="utf-8")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 2
    assert "5 hypotheses but 3 references" in capsys.readouterr().err


def test_evaluate_files_from_the_command_line(files, tmp_path, capsys):
    hyp, ref = files
    json_path = tmp_path / "scores.json"
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de",
                 "--json", str(json_path)]) == 0
    table = capsys.readouterr().out
    assert "BLEU" in table and "chrF2" in table and "tokenized BLEU" in table
    assert json.loads(json_path.read_text())["tgt_lang"] == "de"


def small_data(directory: Path, count: int = 4) -> Path:
    """A data directory holding only an en-de test split of `count` random sentences."""
    data = directory / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps(
        {"format_version": 1, "src_lang": "en", "tgt_lang": "de"}), encoding="utf-8")
    (data / "test.en").write_text("\n".join(sentences(count, seed=8)) + "\n", encoding="utf-8")
    (data / "test.de").write_text("\n".join(sentences(count, seed=9)) + "\n", encoding="utf-8")
    return data


def test_evaluate_a_model_on_a_data_directory(tmp_path, capsys):
    model = make_model_file(tmp_path)
    data = small_data(tmp_path)
    threads = torch.get_num_threads()
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--beam", "2",
                 "--max-len-b", "5"]) == 0
    assert torch.get_num_threads() == threads  # its workers' share of the cores is undone
    captured = capsys.readouterr()
    assert "4 sentences" in captured.out and "tokenized BLEU" in captured.out
    # How fast the split was translated, on stderr as `nmt translate` says it.
    assert re.search(r"^translated 4 lines \(\d+ subword tokens\) into .*model\.test\.hyp in ",
                     captured.err, re.MULTILINE)
    result = json.loads((tmp_path / "model.eval-test.json").read_text())
    assert result["split"] == "test" and result["decode"]["beam"] == 2
    assert "speed" not in result  # the file holds the scores, which a rerun reproduces
    assert len((tmp_path / "model.test.hyp").read_text(encoding="utf-8").split("\n")) == 5
    assert result["confidence"] is None and "confidence" not in captured.out  # uncalibrated


def test_the_confidence_report_ranks_sentences_by_confidence():
    references = ["the house is small .", "a dog runs in the garden .", "the cat sleeps .",
                  "children play near old trees ."]
    hypotheses = ["the house is small .", "a dog runs in a park .", "the cat .", "green ."]
    chrf = sentence_chrf(hypotheses, references)
    assert chrf[0] == 100 and chrf == sorted(chrf, reverse=True)
    report = confidence_report([0.9, 0.7, 0.4, 0.1], hypotheses, references, threshold=50)
    assert report["pearson_chrf"] > 0.8 and report["spearman_chrf"] == 1
    assert [entry["sentences"] for entry in report["top"].values()] == [2, 4, 4, 4]
    assert list(report["top"]) == ["50%", "80%", "90%", "100%"]
    assert report["top"]["50%"]["bleu"] > report["top"]["100%"]["bleu"]
    assert report["mean_confidence"] == 0.525
    assert report["reaching_threshold"] == sum(value >= 50 for value in chrf) / 4
    reversed_report = confidence_report([0.1, 0.4, 0.7, 0.9], hypotheses, references, 50)
    assert reversed_report["spearman_chrf"] == -1


def test_evaluate_reports_how_well_a_calibrated_models_confidence_ranks(tmp_path, capsys):
    model = with_calibration(make_model_file(tmp_path), tmp_path / "calibrated.pt", 0.0,
                             FEATURES_BY_HAND)
    data = small_data(tmp_path, count=10)
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--beam", "2",
                 "--max-len-b", "5"]) == 0
    printed = capsys.readouterr().out
    assert "confidence on 10 sentences: correlation with sentence chrF2" in printed
    assert "the 80% most confident (8 sentences)" in printed
    report = json.loads((tmp_path / "calibrated.eval-test.json").read_text())["confidence"]
    assert report["sentences"] == 10 and set(report["top"]) == {"50%", "80%", "90%", "100%"}


def test_empty_hypotheses_and_references_are_an_error_not_a_traceback(tmp_path, capsys):
    (tmp_path / "hyp").write_text("", encoding="utf-8")
    (tmp_path / "ref").write_text("", encoding="utf-8")
    assert main(["evaluate", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"),
                 "--tgt-lang", "de"]) == 2
    assert "no sentences to score" in capsys.readouterr().err


def test_a_model_is_not_evaluated_on_data_of_the_other_direction(tiny_data, tmp_path, capsys):
    """A model file records the languages of the data it was trained on; scoring it on
    the reverse direction would give a meaningless BLEU without a word."""
    run = tmp_path / "run"
    assert main(["train", "--data", str(tiny_data), "--out", str(run), *TINY,
                 "--max-steps", "1"]) == 0
    model = run / "checkpoint_last.pt"
    assert model_languages(read_model_file(model)) == ("en", "xx")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", str(tiny_data),
                 "--src-lang", "xx", "--tgt-lang", "en"]) == 2
    assert "translates en-xx, but" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(model), "--data", str(tiny_data), "--beam", "1",
                 "--max-len-b", "2"]) == 0
