"""One call's work around the search: what each line asks of its output, the token ids
the search needs, and the Translations it gives back.

A `TranslationJob` is made once, before any search (`Translator.begin`), and carries a
call's settings and lines to whatever decodes them (CTranslate2 or the lockstep
searches, in batches) and on to `Translator.finish`, which returns their Translations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import normalize
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError

logger = logging.getLogger(__name__)


@dataclass
class Translation:
    """One translation of one input line."""

    text: str
    """The detokenized translation."""
    score: float
    """log P(Y | X) / lp(Y), see transformer_nmt.decode.search.searches."""
    tokens: list[int]
    """The generated token ids, without BOS and EOS."""
    alignment: list[tuple[int, int]] | None = None
    """(source word, target word) pairs, 0-based over whitespace-separated words: each
    target subword aligned to the source subword it attends to most; when asked for."""
    token_scores: list[float] | None = None
    """log P of each token given the source and the tokens before it, the end of sentence
    last (len(tokens) + 1 values, summing to log P(Y | X); none for an empty input line,
    which is not translated); when asked for."""
    confidence: float | None = None
    """The probability that a bilingual reader would accept this translation, as the
    model's calibration estimates it (transformer_nmt.decode.quality.confidence); None when the
    model has no calibration (`nmt calibrate`) or the line is empty; 0, calibration or
    not, when the model's vocabulary cannot read the source
    (transformer_nmt.decode.quality.unknown)."""
    confidence_reasons: list[str] = field(default_factory=list)
    """Why the confidence is low ("repeats a word", ...); empty when it is not."""
    degenerate: list[str] | None = None
    """Why the search's first best output for this line was degenerate
    (transformer_nmt.decode.quality.degenerate REASONS; empty: it was sound), whichever of the
    n-best this is; None when not checked (DecodeConfig.guard off, sampling, an empty
    line)."""
    fallback: bool = False
    """True when this translation is the guard's fallback's, which replaced a degenerate
    first output (transformer_nmt.decode.quality.guard)."""

    def pieces(self, vocab: Vocab) -> list[str]:
        """The subword pieces of `tokens` in `vocab` (▁ marks a word start)."""
        return [vocab.piece(token) for token in self.tokens]


@dataclass(frozen=True)
class TranslationRequest:
    """One line to translate, with what its output must contain."""

    text: str
    """The source sentence, raw text."""
    prefix: str = ""
    """Raw target text the translation must start with (its subword pieces are forced,
    then the search goes on freely); whole words, as a piece boundary inside a word
    may not be one the model would choose."""
    constraints: tuple[str, ...] = ()
    """Phrases, raw target text, that the translation must contain (terminology): beam
    search constrained to their subword pieces (transformer_nmt.decode.search.constrained)."""


@dataclass(frozen=True)
class CallSettings:
    """The settings of one call: the search, and what each translation carries. Made
    once per call (`Translator.settings`) and carried unchanged to its end; a server's
    sentences with equal settings share batches."""

    decode: DecodeConfig
    alignments: bool = False
    token_scores: bool = False


@dataclass
class TranslationJob:
    """The lines of one call, between `Translator.begin` and `Translator.finish`."""

    settings: CallSettings
    ids: list[list[int]]
    """Each line's source token ids (without EOS), cut to what the model translates."""
    prefixes: list[list[int]] | None
    """Each line's forced prefix as target token ids; None when no line has one."""
    constraints: list[list[list[int]]] | None
    """Each line's constraint phrases as target token ids; None when no line has any."""
    numbers: list[int]
    """Each line's number, which seeds its samples and names it in warnings."""
    unreadable: list[bool] | None = None
    """Whether the model's vocabulary cannot read each line's source
    (transformer_nmt.decode.quality.unknown); None when no line has an unknown piece."""

    @property
    def searched(self) -> list[int]:
        """The lines that need a search: those with source tokens."""
        return [i for i, sentence in enumerate(self.ids) if sentence]

    def pick(self, rows: list[int]) -> tuple[list[list[int]], list[list[int]] | None,
                                             list[int], list[list[list[int]]] | None]:
        """Lines `rows`' source ids, prefixes, numbers and constraints, as the searches
        take them."""
        return ([self.ids[i] for i in rows], _pick(self.prefixes, rows),
                [self.numbers[i] for i in rows], _pick(self.constraints, rows))

    def part(self, rows: list[int]) -> "TranslationJob":
        """A job of lines `rows` of this one, in that order, with these settings: what a
        worker process is sent of a batch."""
        ids, prefixes, numbers, constraints = self.pick(rows)
        return TranslationJob(self.settings, ids, prefixes, constraints, numbers,
                              _pick(self.unreadable, rows))

    def in_order(self, found: dict[int, list[Translation]]) -> list[list[Translation]]:
        """Every line's translations, in order: those `found` for it, by line, and an
        empty translation for each line not searched (an empty line)."""
        return [found[i] if i in found else [self._empty()] for i in range(len(self.ids))]

    def _empty(self) -> Translation:
        """The translation of an empty line, with the details the settings ask for."""
        return Translation("", 0.0, [], [] if self.settings.alignments else None,
                           [] if self.settings.token_scores else None)


