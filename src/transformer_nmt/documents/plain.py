"""Plain text and subtitles (.txt, .srt, .vtt): paragraphs of lines, each line a run, so
that a sentence wrapped over lines is translated whole and wrapped over the same lines; a
subtitle's tags (<i>, <font ...>, {\\an8}) are kept, the text between them a run each.

SubRip files are read and written by the `srt` package: numbering, times and cue
settings come back as they were. No WebVTT package is installed with the project, so a
.vtt file is read by the format's own markers (a WEBVTT header, blank lines between
blocks, a cue's timing line holding "-->"): every line except a cue's text is kept as
written, NOTE, STYLE and REGION blocks included.
"""

from __future__ import annotations

import re

import srt

from transformer_nmt.documents.runs import Run, spaced

_LINE_END = re.compile(r"\r\n|\n|\r")
SENTENCE_ENDS = tuple(".!?:;…。！？")
CUE_TAGS = re.compile(r"(<[^<>\n]*>|\{\\[^{}\n]*\})")
"""A subtitle's markup: SubRip's and WebVTT's tags (<i>, <font color="red">, <c.yellow>,
<v Roger>, <00:00:01.000>) and the {\\an8} overrides SubRip borrows from SSA; the
formats' specifications define a closed set, whose only shape in common is the bracket."""


class BadText(Exception):
    """A text file whose content is not of its type; the message says why."""


def _line_runs(lines: list[str], indices: list[int],
               tags: re.Pattern[str] | None = None) -> list[Run]:
    """The lines at `indices` as runs, each line's last ending where a space would; with
    `tags`, the text between a line's tags is a run of its own and the tags are kept."""
    runs: list[Run] = []
    for position, index in enumerate(indices):
        pieces = tags.split(lines[index]) if tags else [lines[index]]
        # Text at even indices, the tags between them at odd ones.
        line_runs = [_piece(lines, index, pieces, k) for k in range(0, len(pieces), 2)
                     if pieces[k]]
        if line_runs and position < len(indices) - 1:
            line_runs[-1] = spaced(line_runs[-1])
        runs += line_runs
    return runs


def _piece(lines: list[str], index: int, pieces: list[str], k: int) -> Run:
    def set_piece(text: str) -> None:
        pieces[k] = text
        lines[index] = "".join(pieces)
    return Run(lambda: pieces[k], set_piece)


class PlainText:
    """A text file: paragraphs are blocks of lines between blank lines, a block ending
    too after a line that ends a sentence (so that a list of lines is not one text)."""

    def __init__(self, text: str) -> None:
        self.lines = _LINE_END.split(text)
        self.ends = _LINE_END.findall(text)

    def paragraphs(self) -> list[list[Run]]:
        blocks: list[list[int]] = [[]]
        for index, line in enumerate(self.lines):
            if line.strip():
                blocks[-1].append(index)
            if (not line.strip() or line.rstrip().endswith(SENTENCE_ENDS)) and blocks[-1]:
                blocks.append([])
        return [_line_runs(self.lines, block) for block in blocks if block]

    def to_text(self) -> str:
        return "".join(line + end for line, end in zip(self.lines, self.ends + [""]))


class SubRip:
    """An .srt file: each subtitle's lines are one paragraph."""

    def __init__(self, text: str) -> None:
        try:
            self.subtitles = list(srt.parse(text))
        except srt.SRTParseError as error:
            raise BadText(f"it is not SubRip ({str(error).splitlines()[0]})") from None
        if not self.subtitles and text.strip():
            raise BadText("it holds no SubRip subtitles")
        self.lines = [subtitle.content.split("\n") for subtitle in self.subtitles]

    def paragraphs(self) -> list[list[Run]]:
        return [_line_runs(lines, list(range(len(lines))), CUE_TAGS) for lines in self.lines]

    def to_text(self) -> str:
        for subtitle, lines in zip(self.subtitles, self.lines):
            subtitle.content = "\n".join(lines)
        return srt.compose(self.subtitles, reindex=False)


class WebVTT(PlainText):
    """A .vtt file: each cue's text lines are one paragraph; everything else is kept."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        if not self.lines[0].lstrip("\ufeff").startswith("WEBVTT"):
            raise BadText("it does not start with WEBVTT")

    def paragraphs(self) -> list[list[Run]]:
        cues: list[list[int]] = []
        in_cue = False
        for index, line in enumerate(self.lines):
            if not line.strip():
                in_cue = False
            elif in_cue:
                cues[-1].append(index)
            elif "-->" in line:
                in_cue = True
                cues.append([])
        return [_line_runs(self.lines, cue, CUE_TAGS) for cue in cues if cue]
