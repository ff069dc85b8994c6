"""Why a translation is degenerate: pure functions of the subword pieces of a source
sentence and of its translation, each answering with short, stable reasons that the
guard (transformer_nmt.decode.quality.guard), the confidence and the web page show.

The bounds come from the reference translations of two corpora's training splits,
paired with their sources: the quickstart's Bible (30,401 pairs) and Multi30k (28,997),
English-German. A reference is what a good translation looks like, so a bound that flags
references would change good translations; the bounds below flag none of the 59,398
references, while the outputs they catch are plainly broken. Repetition and length are
relative to the source, so that a source that repeats itself, or is long, may be
translated faithfully.
"""

from __future__ import annotations

from typing import Sequence

from transformer_nmt.data.words import piece_words

REPEATS = "repeats"
"""A token or n-gram follows itself more often than any in the source does, and too
often for a sentence (MOST_RUNS)."""
TOO_LONG = "too_long"
"""More output tokens than `LONGEST` allows for the source's."""
TOO_SHORT = "too_short"
"""Fewer output tokens than `SHORTEST` asks for the source's."""
COPIES_SOURCE = "copies_source"
"""The output's lowercase words are the source's: an untranslated copy."""
ONLY_SYMBOLS = "only_symbols"
"""No letter or digit in the output (an empty one included), though the source has some."""
REASONS = (REPEATS, TOO_LONG, TOO_SHORT, COPIES_SOURCE, ONLY_SYMBOLS)
"""Every reason, in the order `degenerate_reasons` lists them."""

LONGEST_NGRAM = 4
"""Repeated n-grams are looked for up to this many tokens: longer loops contain repeated
shorter ones or are rare."""
MOST_RUNS = {1: 3, 2: 2, 3: 2, 4: 2}
"""Most times an n-gram of n tokens may follow itself back to back. In the references no
token comes more than three times in a row, and a longer n-gram more than twice only in
one Bible verse whose source has it too ("O earth, earth, earth"); a degenerate output
runs one word on to its maximum length ("WENDY WENDY WENDY WENDY ...")."""
LONGEST = (2.0, 10)
"""(a, b): an output of more than a * source tokens + b tokens is too long. The Bible's
and Multi30k's target/source ratios reach 1.8 and 1.92 at their 99.9th percentiles and
2.5 and 2.4 at most, among short sentences: no reference is longer than this bound
allows. The slack b keeps short sources (a name, "Amen.") from being held to a ratio."""
SHORTEST = (1 / 3, 1)
"""(a, b): an output of fewer than a * source tokens - b tokens is too short. The ratios'
0.1th percentiles are 0.5 and 0.53, their minimum 0.4 and 0.42: no reference is shorter
than this bound allows, and an output shorter than that has dropped content."""
COPIED_SHARE = 0.8
"""An output is a copy when at least this share of its distinct lowercase words, and
`COPIED_WORDS` of them, are words of the source."""
COPIED_WORDS = 3
"""See COPIED_SHARE. Names pass into a translation unchanged, and lists of them are
common (Bible genealogies); they are capitalised, so only lowercase words count, and a
translation shares few of those with its source: of the 58,038 references with three or
more, none has more than 60% in its source (a quoted English slogan in Multi30k)."""


def degenerate_reasons(source: Sequence[str], output: Sequence[str]) -> list[str]:
    """Why the output, subword pieces `output` (▁ marking a word's start, no BOS or EOS),
    is a degenerate translation of the source, pieces `source`: the reasons of REASONS
    that hold, in that order; empty when none does. An empty source (nothing to
    translate) has none."""
    if not source:
        return []
    reasons = []
    if repeats(source, output):
        reasons.append(REPEATS)
    length = length_reason(len(source), len(output))
    if length is not None:
        reasons.append(length)
    if copies_source(source, output):
        reasons.append(COPIES_SOURCE)
    if only_symbols(source, output):
        reasons.append(ONLY_SYMBOLS)
    return reasons


def longest_run(tokens: Sequence[str], n: int) -> int:
    """Most times one n-gram of `tokens` follows itself back to back (1 when none does;
    0 when `tokens` has fewer than n)."""
    best = 1 if len(tokens) >= n else 0
    for start in range(len(tokens) - 2 * n + 1):
        runs = 1
        while tokens[start + runs * n: start + (runs + 1) * n] == tokens[start: start + n]:
            runs += 1
        best = max(best, runs)
    return best


def repeats(source: Sequence[str], output: Sequence[str]) -> bool:
    """Whether an n-gram of `output` (n up to LONGEST_NGRAM) follows itself more times
    than MOST_RUNS allows and more than any n-gram of `source` does: a source that says
    "holy, holy, holy, holy" may be translated so."""
    return any(runs > MOST_RUNS[n] and runs > longest_run(source, n)
               for n in range(1, LONGEST_NGRAM + 1)
               for runs in [longest_run(output, n)])


def length_reason(source_tokens: int, output_tokens: int) -> str | None:
    """TOO_LONG or TOO_SHORT when an output of `output_tokens` subword tokens is out of
    the bounds LONGEST and SHORTEST set for a source of `source_tokens`; else None."""
    long_a, long_b = LONGEST
    short_a, short_b = SHORTEST
    if output_tokens > long_a * source_tokens + long_b:
        return TOO_LONG
    if output_tokens < short_a * source_tokens - short_b:
        return TOO_SHORT
    return None


def words(pieces: Sequence[str]) -> list[str]:
    """The words that `pieces` spell (transformer_nmt.data.words), without the
    punctuation around them (pieces of punctuation alone give none)."""
    found = (word.strip(".,;:!?\"'()[]{}«»„“”‘’-–—") for word in piece_words(pieces))
    return [word for word in found if word]


def copies_source(source: Sequence[str], output: Sequence[str]) -> bool:
    """Whether `output` copies `source` untranslated: COPIED_WORDS or more distinct
    lowercase words, COPIED_SHARE of them the source's. Scripts without case have no
    lowercase words, so this never fires for them."""
    lowercase = {word for word in words(output) if word[0].islower()}
    if len(lowercase) < COPIED_WORDS:
        return False
    copied = lowercase & set(words(source))
    return len(copied) >= COPIED_SHARE * len(lowercase)


def only_symbols(source: Sequence[str], output: Sequence[str]) -> bool:
    """Whether `output` has no letter or digit while `source` has some."""
    def has_text(pieces: Sequence[str]) -> bool:
        return any(character.isalnum() for piece in pieces for character in piece)
    return has_text(source) and not has_text(output)
