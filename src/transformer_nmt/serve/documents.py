"""Documents, not just sentences: a text of paragraphs and lines is cut into sentences
that the model can translate, and the translations are put back in the same frame.

Sentences are found by sentencex (Wikimedia's segmenter): it covers any language code
through fallback chains, keeps the text intact (its segments concatenate back to the
input) and is fast (far faster than pysbd on a long English text, with the same cuts
on abbreviations, numbers and initials). Line breaks and the
whitespace around sentences are kept exactly; a sentence with more subword tokens than
the model can take is halved at a word boundary (or, for one long word, between
characters) until every part fits, never truncated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from sentencex import segment

_SPACES = re.compile(r"(\s+)")


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

    def sentence(self, text: str) -> None:
        self.parts.append(len(self.sentences))
        self.sentences.append(text)

    def join(self, translations: list[str]) -> str:
        """The document with each sentence replaced by its translation."""
        return "".join(part if isinstance(part, str) else translations[part]
                       for part in self.parts)


def split_document(text: str, language: str, count_tokens: Callable[[str], int],
                   limit: int) -> Document:
    """`text` cut into sentences of at most `limit` tokens as `count_tokens` counts them,
    with every character that is not part of a sentence kept as a literal."""
    document = Document()
    for line in text.splitlines(keepends=True):
        for piece in _sentences_of_line(line, language):
            stripped = piece.strip()
            if not stripped:
                document.literal(piece)
                continue
            start = piece.index(stripped)
            document.literal(piece[:start])
            for chunk, separator in _fitting_chunks(stripped, count_tokens, limit):
                document.sentence(chunk)
                document.literal(separator)
            document.literal(piece[start + len(stripped):])
    return document


def _sentences_of_line(line: str, language: str) -> list[str]:
    """The line's sentences with their surrounding whitespace; pieces join to `line`."""
    pieces = list(segment(language, line)) if line.strip() else []
    if "".join(pieces) != line:
        # The segmenter normalised something: keep the text and translate it whole.
        return [line]
    return pieces


def _fitting_chunks(sentence: str, count_tokens: Callable[[str], int],
                    limit: int) -> list[tuple[str, str]]:
    """(chunk, the separator that followed it) pairs covering `sentence`, each chunk
    within `limit` tokens."""
    if count_tokens(sentence) <= limit or len(sentence) < 2:
        return [(sentence, "")]
    words = _SPACES.split(sentence)  # words at even indices, the spaces between at odd
    if len(words) >= 3:
        middle = (len(words) // 2) | 1  # an odd index: a run of spaces
        left, separator, right = "".join(words[:middle]), words[middle], \
            "".join(words[middle + 1:])
    else:
        middle = len(sentence) // 2
        left, separator, right = sentence[:middle], "", sentence[middle:]
    head = _fitting_chunks(left, count_tokens, limit)
    head[-1] = (head[-1][0], separator)
    return head + _fitting_chunks(right, count_tokens, limit)
