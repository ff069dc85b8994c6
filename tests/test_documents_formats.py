"""Whole files through their format (documents/formats.py): types recognised by content,
a sentence split over runs translated once, wrong or broken types, PDF and files over the
limits refused in one line naming the file. (Each format on its own:
tests/test_documents_html.py, test_documents_markdown.py, test_documents_office.py and
test_documents_plain.py.)"""

from __future__ import annotations

import pytest

from document_fixtures import make_docx, shout
from transformer_nmt.documents.formats import (FileLimits, read_document, translate_document,
                                               translate_file)
from transformer_nmt.errors import UserError

pytest.importorskip("docx")


def test_a_sentence_split_over_runs_is_translated_once_as_one_sentence(tmp_path):
    seen: list[str] = []

    def recording(texts):
        seen.extend(texts)
        return shout(texts)

    translate_file(make_docx(tmp_path / "in.docx"), tmp_path / "out.docx", recording)
    assert "The big house is green." in seen
    assert "big" not in seen


@pytest.mark.parametrize("name, data, says", [
    ("scan.pdf", b"%PDF-1.7\n...", "PDF is not supported"),
    ("report.docx", b"%PDF-1.7\n...", "PDF is not supported"),
    ("notes.docx", b"just text", "the name says .docx but the content is not a zip"),
    ("slides.txt", None, "the name says .txt but the content is a Word document"),
    ("broken.docx", b"PK\x03\x04 not really a zip", "broken zip package"),
    ("a.exe", b"MZ", ".exe files are not supported"),
    ("a.txt", b"caf\xe9", "not UTF-8"),
    ("a.srt", b"this is not a subtitle file\n", "the name says .srt but"),
    ("a.vtt", b"no header\n", "does not start with WEBVTT"),
])
def test_wrong_or_broken_types_are_refused_in_one_line_naming_the_file(tmp_path, name,
                                                                       data, says):
    if data is None:
        data = make_docx(tmp_path / "real.docx").read_bytes()
    with pytest.raises(UserError, match=says) as refused:
        read_document(data, name)
    assert str(refused.value).startswith(f"{name}: ") and "\n" not in str(refused.value)


def test_size_paragraph_and_unpacked_limits(tmp_path):
    with pytest.raises(UserError, match="21 bytes is more than the limit of 20"):
        read_document(b"x" * 21, "a.txt", FileLimits(max_bytes=20))
    with pytest.raises(UserError, match="3 paragraphs is more than the limit of 2"):
        read_document(b"one\n\ntwo\n\nthree\n\n42\n", "a.txt", FileLimits(max_paragraphs=2))
    source = make_docx(tmp_path / "in.docx")
    with pytest.raises(UserError, match="unpacks to .* bytes, more than the limit"):
        read_document(source.read_bytes(), "in.docx", FileLimits(max_unpacked_bytes=1000))
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 21)
    with pytest.raises(UserError, match="big.txt: 21 bytes"):
        translate_file(big, tmp_path / "out.txt", shout, FileLimits(max_bytes=20))
    assert not (tmp_path / "out.txt").exists()


def test_tabs_and_line_breaks_part_the_words_on_either_side(tmp_path):
    import docx

    document = docx.Document()
    run = document.add_paragraph().add_run("Name:")
    run.add_tab()
    run.add_text("the value")
    run.add_break()
    run.add_text("next line")
    document.save(tmp_path / "in.docx")
    seen: list[str] = []

    def recording(texts):
        seen.extend(texts)
        return shout(texts)

    translate_file(tmp_path / "in.docx", tmp_path / "out.docx", recording)
    assert seen == ["Name: the value next line"]
    translated = docx.Document(tmp_path / "out.docx").paragraphs[0]
    assert translated.text == "NAME:\tTHE VALUE\nNEXT LINE"
    html = translate_document(b"<p>one<br>two</p>", "a.html", recording).decode()
    assert seen[-1] == "one two" and html == "<p>ONE<br>TWO</p>"


def test_xhtml_with_an_xml_declaration_and_markdown_with_crlf_line_ends():
    xhtml = (b'<?xml version="1.0" encoding="UTF-8"?>\n<html><body><p>The dog</p>'
             b"</body></html>")
    assert "<p>THE DOG</p>" in translate_document(xhtml, "a.html", shout).decode()
    assert translate_document(b"# A title\r\n\r\nsome text\r\nmore text\r\n", "a.md",
                              shout) == b"# A TITLE\r\n\r\nSOME TEXT\r\nMORE TEXT\r\n"
