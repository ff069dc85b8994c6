"""Reading and validating parallel text, whitespace normalization and cleaning filters.

Files are read as bytes and split on b"\\n" only. Python's `str.splitlines` (and text-mode
files with universal newlines) would also split on \\r, \\x0b, \\x0c, \\x1c-\\x1e, \\x85 and
U+2028/U+2029, which silently misaligns a parallel corpus when such a character sits
inside a line of one side only. Decoding is strict UTF-8 unless the caller asks for
replacement, and every error names the file and the line.
"""

from __future__ import annotations

import gzip
import itertools
import re
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, get_args

import numpy as np

from transformer_nmt.config import Utf8Errors
from transformer_nmt.errors import UserError
from transformer_nmt.files import AllOrNothing, AtomicFile

ERRORS = get_args(Utf8Errors)
"""The ways of handling invalid UTF-8: stop with an error, or replace bad bytes by U+FFFD."""

_GZIP_MAGIC = b"\x1f\x8b"

# Every control character (Unicode category Cc) becomes a space. str.split() already
# treats \t, \n, \r, \x0b, \x0c, \x1c-\x1f and \x85 as whitespace; the others (NUL, ESC,
# DEL, C1 controls...) are not whitespace to Python but are never meant as text.
_CONTROL_TO_SPACE = {code: " " for code in range(0x100) if unicodedata.category(chr(code)) == "Cc"}


def normalize(text: str) -> str:
    """Whitespace-normalize one line: control characters and every run of Unicode
    whitespace become one space, and the ends are stripped. Nothing else changes."""
    # Most lines are already clean; isprintable() is False for every control character
    # and every whitespace but " ", so this check is exact and saves two thirds of the time.
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.translate(_CONTROL_TO_SPACE).split())


BIDI_CONTROL_CHARACTERS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""Unicode's Bidi_Control characters (the Arabic letter mark, LRM and RLM, embeddings,
overrides and isolates), as the inside of a regular expression's character class. They
order text for display and are zero-width; no vocabulary holds them: sentencepiece makes
an unknown piece of each embedding or isolate, cutting the word it opens."""
_BIDI_CONTROLS = re.compile(f"[{BIDI_CONTROL_CHARACTERS}]+")


def without_bidi_controls(text: str) -> str:
    """`text` with its bidi controls left out, as a reader sees it."""
    if text.isprintable():  # a bidi control is a format character, never printable
        return text
    return _BIDI_CONTROLS.sub("", text)


def model_input(text: str) -> str:
    """What a model is given of a source line to translate: its bidi controls left out,
    then normalized (`normalize`). The HTML path keeps them in the markup around the
    text nodes it translates (serve/html_text.py); plain text drops them, so that a
    sentence is translated whole rather than cut at each."""
    return normalize(without_bidi_controls(text))


def open_binary(path: str | Path) -> BinaryIO:
    """Open a file for reading bytes, decompressing gzip (recognised by its magic bytes)."""
    path = Path(path)
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    if handle.peek(2)[:2] == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
    return handle


def _check_errors(errors: str) -> None:
    if errors not in ERRORS:
        raise UserError(f"errors must be one of {', '.join(ERRORS)}, not {errors!r}")


def decode_line(raw: bytes, path: str | Path, number: int, errors: str = "strict") -> str:
    """Decode one line (without its b"\\n") as UTF-8; UserError naming file and line if invalid."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if errors == "replace":
            return raw.decode("utf-8", "replace")
        raise UserError(
            f"{path}:{number}: invalid UTF-8 (byte {error.start + 1} of the line); fix the "
            "file or read it with errors='replace' to replace bad bytes with U+FFFD"
        ) from None


MAX_LINE_BYTES = 4 * 2**20
"""The longest line read, in bytes. A sentence takes hundreds; a longer line is a text
without line breaks, and read whole it could take gigabytes of memory and abort
sentencepiece's training (std::bad_alloc on a line of a gigabyte)."""

READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises: gzip's own errors are not all OSErrors."""


