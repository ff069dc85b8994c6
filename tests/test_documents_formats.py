"""Whole files: each format, made by its own library, translated and read back by the same
library with its structure and formatting intact; types recognised by content; broken
files, PDF and files over the limits refused in one line naming the file."""

from __future__ import annotations

import io
import warnings
import zipfile

import pytest

from document_fixtures import (docx_structure, make_docx, make_odt, make_pptx,
                               odt_structure, pptx_structure, shout, with_member)
from transformer_nmt.documents.formats import (FileLimits, UnsafeFile, read_document,
                                               translate_document, translate_file)
from transformer_nmt.errors import UserError

pytest.importorskip("docx")
pytest.importorskip("pptx")
pytest.importorskip("odf")


def assert_translated(before, after):
    """The same shape, and every text as `shout` makes it."""
    assert after.shape == before.shape
    assert after.texts == [text.upper() for text in before.texts]


def test_docx_keeps_styles_runs_table_header_and_image(tmp_path):
    source = make_docx(tmp_path / "in.docx")
    target = tmp_path / "out.docx"
    assert translate_file(source, target, shout) == 8
    before, after = docx_structure(source), docx_structure(target)
    assert_translated(before, after)
    assert after.shape[0][1] == ("Normal", [None, True, None])
    assert after.texts[1:4] == ["THE ", "BIG", " HOUSE IS GREEN."]
    assert after.shape[2] == 1 and "42" in after.texts  # the image; a number kept


def test_docx_members_other_than_the_text_parts_are_copied_byte_for_byte(tmp_path):
    source = make_docx(tmp_path / "in.docx")
    translated = translate_document(source.read_bytes(), "in.docx", shout)
    with zipfile.ZipFile(source) as before, zipfile.ZipFile(io.BytesIO(translated)) as after:
        assert before.namelist() == after.namelist()
        for info in before.infolist():
            if info.filename not in ("word/document.xml", "word/header1.xml"):
                assert before.read(info) == after.read(info.filename), info.filename
        assert b"w:t" in after.read("word/document.xml")  # prefixes kept as written


def test_pptx_keeps_title_runs_table_picture_and_notes(tmp_path):
    source = make_pptx(tmp_path / "in.pptx")
    target = tmp_path / "out.pptx"
    translate_file(source, target, shout)
    before, after = pptx_structure(source), pptx_structure(target)
    assert_translated(before, after)
    assert after.shape[0] == [None, True, None]
    assert after.texts[1:4] == ["THE ", "BIG", " HOUSE IS GREEN."]


def test_odt_keeps_heading_span_style_list_table_and_image(tmp_path):
    source = make_odt(tmp_path / "in.odt")
    target = tmp_path / "out.odt"
    translate_file(source, target, shout)
    before, after = odt_structure(source), odt_structure(target)
    assert_translated(before, after)
    assert after.shape[1] == ["Bold"] and "BIG" in after.texts and after.shape[2]
    with zipfile.ZipFile(target) as package:  # the mimetype first and stored, as ODF wants
        first = package.infolist()[0]
        assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED


def test_html_keeps_tags_attributes_code_and_translates_inline_elements_in_context():
    source = (b'<!DOCTYPE html>\n<html><head><title>My page</title></head><body>'
              b'<h1 class="t">A title</h1><p>The <b>big</b> house &amp; '
              b'<a href="x.html">a link</a></p><pre>keep me</pre>'
              b'<p translate="no">not me</p><ul><li>item one</li></ul>'
              b'<img src="a.png" alt="pic"></body></html>')
    translated = translate_document(source, "page.html", shout).decode()
    assert translated.startswith("<!DOCTYPE html>")
    for kept in ('<h1 class="t">A TITLE</h1>', "<p>THE <b>BIG</b> HOUSE &amp; "
                 '<a href="x.html">A LINK</a></p>', "<pre>keep me</pre>",
                 '<p translate="no">not me</p>', "<li>ITEM ONE</li>", "<title>MY PAGE</title>",
                 '<img src="a.png" alt="pic">'):
        assert kept in translated


def test_an_html_fragment_stays_a_fragment():
    assert translate_document(b"<p>The <i>small</i> dog.</p>\n<p>Two</p>", "a.htm",
                              shout).decode() == "<p>THE <i>SMALL</i> DOG.</p>\n<p>TWO</p>"


