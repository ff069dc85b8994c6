"""The one sentence splitter: a text is cut into sentences that the model can translate,
and the translations are put back in the same frame. The server (texts, HTML, files) and
`nmt translate --file` both cut with it, so a sentence is cut the same way everywhere.

Sentences are found by sentencex (Wikimedia's segmenter): it covers any language code
through fallback chains, keeps the text intact (its segments concatenate back to the
input) and is fast (far faster than pysbd on a long English text, with the same cuts
on abbreviations, numbers and initials). The whitespace around sentences is kept exactly.

The one rule for an overlong sentence: one with more subword tokens than the model takes
(`Fitting.limit`) is halved at a word boundary (or, for one long word, between
characters) until every part fits. Never truncated: truncation would leave the end of
the sentence untranslated, and the user would not see what is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from sentencex import segment

_SPACES = re.compile(r"(\s+)")


@dataclass(frozen=True)
class Fitting:
    """What the length rule needs of a model: a sentence's source token ids as the model
    encodes them, and the most tokens it takes."""

    encode: Callable[[str], list[int]]
    """A sentence's source subword ids (without EOS); callers cache it, so that the ids
    of the first encoding are passed on rather than computed again."""
    limit: int
    """Most source tokens of a sentence: the model's, read in one place
    (documents/sentences.py, `model_fitting`)."""

    def fits(self, sentence: str) -> bool:
        return len(self.encode(sentence)) <= self.limit


@dataclass
class Document:
    """A text as a frame of literal strings around numbered sentence slots."""

    parts: list[str | int] = field(default_factory=list)
    """Literal text (kept as is) or the index of a sentence in `sentences`."""
    sentences: list[str] = field(default_factory=list)
    """The sentences to translate, stripped, each short enough for the model."""

    def literal(self, text: str) -> None:
        if text:
            self.parts.append(text)

    def sentence(self, text: str, fitting: Fitting) -> None:
        """`text`, one sentence with its surrounding whitespace, added in parts that fit."""
        stripped = text.strip()
        if not stripped:
            self.literal(text)
            return
        start = text.index(stripped)
        self.literal(text[:start])
        for chunk, separator in _fitting_chunks(stripped, fitting):
            self.parts.append(len(self.sentences))
            self.sentences.append(chunk)
            self.literal(separator)
        self.literal(text[start + len(stripped):])

    def join(self, translations: list[str]) -> str:
        """The document with each sentence replaced by its translation."""
        return "".join(part if isinstance(part, str) else translations[part]
                       for part in self.parts)


def split_text(text: str, language: str, fitting: Fitting) -> Document:
    """A text whose line breaks are its own (a request's text): cut at every line break,
    each line as `split_paragraph` cuts it, the line breaks kept as literals."""
    document = Document()
    for line in text.splitlines(keepends=True):
        _add_paragraph(document, line, language, fitting)
    return document


def split_paragraph(paragraph: str, language: str, fitting: Fitting) -> Document:
    """A paragraph of a document, whose line breaks are only whitespace (a format's
    wrapping): cut into sentences where sentencex finds them, each within the limit."""
    document = Document()
    _add_paragraph(document, paragraph, language, fitting)
    return document


def split_sentence(sentence: str, fitting: Fitting) -> Document:
    """A sentence cut already (a file's, by the server's files API): only the length rule
    applies, so that no sentence is cut twice."""
    document = Document()
    document.sentence(sentence, fitting)
    return document


def sentences_of(paragraph: str, language: str) -> list[str]:
    """The paragraph's sentences, stripped, before the length rule (for a caller that
    sends them to `split_sentence` elsewhere, as the files API does)."""
    return [piece.strip() for piece in _pieces(paragraph, language) if piece.strip()]


def _pieces(paragraph: str, language: str) -> list[str]:
    """The paragraph's sentences with their surrounding whitespace; they join back to
    `paragraph`. The whole paragraph when the segmenter would change its characters (it
    normalised something: the text is kept and translated whole)."""
    pieces = list(segment(language, paragraph)) if paragraph.strip() else []
    if "".join(pieces) != paragraph:
        return [paragraph]
    return pieces


def _add_paragraph(document: Document, paragraph: str, language: str,
                   fitting: Fitting) -> None:
    for piece in _pieces(paragraph, language):
        document.sentence(piece, fitting)


def _fitting_chunks(sentence: str, fitting: Fitting) -> list[tuple[str, str]]:
    """(chunk, the separator that followed it) pairs covering `sentence`, each chunk
    within the limit."""
    if fitting.fits(sentence) or len(sentence) < 2:
        return [(sentence, "")]
    words = _SPACES.split(sentence)  # words at even indices, the spaces between at odd
    if len(words) >= 3:
        middle = (len(words) // 2) | 1  # an odd index: a run of spaces
        left, separator, right = "".join(words[:middle]), words[middle], \
            "".join(words[middle + 1:])
    else:
        middle = len(sentence) // 2
        left, separator, right = sentence[:middle], "", sentence[middle:]
    head = _fitting_chunks(left, fitting)
    head[-1] = (head[-1][0], separator)
    return head + _fitting_chunks(right, fitting)
