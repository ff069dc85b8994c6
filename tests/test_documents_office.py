"""Office files (documents/office.py): docx, pptx and odt made by their own libraries,
translated and read back with their structure and formatting intact, every member but
the text parts copied byte for byte; broken packages, and members named outside the
package or twice, refused in one line naming the file."""

from __future__ import annotations

import io
import warnings
import zipfile

import pytest

from document_fixtures import (docx_structure, make_docx, make_odt, make_pptx,
                               odt_structure, pptx_structure, shout, with_member)
from transformer_nmt.documents.formats import (UnsafeFile, read_document, translate_document,
                                               translate_file)
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