def test_markdown_changes_only_the_text_of_its_text_tokens():
    source = ("# Title *here*\n\nSome **bold** text over\ntwo lines with [a link](http://x.y"
              ' "t") and `code`.\n\n- item one\n- item two\n\n| a | b |\n|---|---|\n'
              "| cell one | 42 |\n\n![alt text](img.png)\n\n```\ncode block\n```\n")
    assert translate_document(source.encode(), "a.md", shout).decode() == (
        "# TITLE *HERE*\n\nSOME **BOLD** TEXT OVER\nTWO LINES WITH [A LINK](http://x.y"
        ' "t") AND `code`.\n\n- ITEM ONE\n- ITEM TWO\n\n| A | B |\n|---|---|\n'
        "| CELL ONE | 42 |\n\n![alt text](img.png)\n\n```\ncode block\n```\n")


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


def test_a_zip_of_another_kind_named_docx_and_a_docx_with_broken_xml(tmp_path):
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as package:
        package.writestr("readme.txt", "hello")
    with pytest.raises(UserError, match="a zip archive of another kind"):
        read_document(other.getvalue(), "a.docx")
    broken = io.BytesIO()
    with zipfile.ZipFile(make_docx(tmp_path / "in.docx")) as source, \
            zipfile.ZipFile(broken, "w") as package:
        for info in source.infolist():
            package.writestr(info, b"<w:document" if info.filename == "word/document.xml"
                             else source.read(info))
    with pytest.raises(UserError, match="word/document.xml is not readable XML"):
        read_document(broken.getvalue(), "a.docx")


@pytest.mark.parametrize("make, name, kind, part", [
    (make_docx, "report.docx", "a Word document", "word/document.xml"),
    (make_pptx, "report.pptx", "a PowerPoint presentation", "ppt/slides/slide1.xml"),
    (make_odt, "report.odt", "an OpenDocument text", "content.xml"),
])
def test_a_broken_office_file_is_named_with_its_kind_in_a_sentence(tmp_path, make, name,
                                                                    kind, part):
    """The message read "the a Word document is broken"."""
    source = make(tmp_path / name)
    broken = io.BytesIO()
    with zipfile.ZipFile(source) as package, zipfile.ZipFile(broken, "w") as copy:
        for info in package.infolist():
            copy.writestr(info, b"<x" if info.filename == part else package.read(info))
    with pytest.raises(UserError) as refused:
        read_document(broken.getvalue(), name)
    message = str(refused.value)  # lxml's own words in the middle
    assert message.startswith(f"{name}: the file is {kind}, but a broken one: its part "
                              f"{part} is not readable XML (")
    assert message.endswith("); open and save it again in its application")


@pytest.mark.parametrize("member, says", [
    ("../../evil.txt", "its member '../../evil.txt' climbs out of the package with '..'"),
    ("word\\..\\..\\evil.txt", "climbs out of the package"),
    ("/x/abs.txt", "its member '/x/abs.txt' has an absolute path"),
    ("C:/abs.txt", "its member 'C:/abs.txt' has an absolute path"),
    ("word/document.xml", "it has two members named 'word/document.xml'"),
    ("Word/Document.xml", "it has two members named 'Word/Document.xml'"),
])
def test_a_package_with_a_member_outside_it_or_named_twice_is_refused_before_writing(
        tmp_path, member, says):
    """Such a .docx was translated with its names carried on into the output, and
    zipfile's "Duplicate name" warning printed."""
    source = tmp_path / "hostile.docx"
    source.write_bytes(with_member(make_docx(tmp_path / "in.docx"), member))
    target = tmp_path / "out.docx"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing written on with a warning
        with pytest.raises(UnsafeFile) as refused:
            translate_file(source, target, shout)
    message = str(refused.value)
    assert message.startswith(f"{source}: refused: ") and says in message
    assert message.endswith(", which no office application writes; open and save the file "
                            "again in its application")
    assert "\n" not in message and not target.exists()


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


def test_a_line_that_ends_a_sentence_ends_its_paragraph_in_plain_text():
    seen: list[str] = []

    def recording(texts):
        seen.extend(texts)
        return shout(texts)

    translate_document(b"A sentence wrapped\nover two lines.\nNext one.\n", "a.txt", recording)
    assert seen == ["A sentence wrapped over two lines.", "Next one."]


def test_xhtml_with_an_xml_declaration_and_markdown_with_crlf_line_ends():
    xhtml = (b'<?xml version="1.0" encoding="UTF-8"?>\n<html><body><p>The dog</p>'
             b"</body></html>")
    assert "<p>THE DOG</p>" in translate_document(xhtml, "a.html", shout).decode()
    assert translate_document(b"# A title\r\n\r\nsome text\r\nmore text\r\n", "a.md",
                              shout) == b"# A TITLE\r\n\r\nSOME TEXT\r\nMORE TEXT\r\n"
