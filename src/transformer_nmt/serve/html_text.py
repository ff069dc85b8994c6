"""`format=html`: the text between the tags is translated and the markup kept, by the
standard library's HTML parser (never regular expressions)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from html.parser import HTMLParser

UNTRANSLATED = {"script", "style", "code", "pre", "kbd", "samp", "var", "textarea"}
"""Elements whose text is code or raw data, kept as written."""


@dataclass
class Markup:
    """An HTML text as markup strings around numbered text nodes."""

    parts: list[str | int] = field(default_factory=list)
    """Markup or untranslated text (kept as is), or the index of a text in `texts`."""
    texts: list[str] = field(default_factory=list)
    """The text nodes to translate, with entities decoded."""

    def join(self, translations: list[str]) -> str:
        """The HTML with each text node replaced by its translation, escaped."""
        return "".join(part if isinstance(part, str)
                       else html.escape(translations[part], quote=False)
                       for part in self.parts)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.markup = Markup()
        self._kept: list[str] = []  # open elements whose text is not translated

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.markup.parts.append(self.get_starttag_text() or "")
        if tag in UNTRANSLATED or ("translate", "no") in attrs:
            self._kept.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.markup.parts.append(self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        self.markup.parts.append(f"</{tag}>")
        if self._kept and self._kept[-1] == tag:
            self._kept.pop()

    def handle_data(self, data: str) -> None:
        if self._kept or not data.strip():
            text = data if self.cdata_elem else html.escape(data, quote=False)
            self.markup.parts.append(text)
        else:
            self.markup.parts.append(len(self.markup.texts))
            self.markup.texts.append(data)

    def handle_comment(self, data: str) -> None:
        self.markup.parts.append(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.markup.parts.append(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self.markup.parts.append(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        self.markup.parts.append(f"<![{data}]>")


def parse_html(text: str) -> Markup:
    """`text` as markup and the text nodes to translate."""
    collector = _Collector()
    collector.feed(text)
    collector.close()
    return collector.markup
