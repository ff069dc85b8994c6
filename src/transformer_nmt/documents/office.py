"""Word (.docx), PowerPoint (.pptx) and OpenDocument text (.odt) files, translated inside
their zip package.

Only the XML parts that hold the document's text are parsed (with lxml, which keeps every
namespace prefix and attribute as written) and only the text of their runs is changed;
every other member of the package (styles, numbering, images, embedded objects, themes,
settings) is copied byte for byte with its own compression. This keeps more than a round
trip through python-docx, python-pptx or odfpy would: those rebuild the package from their
object model, and their models reach neither text boxes, footnotes, comments and SmartArt
(docx) nor the mixed content of an ODF paragraph; here headers, footers, footnotes,
endnotes, comments, text boxes, tables, speaker notes and SmartArt text are translated
with the body, by one rule per format.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from typing import Callable

from lxml import etree

from transformer_nmt.documents.runs import Run
from transformer_nmt.documents.trees import MixedContent, mixed_content_runs, \
    text_element_runs

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
ODT_MIMETYPE = b"application/vnd.oasis.opendocument.text"


class BrokenPackage(Exception):
    """A zip package whose parts cannot be read; the message says which and why."""


class UnsafePackage(BrokenPackage):
    """A zip package with a member name that no office application writes and that an
    unzip tool would act on: an absolute path, a climb out of the package (..), or a name
    given twice (Python's zipfile would write both on, with a warning, and readers
    disagree on which one counts). The message names the member."""


_DRIVE = re.compile(r"[A-Za-z]:")
"""A Windows drive at the start of a member's name: an absolute path there."""


def check_member_names(package: zipfile.ZipFile) -> None:
    """UnsafePackage naming the first member of `package` whose name is absolute, climbs
    out with .., or repeats another's. Repeats are compared without case: OOXML compares
    part names so, and an unzip onto a Windows or macOS disk writes one over the other."""
    seen: set[str] = set()
    for member in package.namelist():
        steps = re.split(r"[/\\]", member)
        if member.startswith(("/", "\\")) or _DRIVE.match(member):
            raise UnsafePackage(f"its member {member!r} has an absolute path")
        if ".." in steps:
            raise UnsafePackage(f"its member {member!r} climbs out of the package with '..'")
        if member.lower() in seen:
            raise UnsafePackage(f"it has two members named {member!r}")
        seen.add(member.lower())


@dataclass(frozen=True)
class OfficeFormat:
    """Where one format keeps its text, and how its paragraphs hold their runs."""

    name: str
    text_parts: re.Pattern[str]
    """The package members with translatable text."""
    marker: Callable[[zipfile.ZipFile], bool]
    """Whether a zip package is of this format, by its contents."""
    runs: Callable[[etree._Element], list[list[Run]]]


def _ooxml_runs(root: etree._Element) -> list[list[Run]]:
    # DrawingML paragraphs (<a:p>) appear in Word's text boxes and shapes too.
    return text_element_runs(root, {W + "t", A + "t"}, {W + "p", A + "p"},
                             {W + "tab", W + "br", W + "cr", A + "br"})


_ODF_PARAGRAPHS = {TEXT + "p", TEXT + "h"}
_ODF_KEPT = {TEXT + "note-citation", TEXT + "tracked-changes", TEXT + "sequence-decls"}
"""A note's citation is its number (its body holds paragraphs of their own); tracked
changes hold deleted text."""
ODF_TEXT = MixedContent(lambda element: element.tag in _ODF_PARAGRAPHS,
                        lambda element: element.tag in _ODF_KEPT,
                        frozenset({TEXT + "tab", TEXT + "line-break", TEXT + "s"}))


def _odf_runs(root: etree._Element) -> list[list[Run]]:
    return mixed_content_runs(root, ODF_TEXT)


def _has(*names: str) -> Callable[[zipfile.ZipFile], bool]:
    return lambda package: all(name in package.NameToInfo for name in names)


def _is_odt(package: zipfile.ZipFile) -> bool:
    return "mimetype" in package.NameToInfo and \
        package.read("mimetype").strip() == ODT_MIMETYPE


FORMATS = {
    "docx": OfficeFormat(
        "docx", re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)"
                           r"\.xml"), _has("[Content_Types].xml", "word/document.xml"),
        _ooxml_runs),
    "pptx": OfficeFormat(
        "pptx", re.compile(r"ppt/(slides/slide|notesSlides/notesSlide|diagrams/data)\d+\.xml"),
        _has("[Content_Types].xml", "ppt/presentation.xml"), _ooxml_runs),
    "odt": OfficeFormat("odt", re.compile(r"content\.xml|styles\.xml"), _is_odt, _odf_runs),
}
"""The office formats by extension."""


def package_format(package: zipfile.ZipFile) -> str | None:
    """Which office format a zip package is, by its contents; None for another zip."""
    return next((name for name, office in FORMATS.items() if office.marker(package)), None)


class OfficePackage:
    """An office file's package with the text parts parsed, ready to be written back."""

    def __init__(self, data: bytes, office: OfficeFormat, max_unpacked: int) -> None:
        self.data = data
        self.format = office
        self.trees: dict[str, etree._ElementTree] = {}
        parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False)
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            check_member_names(package)  # before a name is used to read or write
            unpacked = sum(info.file_size for info in package.infolist())
            if unpacked > max_unpacked:
                raise BrokenPackage(f"it unpacks to {unpacked} bytes, more than the limit "
                                    f"({max_unpacked})")
            for name in package.namelist():
                if office.text_parts.fullmatch(name):
                    try:
                        self.trees[name] = etree.parse(io.BytesIO(package.read(name)), parser)
                    except (etree.XMLSyntaxError, zipfile.BadZipFile, ValueError) as error:
                        raise BrokenPackage(f"its part {name} is not readable XML "
                                            f"({error})") from None

    def paragraphs(self) -> list[list[Run]]:
        """The runs of every paragraph of every text part, in package order."""
        return [runs for tree in self.trees.values()
                for runs in self.format.runs(tree.getroot())]

    def to_bytes(self) -> bytes:
        """The package with the text parts as they are now and every other member as it
        was, in the same order and with the same compression."""
        output = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(self.data)) as source, \
                zipfile.ZipFile(output, "w") as target:
            for info in source.infolist():
                tree = self.trees.get(info.filename)
                content = source.read(info) if tree is None else etree.tostring(
                    tree, xml_declaration=True, encoding=tree.docinfo.encoding or "UTF-8",
                    standalone=tree.docinfo.standalone)
                target.writestr(info, content)
        return output.getvalue()
