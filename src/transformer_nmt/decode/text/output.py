"""Translating a stream of lines: the output formats, writing to a text stream or to an
all-or-nothing file with a progress bar, and the count of what was translated, how fast.

These functions take lines and streams, never sys.stdin or sys.stdout: which to use is
the caller's choice (the `nmt` command passes standard input and output).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from itertools import zip_longest
from typing import Any, Callable, Iterable, Iterator, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer_nmt.data.text import LineWriter
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.quality.unknown import UNKNOWN_SOURCE, is_unreadable
from transformer_nmt.decode.text.target_language import with_language_token
from transformer_nmt.decode.text.translator import Translation, TranslationRequest, Translator
from transformer_nmt.errors import UserError

logger = logging.getLogger(__name__)


def requests(lines: Iterable[str], prefixes: Iterable[str] | None = None,
             constraints: Iterable[str] | None = None, prefix_name: str = "prefixes",
             constraints_name: str = "constraints") -> Iterator[TranslationRequest]:
    """Each line as a request whose output starts with the prefix of the same line
    number and contains the tab-separated phrases of the same constraints line (empty
    lines: none); UserError, naming the file, when one runs out before the lines or
    the other way round."""
    sides = [(prefixes, prefix_name, "prefix"), (constraints, constraints_name, "constraints")]
    given = [(lines_of, name, what) for lines_of, name, what in sides if lines_of is not None]
    number = 0
    for row in zip_longest(lines, *(lines_of for lines_of, _, _ in given)):
        number += 1
        for value, (_, name, what) in zip(row[1:], given):
            if (row[0] is None) != (value is None):
                more = "fewer" if value is None else "more"
                raise UserError(f"{name} has {more} lines than the input (input line "
                                f"{number}); give one {what} line per input line, empty for "
                                "none")
        if row[0] is None:
            return
        fields = dict(zip((what for _, _, what in given), row[1:]))
        phrases = fields.get("constraints") or ""
        yield TranslationRequest(row[0], fields.get("prefix") or "",
                                 tuple(phrase for phrase in phrases.split("\t") if phrase.strip()))


def format_translations(index: int, translations: list[Translation], nbest: bool,
                        vocab: Vocab | None = None) -> list[str]:
    """Output lines for input line `index` (0-based).

    Plain: the best translation. nbest: one `index ||| translation ||| score` line per
    hypothesis, best first. With alignments, ` ||| ` and the source-target word pairs
    (`0-0 1-2`, Pharaoh format) end each line; with token scores, ` ||| ` and the
    log-probability of each token, end of sentence last, after them.

    With `vocab`, JSON instead: one object per input line, {"text", "tokens" (the
    subword pieces), "token_scores", "score", "confidence" (None for a model without
    calibration), "confidence_reasons" (when it is low), "degenerate" (why the first output
    was degenerate, null when not checked), "fallback" (whether this is the guard's
    fallback), "alignment" (when there are alignments)}, or with nbest {"nbest": [such
    objects, best first]}.
    """
    if vocab is not None:
        objects = [_json_object(translation, vocab) for translation in translations]
        return [json.dumps({"nbest": objects} if nbest else objects[0], ensure_ascii=False)]
    lines = []
    for translation in translations if nbest else translations[:1]:
        fields = [str(index), translation.text, f"{translation.score:.4f}"] if nbest \
            else [translation.text]
        if translation.alignment is not None:
            fields.append(" ".join(f"{s}-{t}" for s, t in translation.alignment))
        if translation.token_scores is not None:
            fields.append(" ".join(f"{score:.4f}" for score in translation.token_scores))
        lines.append(" ||| ".join(fields))
    return lines


def _json_object(translation: Translation, vocab: Vocab) -> dict[str, Any]:
    """One translation as the JSON output lays it out."""
    scores = translation.token_scores
    result: dict[str, Any] = {
        "text": translation.text, "tokens": translation.pieces(vocab),
        "token_scores": None if scores is None else [round(score, 4) for score in scores],
        "score": round(translation.score, 4), "confidence": translation.confidence,
        "degenerate": translation.degenerate, "fallback": translation.fallback}
    if translation.confidence_reasons:
        result["confidence_reasons"] = translation.confidence_reasons
    if translation.alignment is not None:
        result["alignment"] = [list(pair) for pair in translation.alignment]
    return result


def translate_stream(translator: Translator, lines: Iterable[str | TranslationRequest],
                     output: TextIO, *,
                     nbest: bool = False, flush_each: bool = False,
                     as_json: bool = False, language_token: str | None = None
                     ) -> "SpeedReport":
    """Translate `lines` into the text stream `output`, in input order, as
    `format_translations` lays them out (as JSON with `as_json`); returns what was
    translated and how fast.

    flush_each: flush `output` after each input line's translations, so that a reader
    gets every answer at once (interactive use; give the translator buffer_size 1 too,
    or it waits for a full buffer of lines before translating any).
    language_token: a multilingual model's target-language token (>>fra<<) put before
    each line (transformer_nmt.decode.text.target_language).
    """
    speed = SpeedReport(translator.runtime)
    vocab = translator.vocab if as_json else None
    for index, result in enumerate(speed.counted(translated(translator, lines,
                                                            language_token))):
        for line in format_translations(index, result, nbest, vocab):
            output.write(line + "\n")
        if flush_each:
            output.flush()
    output.flush()
    return speed


def translated(translator: Translator, lines: Iterable[str | TranslationRequest],
               language_token: str | None = None) -> Iterator[list[Translation]]:
    """translator.translate_nbest of `lines`, each with `language_token` before it where
    one is given, and the alignments counted over the line's own words."""
    if language_token is not None:
        # The token is no word (transformer_nmt.data.words): alignments count the line's own.
        lines = (with_language_token(line, language_token) for line in lines)
    yield from warned_unreadable(translator.translate_nbest(lines))


