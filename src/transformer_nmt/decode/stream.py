"""Translating a stream of lines: the output formats, the all-or-nothing output file and
progress bar, and the closing report of how much was translated, how fast."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterator

from transformer_nmt.data.text import LineWriter, count_lines, iter_lines, read_lines
from transformer_nmt.decode.translator import Translation, Translator
from transformer_nmt.errors import UserError


def format_translations(index: int, translations: list[Translation], nbest: bool) -> list[str]:
    """Output lines for input line `index` (0-based).

    Plain: the best translation. nbest: one `index ||| translation ||| score` line per
    hypothesis, best first. With alignments, ` ||| ` and the source-target word pairs
    (`0-0 1-2`, Pharaoh format) end each line.
    """
    lines = []
    for translation in translations if nbest else translations[:1]:
        fields = [str(index), translation.text, f"{translation.score:.4f}"] if nbest \
            else [translation.text]
        if translation.alignment is not None:
            fields.append(" ".join(f"{s}-{t}" for s, t in translation.alignment))
        lines.append(" ||| ".join(fields))
    return lines


def translate_stream(translator: Translator, input_path: str | Path | None = None,
                     output_path: str | Path | None = None, nbest: bool = False,
                     interactive: bool = False, errors: str = "strict") -> int:
    """Translate a file (or stdin) into a file (or stdout); returns the number of lines.

    errors: what invalid UTF-8 in the input does, as `read_lines` takes it.

    A file output is written to a temporary name and renamed when complete, with a
    progress bar on stderr. interactive: flush each stdin line's translation at once (give
    the translator buffer_size 1, so that it translates each line as soon as it is read). Except interactively, a last line on stderr says
    how many lines and subword tokens were translated, how fast (model loading excluded).
    """
    if interactive and input_path is not None:
        raise UserError("--interactive reads standard input; leave out --input")
    lines = (read_lines(input_path, errors) if input_path is not None
             else iter_lines(sys.stdin.buffer, "<stdin>", errors))
    speed = SpeedReport()
    translations = speed.counted(translator.translate_nbest(lines))
    count = 0
    if output_path is None:
        for count, result in enumerate(translations, start=1):
            for line in format_translations(count - 1, result, nbest):
                sys.stdout.write(line + "\n")
            if interactive:
                sys.stdout.flush()
        sys.stdout.flush()
        if not interactive:
            speed.report()
        return count
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    total = count_lines(input_path) if input_path is not None else None
    writer = LineWriter(output_path)
    try:
        # Warnings (a truncated line) print above the progress bar, not through it.
        with logging_redirect_tqdm():
            for count, result in enumerate(tqdm(translations, total=total, unit=" lines",
                                                desc="translating"), start=1):
                for line in format_translations(count - 1, result, nbest):
                    writer.write(line)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    speed.report(f" into {output_path}")
    return count


class SpeedReport:
    """Counts lines and output subword tokens as translations pass, and reports the rate."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.lines = self.tokens = 0

    def counted(self, translations: Iterator[list[Translation]]) -> Iterator[list[Translation]]:
        for result in translations:
            self.lines += 1
            self.tokens += len(result[0].tokens)
            yield result

    def report(self, where: str = "") -> None:
        """One line on stderr: what was translated, in how long, how fast."""
        seconds = max(time.perf_counter() - self.start, 1e-9)
        lines = f"{self.lines} line{'' if self.lines == 1 else 's'}"
        print(f"translated {lines} ({self.tokens} subword tokens){where} in "
              f"{seconds:.1f} s: {self.lines / seconds:.1f} lines/s, "
              f"{self.tokens / seconds:.0f} tokens/s", file=sys.stderr)
