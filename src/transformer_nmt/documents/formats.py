"""A whole file translated in its own format: its type recognised by its content (zip
members, magic bytes, text) as well as its name, its size and paragraphs held within
limits, and every refusal one line naming the file and what to do."""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable, Protocol

from transformer_nmt.documents.html import Html
from transformer_nmt.documents.markdown import Markdown
from transformer_nmt.documents.office import FORMATS, BrokenPackage, OfficePackage, \
    UnsafePackage, package_format
from transformer_nmt.documents.plain import BadText, PlainText, SubRip, WebVTT
from transformer_nmt.documents.runs import Run, Translate, pending, translate_paragraphs
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_write

TEXT_TYPES: dict[str, Callable[[str], "TextDocument"]] = {
    "txt": PlainText, "html": Html, "htm": Html, "md": Markdown, "markdown": Markdown,
    "srt": SubRip, "vtt": WebVTT}
"""The text formats by extension, and what reads each."""
EXTENSIONS = (".txt", ".html", ".md", ".srt", ".vtt", ".docx", ".pptx", ".odt")
"""The file types this module translates (and .htm, .markdown), as LibreTranslate's
/frontend/settings lists them."""
SUPPORTED = ", ".join(EXTENSIONS[:-1]) + " and " + EXTENSIONS[-1]
"""The file types this module translates, for help texts and errors."""
PDF_REFUSAL = ("PDF is not supported: a PDF holds positioned glyphs, not paragraphs, so "
               "translating it means extracting its text and laying it out anew; convert "
               "it to .docx or .odt (e.g. with LibreOffice) and translate that")
KIND_NAMES = {"docx": "a Word document", "pptx": "a PowerPoint presentation",
              "odt": "an OpenDocument text"}


class UnsafeFile(UserError):
    """A file refused for what it could do rather than for being broken: an office
    package with a member named outside it or twice (HTTP 422 on the server)."""


@dataclass(frozen=True)
class FileLimits:
    """How large a file may be translated."""

    max_bytes: int = 20 * 1024 * 1024
    """The file's own size."""
    max_unpacked_bytes: int = 200 * 1024 * 1024
    """An office file's members unpacked, so that a small zip cannot fill memory."""
    max_paragraphs: int = 20000
    """Paragraphs with text to translate (a subtitle, a table cell, a list item each)."""


class TextDocument(Protocol):
    """What each text format's reader gives: the runs of its paragraphs, and the text
    with the runs as they are now."""

    def paragraphs(self) -> list[list[Run]]: ...

    def to_text(self) -> str: ...


@dataclass
class Document:
    """A file read for translation: its paragraphs' runs, written back by `to_bytes`."""

    kind: str
    """The file's type, as its usual extension without the dot."""
    parsed: TextDocument | OfficePackage
    paragraphs: list[list[Run]]
    bom: bool = False

    def to_bytes(self) -> bytes:
        if isinstance(self.parsed, OfficePackage):
            return self.parsed.to_bytes()
        return ("\ufeff" if self.bom else "").encode() + self.parsed.to_text().encode()


def extension(name: str) -> str:
    """The file name's extension, lower case, without the dot ('' without one)."""
    return PurePath(name).suffix.lower().lstrip(".")