def read_error(name: str | Path, error: Exception) -> UserError:
    """The one-line error for a file that could not be read to its end."""
    if isinstance(error, (EOFError, zlib.error, gzip.BadGzipFile)):
        return UserError(f"{name}: damaged or truncated gzip data ({error}); "
                         "download or compress the file again")
    return UserError(f"{name}: cannot read: {error}")


def iter_lines(handle: BinaryIO, name: str | Path, errors: str = "strict",
               first_number: int = 1) -> Iterator[str]:
    """Stream the lines of an open binary stream (a file, a member of a tar archive),
    without their newline; `name` is what error messages call it.

    Lines are split on b"\\n" only; a final line without a newline counts, a byte-order
    mark at the start is dropped. Memory holds one line at a time, of at most
    MAX_LINE_BYTES: a longer one is a UserError naming it, read no further. Errors name
    the first line read `first_number` (a handle that starts mid-file).
    """
    _check_errors(errors)
    try:
        for number in itertools.count(first_number):
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            elif len(raw) > MAX_LINE_BYTES:
                raise UserError(
                    f"{name}:{number}: a line longer than {MAX_LINE_BYTES // 2**20} MiB, "
                    "which is no sentence (a file without line breaks?); split the text into "
                    "one sentence a line, or remove that line")
            text = decode_line(raw, name, number, errors)
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield text
    except READ_ERRORS as error:
        raise read_error(name, error) from None


def read_lines(path: str | Path, errors: str = "strict", offset: int = 0,
               first_number: int = 1) -> Iterator[str]:
    """Stream the lines of a UTF-8 (optionally gzipped) text file, as `iter_lines` does;
    from byte `offset` of its (decompressed) text, which holds line `first_number`, where
    given (`line_offsets` finds them)."""
    _check_errors(errors)
    with open_binary(path) as handle:
        if offset:
            try:
                handle.seek(offset)
            except READ_ERRORS as error:
                raise read_error(path, error) from None
        yield from iter_lines(handle, path, errors, first_number)


def count_lines(path: str | Path) -> int:
    """The number of lines `read_lines` yields for `path`, counted without decoding."""
    return line_offsets(path, None)[0]


def line_offsets(path: str | Path, every: int | None) -> tuple[int, list[int]]:
    """The number of lines `read_lines` yields for `path`, and the byte offsets (in its
    decompressed text) where lines 0, every, 2 * every, ... begin, found in the same one
    pass, without decoding: where the parts of a file cut every `every` lines start
    reading (None: the count alone)."""
    count, last, read = 0, b"\n", 0
    offsets = [0]
    with open_binary(path) as handle:
        try:
            while chunk := handle.read(1 << 20):
                found = chunk.count(b"\n")
                if every is not None and count + found >= len(offsets) * every:
                    position = -1
                    for _ in range(found):
                        position = chunk.index(b"\n", position + 1)
                        count += 1
                        if count % every == 0:
                            offsets.append(read + position + 1)
                else:
                    count += found
                read += len(chunk)
                last = chunk[-1:]
        except READ_ERRORS as error:
            raise read_error(path, error) from None
    lines = count + (last != b"\n")
    return lines, [offset for number, offset in enumerate(offsets)
                   if every is None or number * every < lines]


def read_parallel(src_path: str | Path, tgt_path: str | Path,
                  errors: str = "strict") -> Iterator[tuple[str, str]]:
    """Stream aligned (source, target) lines from two files, raw (not normalized)."""
    return zip_parallel(read_lines(src_path, errors), src_path, read_lines(tgt_path, errors),
                        tgt_path)


def zip_parallel(src_lines: Iterator[str], src_name: str | Path, tgt_lines: Iterator[str],
                 tgt_name: str | Path) -> Iterator[tuple[str, str]]:
    """Pair two streams of lines one to one. If one ends before the other, the rest of
    the longer one is counted and a UserError names both sources and both line counts."""
    count = 0
    for src in src_lines:
        tgt = next(tgt_lines, None)
        if tgt is None:
            _misaligned(src_name, count + 1 + sum(1 for _ in src_lines), tgt_name, count)
        count += 1
        yield src, tgt
    rest = sum(1 for _ in tgt_lines)
    if rest:
        _misaligned(src_name, count, tgt_name, count + rest)


