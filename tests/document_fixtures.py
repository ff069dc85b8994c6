"""Shared helpers of the whole-file tests: small documents made by each format's own
library (a heading, a sentence with a bold word inside, a list, a table, an image), a
fake translator, and what a document's structure is, read back by the same library."""

from __future__ import annotations

import io
import struct
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

SENTENCE = ("The ", "big", " house is green.")
"""A sentence split over three runs, the middle one bold."""


@dataclass
class Fake:
    """A translation with a word alignment, as decode.translator.Translation has them."""

    text: str
    alignment: list[tuple[int, int]] | None


def shout(texts: list[str]) -> list[Fake]:
    """A translator that upper-cases every word, each aligned with itself."""
    return [Fake(" ".join(word.upper() for word in text.split()),
                 [(i, i) for i in range(len(text.split()))]) for text in texts]


def with_member(package: Path, member: str, content: bytes = b"<x/>") -> bytes:
    """The zip package at `package` with one more member `member` (perhaps one of its own
    names again: zipfile's warning about it is silenced here, where it is meant)."""
    output = io.BytesIO()
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(output, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            target.writestr(member, content)
    return output.getvalue()


def png() -> bytes:
    """A valid 1x1 PNG image, made with the standard library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


def make_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_heading("A title here", level=1)
    paragraph = document.add_paragraph(SENTENCE[0])
    paragraph.add_run(SENTENCE[1]).bold = True
    paragraph.add_run(SENTENCE[2])
    document.add_paragraph("first item", style="List Bullet")
    document.add_paragraph("second item", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for row, texts in zip(table.rows, (("cell one", "cell two"), ("42", "cell four"))):
        for cell, text in zip(row.cells, texts):
            cell.text = text
    image = path.parent / "image.png"
    image.write_bytes(png())
    document.add_picture(str(image))
    document.sections[0].header.paragraphs[0].text = "header text"
    document.save(path)
    return path


@dataclass
class Structure:
    """A document read back by its library: its shape (styles, formatting, tables,
    images) and its texts, in order."""

    shape: list
    texts: list[str]


def docx_structure(path: Path) -> Structure:
    """Per body paragraph its style and runs' bold; the table's size; the images; and
    the texts of runs, cells and header."""
    import docx

    document = docx.Document(path)
    paragraphs = document.paragraphs
    cells = [cell.text for row in document.tables[0].rows for cell in row.cells]
    return Structure(
        [[(p.style.name, [r.bold for r in p.runs]) for p in paragraphs],
         [len(row.cells) for row in document.tables[0].rows], len(document.inline_shapes)],
        [r.text for p in paragraphs for r in p.runs] + cells
        + [document.sections[0].header.paragraphs[0].text])


def make_pptx(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "A title here"
    paragraph = slide.placeholders[1].text_frame.paragraphs[0]
    for text, bold in zip(SENTENCE, (None, True, None)):
        run = paragraph.add_run()
        run.text = text
        run.font.bold = bold
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for row, texts in zip(table.rows, (("cell one", "cell two"), ("42", "cell four"))):
        for cell, text in zip(row.cells, texts):
            cell.text = text
    image = path.parent / "image.png"
    image.write_bytes(png())
    slide.shapes.add_picture(str(image), Inches(6), Inches(1))
    slide.notes_slide.notes_text_frame.text = "speaker notes"
    presentation.save(path)
    return path


def pptx_structure(path: Path) -> Structure:
    from pptx import Presentation

    slide = Presentation(path).slides[0]
    table = next(shape.table for shape in slide.shapes if shape.has_table)
    runs = slide.placeholders[1].text_frame.paragraphs[0].runs
    return Structure(
        [[r.font.bold for r in runs], [len(row.cells) for row in table.rows],
         sorted(shape.shape_type for shape in slide.shapes)],
        [slide.shapes.title.text] + [r.text for r in runs]
        + [cell.text for row in table.rows for cell in row.cells]
        + [slide.notes_slide.notes_text_frame.text])


def make_odt(path: Path) -> Path:
    from odf.draw import Frame, Image
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, List, ListItem, P, Span

    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    document.text.addElement(H(outlinelevel=1, text="A title here"))
    paragraph = P(text=SENTENCE[0])
    paragraph.addElement(Span(stylename=bold, text=SENTENCE[1]))
    paragraph.addText(SENTENCE[2])
    document.text.addElement(paragraph)
    items = List()
    for text in ("first item", "second item"):
        item = ListItem()
        item.addElement(P(text=text))
        items.addElement(item)
    document.text.addElement(items)
    table = Table()
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for texts in (("cell one", "cell two"), ("42", "cell four")):
        row = TableRow()
        for text in texts:
            cell = TableCell()
            cell.addElement(P(text=text))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    picture = document.addPicture("Pictures/image.png", "image/png", png())
    frame = Frame(width="1cm", height="1cm", anchortype="paragraph")
    frame.addElement(Image(href=picture))
    holder = P()
    holder.addElement(frame)
    document.text.addElement(holder)
    document.save(str(path))
    return path


def odt_structure(path: Path) -> Structure:
    """The body's top elements, the spans' styles and the images; the texts of the top
    elements, spans and table cells."""
    from odf import teletype
    from odf.draw import Image
    from odf.opendocument import load
    from odf.table import TableCell
    from odf.text import Span

    document = load(str(path))
    body, spans = document.text.childNodes, document.text.getElementsByType(Span)
    cells = document.text.getElementsByType(TableCell)
    return Structure(
        [[element.qname[1] for element in body], [span.getAttribute("stylename")
                                                  for span in spans],
         [image.getAttribute("href") for image in document.text.getElementsByType(Image)]],
        [teletype.extractText(node) for node in [*body, *spans, *cells]])
