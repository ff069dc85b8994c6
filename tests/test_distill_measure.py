"""Stage 5 of `nmt distill` (distill/measure.py) on rows made by hand: the teacher's beam
search against the student's greedy one, the report's table and its lines as served, and
a model's size. (Both measured for real, in their own processes:
tests/test_distill_pipeline.py.)"""

from __future__ import annotations

import pytest

from transformer_nmt.distill.measure import format_report, model_size, served
from transformer_nmt.model_file import build_model, read_model_file


def row(runtime: str, shortlist: bool, speed: float, bleu: float) -> dict:
    """A measured model: beam search at `speed` sentences per second and `bleu`, greedy
    search twice as fast and 1 BLEU lower."""
    return {"runtime": runtime, "shortlist": shortlist, "sentences": 24,
            "batch_sentences": 8, "parameters": 1234567, "megabytes": 4.94, "bleu": bleu,
            "chrf": 50.0, "beam_bleu": bleu, "beam_chrf": 50.0,
            "beam_sentences_per_second": speed, "greedy_bleu": bleu - 1,
            "greedy_chrf": 49.0, "greedy_sentences_per_second": 2 * speed,
            "peak_memory_mb": 300.4}


ROWS = {"teacher": row("CTranslate2 int8", False, 10.0, 30.0),
        "student": row("CTranslate2 int8", True, 40.0, 28.5)}


def test_the_teachers_beam_search_against_the_students_greedy_one():
    comparison = served(ROWS, beam=4)
    assert comparison["teacher"] == {"search": "beam 4", "runtime": "CTranslate2 int8",
                                     "shortlist": False, "bleu": 30.0, "chrf": 50.0,
                                     "sentences_per_second": 10.0}
    assert comparison["student"]["search"] == "greedy"
    assert comparison["student"]["sentences_per_second"] == 80.0
    assert comparison["speedup"] == 8.0
    assert comparison["bleu_difference"] == pytest.approx(-2.5)
    assert (comparison["sentences"], comparison["batch_sentences"]) == (24, 8)


def test_the_report_has_a_row_per_model_then_the_comparison_as_served():
    table = format_report(ROWS).splitlines()
    assert table[0].split() == ["params", "MB", "BLEU", "chrF", "greedy", "BLEU", "greedy",
                                "sent/s", "beam", "sent/s", "peak", "MB"]
    assert table[1].split() == ["teacher", "1,234,567", "4.9", "30.0", "50.0", "29.0",
                                "20.0", "10.0", "300"]
    assert len(table) == 3 and len({len(line) for line in table}) == 1  # aligned columns
    lines = format_report(ROWS, served(ROWS, beam=4)).splitlines()
    assert lines[:3] == table
    assert lines[3:] == [
        "as served, the same 24 lines in batches of at most 8:",
        "  teacher, beam 4 on CTranslate2 int8: BLEU 30.0, chrF 50.0, 10.0 sent/s",
        "  student, greedy on CTranslate2 int8, its shortlist: BLEU 27.5, chrF 49.0, "
        "80.0 sent/s",
        "  the student: 8.00x the teacher's sentences per second, -2.5 BLEU"]


def test_a_models_size_counts_an_ensembles_members_each(model_file):
    parameters = sum(p.numel() for p in build_model(read_model_file(model_file),
                                                    model_file).parameters())
    one = model_size([model_file])
    assert one["parameters"] == parameters and one["presets"] == ["tiny"]
    assert one["megabytes"] == model_file.stat().st_size / 1e6
    two = model_size([model_file, model_file])
    assert two["parameters"] == 2 * parameters and two["megabytes"] == 2 * one["megabytes"]
