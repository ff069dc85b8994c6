"""Translating a stream of lines: output formats, text streams, all-or-nothing files and
the speed report (decode/text/output.py)."""

from __future__ import annotations

import io
import json
import re

import pytest

from decode_fixtures import SHORT, sentences
from transformer_nmt.decode.text.output import (SpeedReport, format_translations, requests,
                                           translate_file, translate_stream)
from transformer_nmt.decode.text.translator import (Translation, TranslationRequest, Translator,
                                               TranslatorOptions)
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    return Translator(load_for_inference(model_file), TranslatorOptions(SHORT, precision="fp32"))


class FlushCounter(io.StringIO):
    """A text stream that remembers how many lines it held at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    def flush(self) -> None:
        self.flushed_at.append(self.getvalue().count("\n"))
        super().flush()


def test_output_formats():
    translations = [Translation("ein Haus", -0.51234, [5, 6], [(0, 0), (1, 1)]),
                    Translation("Haus", -0.9, [6], [(1, 0)])]
    assert format_translations(7, translations, nbest=False) == ["ein Haus ||| 0-0 1-1"]
    assert format_translations(7, translations, nbest=True) == [
        "7 ||| ein Haus ||| -0.5123 ||| 0-0 1-1", "7 ||| Haus ||| -0.9000 ||| 1-0"]
    plain = [Translation("ein Haus", -0.5, [5, 6])]
    assert format_translations(0, plain, nbest=False) == ["ein Haus"]
    scored = [Translation("ein Haus", -0.5, [5, 6], None, [-0.25, -0.5, -0.125])]
    assert format_translations(0, scored, nbest=True) == [
        "0 ||| ein Haus ||| -0.5000 ||| -0.2500 -0.5000 -0.1250"]


class PieceVocab:
    def piece(self, token: int) -> str:
        return f"p{token}"


def test_json_output_has_pieces_token_scores_and_alignment():
    translations = [Translation("ein Haus", -0.51234, [5, 6], [(0, 0), (1, 1)],
                                [-0.25, -0.5, -0.125]),
                    Translation("Haus", -0.9, [6], [(1, 0)], [-0.5, -0.25])]
    [line] = format_translations(3, translations, nbest=False, vocab=PieceVocab())
    assert json.loads(line) == {"text": "ein Haus", "tokens": ["p5", "p6"],
                                "token_scores": [-0.25, -0.5, -0.125], "score": -0.5123,
                                "confidence": None, "degenerate": None, "fallback": False,
                                "alignment": [[0, 0], [1, 1]]}
    [line] = format_translations(3, translations, nbest=True, vocab=PieceVocab())
    assert [hyp["text"] for hyp in json.loads(line)["nbest"]] == ["ein Haus", "Haus"]


def test_json_output_has_the_confidence_and_its_reasons_when_low():
    sure = Translation("ein Haus", -0.5, [5, 6], confidence=0.9)
    unsure = Translation("Haus Haus Haus", -2.0, [6, 6, 6], confidence=0.1,
                         confidence_reasons=["repeats a word"])
    [line] = format_translations(0, [sure], nbest=False, vocab=PieceVocab())
    assert json.loads(line)["confidence"] == 0.9 and "confidence_reasons" not in json.loads(line)
    [line] = format_translations(0, [unsure], nbest=False, vocab=PieceVocab())
    assert json.loads(line)["confidence"] == 0.1
    assert json.loads(line)["confidence_reasons"] == ["repeats a word"]


def test_json_output_says_what_the_guard_found_and_whether_it_fell_back():
    guarded = [Translation("ein Haus", -0.5, [5, 6], degenerate=["repeats", "too_long"],
                           fallback=True)]
    [line] = format_translations(0, guarded, nbest=False, vocab=PieceVocab())
    assert json.loads(line)["degenerate"] == ["repeats", "too_long"]
    assert json.loads(line)["fallback"] is True
    sound = [Translation("ein Haus", -0.5, [5, 6], degenerate=[])]
    [line] = format_translations(0, sound, nbest=True, vocab=PieceVocab())
    assert json.loads(line)["nbest"][0]["degenerate"] == []
    assert json.loads(line)["nbest"][0]["fallback"] is False


def test_a_stream_gets_one_line_per_input_line_and_flushes_on_request(translator):
    lines = sentences(4, seed=7)
    lines[1] = ""
    output = FlushCounter()
    speed = translate_stream(translator, iter(lines), output)
    assert output.getvalue().split("\n") == list(translator.translate(lines)) + [""]
    assert output.flushed_at == [4] and speed.lines == 4
    each = FlushCounter()
    translate_stream(translator, iter(lines), each, flush_each=True)
    assert each.flushed_at == [1, 2, 3, 4, 4]


def test_a_file_appears_whole_or_not_at_all(translator, tmp_path):
    lines = sentences(3, seed=8)
    output = tmp_path / "new" / "out.txt"
    speed = translate_file(translator, lines, output, total=3)
    assert output.read_text(encoding="utf-8").splitlines() == list(translator.translate(lines))
    assert speed.lines == 3

    def broken():
        yield from lines
        raise RuntimeError("the input broke off")

    failed = tmp_path / "failed.txt"
    with pytest.raises(RuntimeError):
        translate_file(translator, broken(), failed)
    assert list(tmp_path.iterdir()) == [tmp_path / "new"]  # no file, no temporary left


def test_the_speed_report_counts_lines_and_the_best_translations_tokens():
    # Made-up translations: the tiny test models often stop at once, counting nothing.
    report = SpeedReport()
    made_up = [[Translation("a b c", -1.0, [5, 6, 7]), Translation("a", -2.0, [5])],
               [Translation("", 0.0, [])], [Translation("d e", -1.5, [8, 9])]]
    assert list(report.counted(iter(made_up))) == made_up
    assert report.summary().startswith("translated 3 lines (5 subword tokens) in ")
    assert re.fullmatch(r"translated 3 lines \(5 subword tokens\) into out\.txt in [\d.]+ s: "
                        r"[\d.]+ lines/s, \d+ tokens/s", report.summary("out.txt"))
    assert report.summary() == report.summary()  # timed until the last translation


def test_requests_pair_lines_with_prefixes_and_tab_separated_constraints():
    made = list(requests(["a", "b"], ["x y", ""], ["cat\tgreen garden", "\t"]))
    assert made == [TranslationRequest("a", "x y", ("cat", "green garden")),
                    TranslationRequest("b", "", ())]
    assert list(requests(["a"], constraints=["cat"])) == [TranslationRequest("a", "", ("cat",))]
    with pytest.raises(UserError, match="terms.tsv has more lines than the input"):
        list(requests(["a"], constraints=["cat", "dog"], constraints_name="terms.tsv"))
