"""The guard against degenerate output: the sentences whose best translation is
degenerate (transformer_nmt.decode.quality.degenerate) are decoded again with fallback settings,
and the fallback's result replaces the first only when it is not degenerate itself: a
degenerate fallback is no better a translation (keeping the higher-scoring of two
degenerate results lowered Multi30k's BLEU), so the search's own stays.
Sentences whose first translation is sound are not decoded again, so their outputs are
exactly the search's.

The fallback blocks repeated n-grams of FALLBACK_NGRAM tokens (the loops a weak model falls
into), doubles the beam (at least FALLBACK_BEAM, at most config.MAX_BEAM: a wider search
finds the likelier end of sentence a narrow one missed) and caps the output at the length
`degenerate.LONGEST` allows. It keeps the length penalty, so that the two results' scores
compare.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from transformer_nmt.config import MAX_BEAM, DecodeConfig
from transformer_nmt.decode.quality.degenerate import LONGEST, degenerate_reasons
from transformer_nmt.decode.search.base import Hypothesis

FALLBACK_NGRAM = 3
"""No n-gram of this many tokens twice in the fallback's output (fairseq's and
CTranslate2's usual setting against loops)."""
FALLBACK_BEAM = 4
"""The fallback's narrowest beam, the paper's: greedy search's fallback searches too."""


@dataclass
class Guarded:
    """One sentence's translations after the guard."""

    hypotheses: list[Hypothesis]
    """Its best hypotheses, best first: the first search's, or the fallback's."""
    degenerate: list[str] | None
    """Why the first search's best was degenerate (transformer_nmt.decode.quality.degenerate
    REASONS; empty: it was sound); None when the guard did not check."""
    fallback: bool = False
    """True when `hypotheses` are the fallback's."""


def checks(cfg: DecodeConfig) -> bool:
    """Whether the guard checks the outputs of a search with settings `cfg`: when cfg
    asks for it, and not for samples (random by design, and no search to widen)."""
    return cfg.guard and not cfg.sampling


def fallback_config(cfg: DecodeConfig) -> DecodeConfig:
    """The settings a degenerate sentence of a search with settings `cfg` is decoded
    again with (see the module docstring); a tighter n-gram block of cfg is kept."""
    ngram = cfg.no_repeat_ngram if 0 < cfg.no_repeat_ngram <= FALLBACK_NGRAM \
        else FALLBACK_NGRAM
    length_a, length_b = LONGEST
    return replace(cfg, no_repeat_ngram=ngram,
                   beam=min(max(2 * cfg.beam, FALLBACK_BEAM), MAX_BEAM),
                   max_len_a=min(cfg.max_len_a, length_a),
                   max_len_b=min(cfg.max_len_b, length_b))


def output_reasons(source: Sequence[int], output: Sequence[int],
                   pieces: Callable[[Sequence[int]], list[str]]) -> list[str]:
    """Why output token ids `output` are a degenerate translation of source token ids
    `source` (transformer_nmt.decode.quality.degenerate); pieces: the subword pieces of token
    ids, ▁ marking word starts (`Vocab.marked_pieces`)."""
    return degenerate_reasons(pieces(source), pieces(output))


def guard(sources: Sequence[Sequence[int]], found: list[list[Hypothesis]],
          pieces: Callable[[Sequence[int]], list[str]],
          decode_again: Callable[[list[int]], list[list[Hypothesis]]]) -> list[Guarded]:
    """The guarded translations of the sentences whose source token ids are `sources`,
    given what the first search `found` for each (its best first).

    pieces: the subword pieces of token ids (`Vocab.marked_pieces`). decode_again: the
    fallback's translations of the sentences at the given positions, in that order
    (called once, for the degenerate ones only)."""
    def reasons(row: int, hypothesis: Hypothesis) -> list[str]:
        return output_reasons(sources[row], hypothesis.tokens, pieces)

    results = [Guarded(hyps, reasons(row, hyps[0]) if hyps else [])
               for row, hyps in enumerate(found)]
    again = [row for row, result in enumerate(results) if result.degenerate]
    if not again:
        return results
    for row, retried in zip(again, decode_again(again)):
        if retried and not reasons(row, retried[0]):
            results[row].hypotheses, results[row].fallback = retried, True
    return results
