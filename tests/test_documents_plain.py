"""Plain text, SubRip and WebVTT (documents/plain.py): numbers, times, cue settings, line
ends, blank lines, indentation and a BOM kept; a line that ends a sentence ends its
paragraph."""

from __future__ import annotations

from document_fixtures import shout
from transformer_nmt.documents.formats import translate_document


def test_subrip_keeps_numbers_times_and_the_lines_of_each_subtitle():
    import srt

    source = ("7\n00:00:01,000 --> 00:00:02,500\n{\\an8}The <i>big</i> house\nis green.\n\n"
              "8\n00:00:03,000 --> 00:00:04,000\nHello there\n\n")
    translated = list(srt.parse(translate_document(source.encode(), "a.srt", shout).decode()))
    original = list(srt.parse(source))
    assert [(s.index, s.start, s.end) for s in translated] == \
        [(s.index, s.start, s.end) for s in original]
    assert [s.content for s in translated] == ["{\\an8}THE <i>BIG</i> HOUSE\nIS GREEN.",
                                               "HELLO THERE"]


def test_webvtt_translates_cue_text_only():
    source = ("WEBVTT\n\nNOTE a comment\n\n00:01.000 --> 00:02.000 align:start\n"
              "<v Roger>The <c.yellow>big</c> house\nis green.\n\ncue2\n00:03.000 --> 00:04.000\n"
              "Hello there\n")
    assert translate_document(source.encode(), "a.vtt", shout).decode() == (
        "WEBVTT\n\nNOTE a comment\n\n00:01.000 --> 00:02.000 align:start\n"
        "<v Roger>THE <c.yellow>BIG</c> HOUSE\nIS GREEN.\n\ncue2\n00:03.000 --> 00:04.000\n"
        "HELLO THERE\n")


def test_plain_text_keeps_line_ends_blank_lines_indentation_and_a_bom():
    source = "\ufeffFirst line of a\nparagraph here.\n\n  Second one.\r\n42\n".encode()
    assert translate_document(source, "a.txt", shout) == \
        "\ufeffFIRST LINE OF A\nPARAGRAPH HERE.\n\n  SECOND ONE.\r\n42\n".encode()


def test_a_line_that_ends_a_sentence_ends_its_paragraph_in_plain_text():
    seen: list[str] = []

    def recording(texts):
        seen.extend(texts)
        return shout(texts)

    translate_document(b"A sentence wrapped\nover two lines.\nNext one.\n", "a.txt", recording)
    assert seen == ["A sentence wrapped over two lines.", "Next one."]
