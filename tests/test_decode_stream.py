"""Translating a stream of lines: output formats and the speed report (decode/stream.py)."""

from __future__ import annotations

from transformer_nmt.decode.stream import SpeedReport, format_translations
from transformer_nmt.decode.translator import Translation


def test_output_formats():
    translations = [Translation("ein Haus", -0.51234, [5, 6], [(0, 0), (1, 1)]),
                    Translation("Haus", -0.9, [6], [(1, 0)])]
    assert format_translations(7, translations, nbest=False) == ["ein Haus ||| 0-0 1-1"]
    assert format_translations(7, translations, nbest=True) == [
        "7 ||| ein Haus ||| -0.5123 ||| 0-0 1-1", "7 ||| Haus ||| -0.9000 ||| 1-0"]
    plain = [Translation("ein Haus", -0.5, [5, 6])]
    assert format_translations(0, plain, nbest=False) == ["ein Haus"]


def test_the_speed_report_counts_lines_and_the_best_translations_tokens(capsys):
    # Made-up translations: the tiny test models often stop at once, counting nothing.
    report = SpeedReport()
    made_up = [[Translation("a b c", -1.0, [5, 6, 7]), Translation("a", -2.0, [5])],
               [Translation("", 0.0, [])], [Translation("d e", -1.5, [8, 9])]]
    assert list(report.counted(iter(made_up))) == made_up
    report.report()
    assert capsys.readouterr().err.startswith("translated 3 lines (5 subword tokens) in ")