def join_jobs(jobs: list[TranslationJob]) -> tuple[TranslationJob, list[int]]:
    """One job of the lines of `jobs` (one settings), and where each job's lines start in
    it: a server decodes the lines of several requests at once. A line of a job without
    prefixes or constraints gets none ([]), as `prefix_ids` gives it beside others'."""
    joined = TranslationJob(jobs[0].settings, [], _joined(jobs, "prefixes"),
                            _joined(jobs, "constraints"), [],
                            _joined(jobs, "unreadable", missing=bool))
    starts = []
    for job in jobs:
        starts.append(len(joined.ids))
        joined.ids += job.ids
        joined.numbers += job.numbers
    return joined, starts


def _joined(jobs: list[TranslationJob], name: str, missing: type = list) -> list | None:
    """The per-line values `name` of `jobs` in one list, missing() for each line of a job
    without them; None when no job has them."""
    if all(getattr(job, name) is None for job in jobs):
        return None
    values = [getattr(job, name) for job in jobs]
    return [row for job, value in zip(jobs, values)
            for row in (value if value is not None else [missing() for _ in job.ids])]


def _pick(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


def prefix_ids(vocab: Vocab, requests: list[TranslationRequest], longest: int
               ) -> list[list[int]] | None:
    """Each request's prefix as target token ids, cut to `longest` (the longest output
    the model's positions allow); None when no request has a prefix."""
    if not any(request.prefix for request in requests):
        return None
    prefixes = vocab.target.encode_batch([normalize(request.prefix) for request in requests])
    for prefix in prefixes:
        del prefix[longest:]
    return prefixes


def constraint_ids(vocab: Vocab, requests: list[TranslationRequest], decode: DecodeConfig,
                   numbers: list[int], longest: int) -> list[list[list[int]]] | None:
    """Each request's constraint phrases as target token ids; None when no request
    has any. Warns about a line whose phrases cannot all fit in `longest` output tokens
    (the search then misses some, rather than hang)."""
    if not any(request.constraints for request in requests):
        return None
    if decode.sampling:
        raise UserError("constraints need beam search; leave out sampling")
    found = []
    for offset, request in enumerate(requests):
        phrases = [ids for ids in vocab.target.encode_batch(
            [normalize(phrase) for phrase in request.constraints]) if ids]
        needed = sum(len(phrase) for phrase in phrases)
        if needed > longest:
            logger.warning(
                "the constraints of input line %d need %d subword tokens, more than the "
                "%d this model's outputs can have; its translation will miss some",
                numbers[offset] + 1, needed, longest)
        found.append(phrases)
    return found
