"""Markdown (.md), read by markdown-it-py (CommonMark with tables): each inline block
(a paragraph, heading, list item, table cell) is a paragraph whose runs are its text
tokens; the markup between them (emphasis markers, links' targets, code spans, images,
HTML) is never touched: translations are written into the source at the text tokens'
own places, so the file changes nowhere else.

A text token whose source differs from its content (a backslash escape or an entity,
which markdown-it decodes) cannot be put back in place; it is kept as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from transformer_nmt.documents.runs import Run, spaced

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
"""A line as markdown-it counts them: only CR, LF and CRLF end one."""


@dataclass
class _Edit:
    start: int
    end: int
    text: str
    line_ends: bool = False
    """A line break follows: the words on either side are apart."""


@dataclass
class Markdown:
    """A Markdown text with the places of its text tokens."""

    source: str
    edits: list[_Edit] = field(default_factory=list)
    blocks: list[list[int]] = field(default_factory=list)
    """Per inline block, the indices of its text tokens' edits."""

    def __post_init__(self) -> None:
        lines = _LINE.findall(self.source)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        searched_from: dict[int, int] = {}  # a line's column already consumed
        for token in MarkdownIt("commonmark").enable("table").parse(self.source):
            if token.type == "inline" and token.map and token.children:
                places = self._places(token, lines, starts, searched_from)
                if places:
                    self.blocks.append(places)

    def _places(self, token: Token, lines: list[str], starts: list[int],
                searched_from: dict[int, int]) -> list[int]:
        """The edits of the inline token's text children; [] when its content cannot be
        found in its source lines."""
        offsets = []  # where each line of the content begins in the source
        for number, content_line in enumerate(token.content.split("\n")):
            line_index = token.map[0] + number
            if line_index >= len(lines):
                return []
            column = lines[line_index].find(content_line, searched_from.get(line_index, 0))
            if column < 0:
                return []
            searched_from[line_index] = column + len(content_line)
            offsets.append(starts[line_index] + column)
        content_starts = [0]
        for content_line in token.content.split("\n")[:-1]:
            content_starts.append(content_starts[-1] + len(content_line) + 1)
        places, cursor, autolink = [], 0, False
        for child in token.children:
            if child.type == "link_open":
                autolink = child.markup in ("autolink", "linkify")
            elif child.type == "link_close":
                href = str(child.attrs.get("href", "")) if child.attrs else ""
                autolink = False
                found = token.content.find(href, cursor) if href else -1
                cursor = cursor if found < 0 else found + len(href)
            elif child.type == "code_inline":
                found = token.content.find(child.content, cursor)
                cursor = cursor if found < 0 else found + len(child.content)
            elif child.type in ("softbreak", "hardbreak") and places:
                self.edits[places[-1]].line_ends = True
            elif child.type == "text" and child.content and not autolink:
                found = token.content.find(child.content, cursor)
                if found < 0:
                    continue
                cursor = found + len(child.content)
                line = max(i for i, start in enumerate(content_starts) if start <= found)
                start = offsets[line] + found - content_starts[line]
                places.append(len(self.edits))
                self.edits.append(_Edit(start, start + len(child.content), child.content))
        return places

    def paragraphs(self) -> list[list[Run]]:
        return [[self._run(self.edits[index]) for index in block] for block in self.blocks]

    @staticmethod
    def _run(edit: _Edit) -> Run:
        run = Run(lambda: edit.text, lambda text: setattr(edit, "text", text))
        return spaced(run) if edit.line_ends else run

    def to_text(self) -> str:
        pieces, written = [], 0
        for edit in sorted(self.edits, key=lambda edit: edit.start):
            pieces += [self.source[written:edit.start], edit.text]
            written = edit.end
        return "".join(pieces) + self.source[written:]
