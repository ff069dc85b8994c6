"""`format=html`: the text between the tags is translated and the markup kept byte for
byte: the standard library's HTML parser (never regular expressions) finds where each
construct starts, and the markup is cut out of the source as written. What is text by
HTML's rules (such as "<1p>": a tag's name starts with a letter) is translated as text;
bidirectional controls, which a model cannot translate and drops, are kept in place
like tags."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from transformer_nmt.data.text import BIDI_CONTROL_CHARACTERS

UNTRANSLATED = {"script", "style", "code", "pre", "kbd", "samp", "var", "textarea"}
"""Elements whose text is code or raw data, kept as written."""
_TAG_START = re.compile("<")
BIDI_CONTROLS = re.compile(f"([{BIDI_CONTROL_CHARACTERS}]+)")
"""Runs of Unicode's Bidi_Control characters (marks, embeddings, overrides, isolates).
They order the text around them for display, and no model's vocabulary holds them: a
text is cut at them and they are kept where they are, so that what they enclose stays
enclosed and a translation never loses one of a pair."""


@dataclass
class Markup:
    """An HTML text as markup strings around numbered text nodes."""

    parts: list[str | int] = field(default_factory=list)
    """Markup or untranslated text (kept as is), or the index of a text in `texts`."""
    texts: list[str] = field(default_factory=list)
    """The text nodes to translate, with entities decoded, cut at bidi controls."""

    def join(self, translations: list[str]) -> str:
        """The HTML with each text node replaced by its translation, escaped."""
        return "".join(part if isinstance(part, str)
                       else html.escape(translations[part], quote=False)
                       for part in self.parts)


class _Collector(HTMLParser):
    """Notes where each construct of the source starts, so that markup is cut out of the
    source itself rather than rebuilt from what the parser reports (which normalises tag
    names and drops characters of CDATA sections and malformed markup)."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self._line_starts = [0] + [match.end() for match in re.finditer("\n", source)]
        self._kept: list[str] = []  # open elements whose text is not translated
        self.constructs: list[tuple[int, str | None]] = []
        """(where it starts in the source, its text to translate or None for markup)."""

    def _note(self, text: str | None = None) -> None:
        line, column = self.getpos()
        self.constructs.append((self._line_starts[line - 1] + column, text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._note()
        if tag in UNTRANSLATED or ("translate", "no") in attrs:
            self._kept.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._note()

    def handle_endtag(self, tag: str) -> None:
        self._note()
        if self._kept and self._kept[-1] == tag:
            self._kept.pop()

    def handle_data(self, data: str) -> None:
        self._note(None if self._kept or self.cdata_elem else data)

    def handle_comment(self, data: str) -> None:
        self._note()

    def handle_decl(self, decl: str) -> None:
        self._note()

    def handle_pi(self, data: str) -> None:
        self._note()

    def unknown_decl(self, data: str) -> None:
        self._note()


def parse_html(text: str) -> Markup:
    """`text` as markup and the text nodes to translate; joined with the texts as they
    are, every character of the markup comes back as written."""
    collector = _Collector(text)
    collector.feed(text)
    unfinished = collector.rawdata
    if unfinished.startswith("<"):
        # A tag, comment or declaration the text ends inside: markup, kept as written
        # (closing the parser would hand it over as text).
        collector.constructs.append((len(text) - len(unfinished), None))
    else:
        collector.close()
    return _markup(text, collector.constructs)


def _markup(source: str, constructs: list[tuple[int, str | None]]) -> Markup:
    """The Markup of `source` from where its constructs start: a construct runs to the
    next one's start, so markup is the source's own characters."""
    builder = _MarkupBuilder()
    builder.keep(source[:constructs[0][0]] if constructs else source)
    ends = [start for start, _ in constructs[1:]] + [len(source)]
    for (start, decoded), end in zip(constructs, ends):
        text_end = start if decoded is None else _end_of_text(source, start, end, decoded)
        if text_end > start:
            builder.text(source[start:text_end], decoded)
        if text_end < end:
            builder.keep(source[text_end:end])
    return builder.finish()


def _end_of_text(source: str, start: int, end: int, decoded: str) -> int:
    """Where the text `decoded`, starting at `start`, ends in the source: at `end`, the
    next construct, unless the parser passed over markup it does not report (such as
    "</>"), which begins with a "<" (a lone "<" of the text is reported apart); `start`
    if it cannot be found, so that all is kept as markup."""
    if html.unescape(source[start:end]) == decoded:
        return end
    for tag in _TAG_START.finditer(source, start, end):
        if html.unescape(source[start:tag.start()]) == decoded:
            return tag.start()
    return start


@dataclass
class _MarkupBuilder:
    """Markup put together piece by piece: pieces of text in a row (split at a lone < or
    an entity) make one text node, unless they are only whitespace, which is kept; bidi
    controls are kept too (as characters, however they were written), and cut the text
    node in two."""

    markup: Markup = field(default_factory=Markup)
    kept: list[str] = field(default_factory=list)
    """Markup not yet added to `markup`."""
    run: list[tuple[str, str]] = field(default_factory=list)
    """(as written, decoded) of the pieces of the text node being read."""

    def keep(self, written: str) -> None:
        self._end_text()
        self.kept.append(written)

    def text(self, written: str, decoded: str) -> None:
        self.run.append((written, decoded))

    def finish(self) -> Markup:
        self._end_text()
        self._add_kept()
        return self.markup

    def _end_text(self) -> None:
        written = "".join(piece for piece, _ in self.run)
        decoded = "".join(piece for _, piece in self.run)
        self.run.clear()
        if not BIDI_CONTROLS.sub("", decoded).strip():
            self.kept.append(written)
            return
        # Split by a capturing pattern: bidi controls at odd indices, text between.
        for index, piece in enumerate(BIDI_CONTROLS.split(decoded)):
            if index % 2 or not piece.strip():
                self.kept.append(piece)  # controls or whitespace: nothing to escape
                continue
            self._add_kept()
            self.markup.parts.append(len(self.markup.texts))
            self.markup.texts.append(piece)

    def _add_kept(self) -> None:
        if "".join(self.kept):
            self.markup.parts.append("".join(self.kept))
        self.kept.clear()