def warned_unreadable(results: Iterator[list[Translation]]) -> Iterator[list[Translation]]:
    """`results` (each input line's translations) passed through, with a warning at the
    first line whose source the model's vocabulary cannot read, and how many there were
    in all at the end when more than one: such a line's translation is invented, and a
    user who gave a file in the wrong language should know before reading it."""
    unreadable = 0
    for number, result in enumerate(results, 1):
        if result and is_unreadable(result[0]):
            unreadable += 1
            if unreadable == 1:
                logger.warning("input line %d: %s; its translation is invented, not "
                               "translated (confidence 0)", number, UNKNOWN_SOURCE)
        yield result
    if unreadable > 1:
        logger.warning("%d input lines in all are mostly unknown to the model's vocabulary; "
                       "their translations are invented (confidence 0)", unreadable)


def translate_file(translator: Translator, lines: Iterable[str | TranslationRequest],
                   output_path: str | Path, *,
                   nbest: bool = False, total: int | None = None,
                   as_json: bool = False,
                   observe: Callable[[list[Translation]], None] | None = None,
                   language_token: str | None = None) -> "SpeedReport":
    """Translate `lines` into the file at `output_path`, as `translate_stream` does, with
    a progress bar on stderr (out of `total` lines, when known); returns what was
    translated and how fast.

    The file is written under a temporary name and renamed when complete, so that it
    appears whole or not at all; missing parent directories are created. `observe` is
    given each input line's translations as they are written; `language_token` as for
    `translate_stream`.
    """
    speed = SpeedReport(translator.runtime)
    vocab = translator.vocab if as_json else None
    translations = speed.counted(translated(translator, lines, language_token))
    # Warnings (a truncated line) print above the progress bar, not through it.
    with LineWriter(output_path) as writer, logging_redirect_tqdm():
        for index, result in enumerate(tqdm(translations, total=total, unit=" lines",
                                            desc="translating")):
            if observe is not None:
                observe(result)
            for line in format_translations(index, result, nbest, vocab):
                writer.write(line)
    return speed


class SpeedReport:
    """Counts lines and output subword tokens as translations pass, and times them;
    `runtime` says what searched (Translator.runtime)."""

    def __init__(self, runtime: str | None = None) -> None:
        self.runtime = runtime
        self.start = time.perf_counter()
        self.end: float | None = None
        self.lines = self.tokens = 0

    def counted(self, translations: Iterator[list[Translation]]) -> Iterator[list[Translation]]:
        """`translations` passed through, counting each line and its best translation's
        tokens, and noting the time when the last has passed."""
        for result in translations:
            self.lines += 1
            self.tokens += len(result[0].tokens)
            yield result
        self.end = time.perf_counter()

    def summary(self, output_path: str | Path | None = None) -> str:
        """One line saying what was translated (into `output_path`, when given), in how
        long, how fast: until the last translation or, before it, until now."""
        seconds = max((self.end or time.perf_counter()) - self.start, 1e-9)
        lines = f"{self.lines} line{'' if self.lines == 1 else 's'}"
        into = f" into {output_path}" if output_path is not None else ""
        on = f", on {self.runtime}" if self.runtime else ""
        return (f"translated {lines} ({self.tokens} subword tokens){into} in "
                f"{seconds:.1f} s: {self.lines / seconds:.1f} lines/s, "
                f"{self.tokens / seconds:.0f} tokens/s{on}")