def read_document(data: bytes, name: str, limits: FileLimits = FileLimits()) -> Document:
    """The document in `data`, whose file is called `name`; UserError naming it when its
    type is not supported, does not match its content, or it is over a limit or broken."""
    if len(data) > limits.max_bytes:
        raise UserError(f"{name}: {len(data)} bytes is more than the limit of "
                        f"{limits.max_bytes}; split the file or translate it in parts")
    claimed = extension(name)
    if claimed == "pdf" or data.startswith(b"%PDF-"):
        raise UserError(f"{name}: {PDF_REFUSAL}")
    if claimed not in TEXT_TYPES and claimed not in FORMATS:
        raise UserError(f"{name}: .{claimed or '(no extension)'} files are not supported; "
                        f"the supported types are {SUPPORTED}")
    found = _office_kind(data, name)
    if found != claimed and (found is not None or claimed in FORMATS):
        actual = (KIND_NAMES[found] if found else "a zip archive of another kind"
                  if data.startswith(b"PK") else "not a zip package")
        raise UserError(f"{name}: the name says .{claimed} but the content is {actual}; "
                        f"give the file the extension of its type ({SUPPORTED})")
    document = _office(data, name, found, limits) if found else _text(data, name, claimed)
    count = len(pending(document.paragraphs))
    if count > limits.max_paragraphs:
        raise UserError(f"{name}: {count} paragraphs is more than the limit of "
                        f"{limits.max_paragraphs}; split the file and translate the parts")
    return document


def translate_document(data: bytes, name: str, translate: Translate,
                       limits: FileLimits = FileLimits()) -> bytes:
    """The file `data` (called `name`) translated by `translate`, in the same format."""
    document = read_document(data, name, limits)
    translate_paragraphs(document.paragraphs, translate)
    return document.to_bytes()


def read_file(source: str | Path, limits: FileLimits = FileLimits()) -> Document:
    """The document in the file at `source` (see `read_document`), its size checked
    before it is read."""
    size = os.stat(source).st_size
    if size > limits.max_bytes:
        raise UserError(f"{source}: {size} bytes is more than the limit of "
                        f"{limits.max_bytes}; split the file or translate it in parts")
    return read_document(Path(source).read_bytes(), str(source), limits)


def translate_into(document: Document, target: str | Path, translate: Translate) -> int:
    """`document` translated into the file `target` (written whole or not at all); how
    many paragraphs were translated."""
    wanted = pending(document.paragraphs)
    translate_paragraphs(wanted, translate)
    translated = document.to_bytes()
    atomic_write(target, lambda file: file.write(translated))
    return len(wanted)


def translate_file(source: str | Path, target: str | Path, translate: Translate,
                   limits: FileLimits = FileLimits()) -> int:
    """The file at `source` translated into `target`; how many paragraphs were
    translated."""
    return translate_into(read_file(source, limits), target, translate)


def _office_kind(data: bytes, name: str) -> str | None:
    """The office format of a zip package, None for anything that is not a zip."""
    if not data.startswith(b"PK"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            return package_format(package)
    except (zipfile.BadZipFile, OSError, KeyError, ValueError) as error:
        raise UserError(f"{name}: the file is a broken zip package ({error}); open and "
                        "save it again in its application") from None


def _office(data: bytes, name: str, kind: str, limits: FileLimits) -> Document:
    try:
        package = OfficePackage(data, FORMATS[kind], limits.max_unpacked_bytes)
    except UnsafePackage as error:
        raise UnsafeFile(f"{name}: refused: {error}, which no office application writes; "
                         "open and save the file again in its application") from None
    except (BrokenPackage, zipfile.BadZipFile, OSError, ValueError) as error:
        # KIND_NAMES carry their article: "a Word document", "an OpenDocument text".
        raise UserError(f"{name}: the file is {KIND_NAMES[kind]}, but a broken one: {error}; "
                        "open and save it again in its application") from None
    return Document(kind, package, package.paragraphs())


def _text(data: bytes, name: str, claimed: str) -> Document:
    if b"\0" in data:
        raise UserError(f"{name}: the name says .{claimed} but the content is binary, not "
                        f"text; give the file the extension of its type ({SUPPORTED})")
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(f"{name}: the text is not UTF-8 (byte {error.start}); save it as "
                        "UTF-8 and try again") from None
    try:
        parsed = TEXT_TYPES[claimed](text)
    except BadText as error:
        raise UserError(f"{name}: the name says .{claimed} but {error}; give the file the "
                        f"extension of its type ({SUPPORTED})") from None
    kind = {"htm": "html", "markdown": "md"}.get(claimed, claimed)
    return Document(kind, parsed, parsed.paragraphs(), bom)