def _misaligned(src_name: str | Path, src_count: int, tgt_name: str | Path, tgt_count: int) -> None:
    raise UserError(
        f"{src_name} has {src_count} lines but {tgt_name} has {tgt_count}; "
        "source and target must have one line per sentence pair"
    )


def read_tsv(path: str | Path, errors: str = "strict") -> Iterator[tuple[str, str]]:
    """Stream (source, target) pairs from a file of `source<TAB>target` lines, raw."""
    for number, line in enumerate(read_lines(path, errors), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise UserError(
                f"{path}:{number}: expected 2 tab-separated fields (source, target), "
                f"found {len(fields)}"
            )
        yield fields[0], fields[1]


class LineWriter(AllOrNothing):
    """Writes lines of text as UTF-8 with b"\\n" endings to an `AtomicFile`, put in place
    by `close`, so a half-written file never carries the final name. Missing parent
    directories are created, as for model files."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = AtomicFile(self.path, buffer_size=1 << 20)
        self._handle = self._file.handle

    def write(self, line: str) -> None:
        """Write one line; it must not contain a newline."""
        self._handle.write(line.encode("utf-8"))
        self._handle.write(b"\n")

    def write_lines(self, lines: list[str]) -> None:
        """Write lines; none may contain a newline (normalized text never does)."""
        if lines:
            self._handle.write("\n".join(lines).encode("utf-8"))
            self._handle.write(b"\n")

    def close(self) -> None:
        """Flush, fsync and rename into place."""
        self._file.close()

    def abort(self) -> None:
        """Close and delete the temporary file."""
        self._file.abort()

    def __exit__(self, kind, value, traceback) -> None:
        # The file's own exit: a full disk while writing lines is a UserError naming it.
        self._file.__exit__(kind, value, traceback)


FILTER_NAMES = ("empty", "max_len", "max_ratio")
"""Cleaning filters in the order they are applied; a removed pair counts under the first."""


@dataclass(frozen=True)
class CleaningFilters:
    """Filters on the training split, applied to subword token counts (specials excluded).

    Valid and test splits are never filtered: their raw text is the reference for BLEU.
    """

    max_len: int = 250
    """Remove pairs with more tokens than this on either side (0: no limit). fairseq's
    WMT recipes use 250."""
    max_ratio: float = 2.5
    """Remove pairs whose longer side has more than this many times the tokens of the
    shorter side (0: no limit). fairseq's WMT14 recipe uses 1.5 on BPE tokens for noisy
    web crawl; 2.5 removes the misaligned pairs of clean corpora (Bible verses whose
    psalm headings sit on one side only) while sparing short pairs like 3 vs 7 tokens and
    language pairs whose subword rates differ."""

    def validate(self) -> None:
        """Raise UserError for negative limits."""
        if self.max_len < 0:
            raise UserError(f"max_len must be 0 (no limit) or positive, not {self.max_len}")
        if self.max_ratio != 0 and self.max_ratio < 1:
            raise UserError(f"max_ratio must be 0 (no limit) or at least 1, not {self.max_ratio}")

    def apply(self, src_lengths: np.ndarray,
              tgt_lengths: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
        """The keep mask (n,) of a chunk of pairs and how many pairs each filter removed."""
        src_lengths = np.asarray(src_lengths, dtype=np.int64)
        tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        removed = {}
        keep = np.ones(src_lengths.shape, dtype=bool)
        checks = {
            "empty": (src_lengths == 0) | (tgt_lengths == 0),
            "max_len": (np.maximum(src_lengths, tgt_lengths) > self.max_len
                        if self.max_len else np.zeros_like(keep)),
            "max_ratio": (np.maximum(src_lengths, tgt_lengths)
                          > self.max_ratio * np.minimum(src_lengths, tgt_lengths)
                          if self.max_ratio else np.zeros_like(keep)),
        }
        for name in FILTER_NAMES:
            hit = keep & checks[name]
            removed[name] = int(hit.sum())
            keep &= ~hit
        return keep, removed
