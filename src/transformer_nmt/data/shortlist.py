"""Lexical shortlists counted on a corpus: for each source piece, the target pieces that
the translations of its sentences use, so that decoding may restrict its output layer to
the pieces a sentence's source suggests.

A `LexicalMap` holds, per source piece, its `best` target pieces by association (the
co-occurrences beyond chance, below), and `frequent` target pieces that every sentence
may use; then a coverage pass adds, for every reference piece of the training split that
no piece of its source (nor the frequent list) offers, that piece to the entries of the
rarest source piece of the sentence associated with it. On the training split, every
reference piece is thus among its sentence's candidates; and as an entry costs a candidate
in every sentence of its source piece, the rarest keeps the candidates few, where the most
associated piece, often a frequent word, gave its entries to most sentences.

Counts are per sentence pair (a piece twice in a sentence counts once), over the split's
memory-mapped ids, in blocks of source pieces so that memory stays bounded whatever the
vocabulary: the pairs (source piece, target occurrence) of a block are gathered with
numpy and counted into a dense block of the co-occurrence matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from transformer_nmt.data.binarize import load_split, read_ids
from transformer_nmt.data.manifest import bin_path, idx_path, read_manifest
from transformer_nmt.errors import UserError

DEFAULT_BEST = 20
"""Target pieces kept per source piece by association: a piece's usual translations. Few,
because a batch's output layer is the union of its sentences' candidates, and a union of
many sentences with long lists covers most of the vocabulary; the coverage pass adds what
the training data needs beyond them. Chosen with DEFAULT_FREQUENT by measurement on two
8000-piece corpora (bench/shortlist.py; bench/RESULTS.md)."""
DEFAULT_FREQUENT = 50
"""The most frequent target pieces, every sentence's candidates: punctuation, articles
and the other function pieces that go with no source piece in particular."""
PAIR_BUDGET = 1 << 22
"""Most (source piece, target occurrence) pairs gathered at once (a block of source
pieces; one piece alone may exceed it): about 32 MB per array of them."""
CELL_BUDGET = 1 << 22
"""Most cells of a dense block of the co-occurrence matrix."""
RARITY_LIMIT = (1 << 29) - 1
"""Sentence counts above this rank as this one when the coverage pass picks a piece."""


@dataclass(frozen=True)
class LexicalMap:
    """Which target pieces a sentence may use, per the pieces of its source."""

    always: np.ndarray
    """(F,) int32, sorted: the target pieces every sentence may use."""
    offsets: np.ndarray
    """(vocab + 1,) int64: source piece s's entries are targets[offsets[s]:offsets[s + 1]]."""
    targets: np.ndarray
    """(entries,) int32: each source piece's target pieces, sorted."""

    @property
    def vocab_size(self) -> int:
        return len(self.offsets) - 1

    def entries(self, source: int) -> np.ndarray:
        """The target pieces source piece `source` offers, sorted."""
        return self.targets[self.offsets[source]:self.offsets[source + 1]]

    def candidates(self, source: list[int] | np.ndarray) -> np.ndarray:
        """The sorted target pieces a sentence of `source` ids may use."""
        offered = np.zeros(self.vocab_size, bool)
        offered[self.always] = True
        for piece in source:
            offered[self.entries(int(piece))] = True
        return np.flatnonzero(offered)


@dataclass(frozen=True)
class MapStats:
    """What building a map found, for the user."""

    pairs: int
    """Sentence pairs of the split counted."""
    added: int
    """Entries the coverage pass added."""
    mean_candidates: float
    """The mean number of candidates of the split's sentences (a sample of them)."""
    vocab_size: int
    """Pieces of the vocabulary, which decoding without the map scores."""


def _unique_per_sentence(ids: np.ndarray, offsets: np.ndarray, vocab: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(sentence, piece) of each distinct piece of each sentence, sorted by sentence then
    piece, both int64; in chunks of sentences, so that no key array outgrows PAIR_BUDGET."""
    sentences = len(offsets) - 1
    inside = np.searchsorted(offsets, np.arange(PAIR_BUDGET, offsets[-1], PAIR_BUDGET),
                             side="right") - 1
    cuts = np.unique(np.concatenate([[0], inside, [sentences]]).astype(np.int64))
    found = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a == b:
            continue
        lengths = np.diff(offsets[a:b + 1])
        keys = (np.repeat(np.arange(a, b, dtype=np.int64), lengths) * vocab
                + ids[offsets[a]:offsets[b]].astype(np.int64))
        found.append(np.unique(keys))
    keys = np.concatenate(found) if found else np.zeros(0, np.int64)
    return keys // vocab, keys % vocab


def _association(counts: np.ndarray, source: np.ndarray, target: np.ndarray, pairs: int
                 ) -> np.ndarray:
    """Dunning's log-likelihood ratio G² of each cell's co-occurrence, for the cells
    whose pieces co-occur more often than chance would have them, else 0.

    counts (rows, vocab): sentences with both pieces; source (rows, 1) and target
    (1, vocab): sentences with each. G² rather than the conditional probability, which
    ranks the pieces frequent everywhere first, or pointwise mutual information, which
    ranks pieces seen once together first: it weighs how far from chance a co-occurrence
    is by how much evidence there is for it."""
    scores = np.zeros(counts.shape, np.float64)
    rows, cols = np.nonzero(counts)
    both = counts[rows, cols].astype(np.float64)
    only_source = source[rows, 0] - both
    only_target = target[0, cols] - both
    neither = pairs - both - only_source - only_target
    # The 2x2 table of sentence pairs (with both pieces, the source piece only, the target
    # piece only, neither) against what independence expects: G² = 2 Σ O ln(O / E).
    observed = (both, only_source, only_target, neither)
    row_sums = (both + only_source, both + only_source, pairs - both - only_source,
                pairs - both - only_source)
    col_sums = (both + only_target, pairs - both - only_target, both + only_target,
                pairs - both - only_target)
    g2 = np.zeros(len(both))
    for o, r, c in zip(observed, row_sums, col_sums):
        expected = r * c / pairs
        g2 += np.where(o > 0, o * np.log(np.maximum(o, 1) / np.maximum(expected, 1e-300)), 0)
    positive = both * pairs > (both + only_source) * (both + only_target)
    scores[rows, cols] = np.where(positive, 2 * g2, 0)
    return scores


def _split_ids(data_dir: str | Path, split: str
               ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """((source ids, offsets), (target ids, offsets), vocabulary size) of a split of a
    prepared data directory, memory-mapped; its ids checked against the vocabulary."""
    load_split(data_dir, split)
    manifest = read_manifest(data_dir)
    dtype = np.dtype(manifest["dtype"])
    sides = tuple(read_ids(bin_path(data_dir, split, manifest[lang]),
                           idx_path(data_dir, split, manifest[lang]), dtype)
                  for lang in ("src_lang", "tgt_lang"))
    return sides[0], sides[1], int(manifest["vocab"]["size"])


def _most_frequent(ids: np.ndarray, vocab: int, count: int) -> np.ndarray:
    """(count,) int32, sorted: the `count` pieces most frequent in `ids` (those seen)."""
    frequency = np.zeros(vocab, np.int64)
    for start in range(0, len(ids), PAIR_BUDGET):
        frequency += np.bincount(ids[start:start + PAIR_BUDGET], minlength=vocab)
    order = np.argsort(-frequency, kind="stable")[:count]
    return np.sort(order[frequency[order] > 0]).astype(np.int32)


@dataclass(frozen=True)
class _Sentences:
    """The distinct pieces of each sentence of a split, indexed both ways."""

    pairs: int
    source_count: np.ndarray
    """(vocab,) sentences each source piece is in."""
    source_starts: np.ndarray
    """(vocab + 1,) where each source piece's sentences start in `source_sentences`."""
    source_sentences: np.ndarray
    """The sentences of source piece 0, then of piece 1, ..."""
    target_count: np.ndarray
    """(vocab,) sentences each target piece is in."""
    target_starts: np.ndarray
    """(pairs + 1,) where each sentence's pieces start in `target_pieces`."""
    target_pieces: np.ndarray
    """The distinct target pieces of sentence 0, then of sentence 1, ...: one entry per
    target occurrence, which the coverage pass marks covered."""
    source_pieces: tuple[np.ndarray, np.ndarray]
    """(sentence, piece) of each distinct source piece of each sentence."""


def _sentences(source: tuple[np.ndarray, np.ndarray], target: tuple[np.ndarray, np.ndarray],
               vocab: int) -> _Sentences:
    pairs = len(source[1]) - 1
    source_sentence, source_piece = _unique_per_sentence(*source, vocab)
    target_sentence, target_piece = _unique_per_sentence(*target, vocab)
    source_count = np.bincount(source_piece, minlength=vocab)
    order = np.argsort(source_piece, kind="stable")
    zero = np.zeros(1, np.int64)
    return _Sentences(
        pairs, source_count, np.concatenate([zero, np.cumsum(source_count)]),
        source_sentence[order], np.bincount(target_piece, minlength=vocab),
        np.concatenate([zero, np.cumsum(np.bincount(target_sentence, minlength=pairs))]),
        target_piece, (source_sentence, source_piece))


def _blocks(sentences: _Sentences, vocab: int):
    """[a, b) ranges of source pieces whose pairs (source piece, target occurrence) stay
    within PAIR_BUDGET (or are one piece's) and whose block of counts within CELL_BUDGET."""
    lengths = np.diff(sentences.target_starts)
    source_sentence, source_piece = sentences.source_pieces
    work = np.bincount(source_piece, weights=lengths[source_sentence], minlength=vocab)
    cumulative = np.concatenate([[0.0], np.cumsum(work)])
    rows_most = max(CELL_BUDGET // vocab, 1)
    a = 0
    while a < vocab:
        b = int(np.searchsorted(cumulative, cumulative[a] + PAIR_BUDGET, side="right")) - 1
        b = min(max(b, a + 1), a + rows_most, vocab)
        yield a, b
        a = b


def _block_pairs(sentences: _Sentences, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, occurrence) of each pair of source piece a + row and the occurrence (index
    into `target_pieces`) of a target piece in one of its sentences."""
    starts = sentences.source_starts
    within = sentences.source_sentences[starts[a]:starts[b]]
    rows = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(starts[a:b + 1]))
    lengths = np.diff(sentences.target_starts)[within]
    firsts = sentences.target_starts[within]
    # Each sentence's occurrences: its first one, then one after another.
    occurrences = (np.repeat(firsts - (np.cumsum(lengths) - lengths), lengths)
                   + np.arange(int(lengths.sum()), dtype=np.int64))
    return np.repeat(rows, lengths), occurrences


def _chosen(scores: np.ndarray, best: int) -> np.ndarray:
    """(rows, vocab) bool: each row's `best` highest positive scores."""
    if best == 0:
        return np.zeros(scores.shape, bool)
    if best >= scores.shape[1]:
        return scores > 0
    chosen = np.zeros(scores.shape, bool)
    top = np.argpartition(-scores, best - 1, axis=1)[:, :best]
    np.put_along_axis(chosen, top, True, axis=1)
    return chosen & (scores > 0)


def _count_block(sentences: _Sentences, a: int, b: int, in_always: np.ndarray, best: int,
                 covered: np.ndarray, carrier: np.ndarray) -> np.ndarray:
    """The entries (source * vocab + target) of source pieces a..b-1, leaving out the
    pieces `in_always` (vocab,) marks; marks the target occurrences they cover in
    `covered` and keeps in `carrier`, per occurrence, the source piece of its sentence
    so far to add it to if nothing covers it: associated with it, and of those the one
    in the fewest sentences (those two above, the piece in the low 32 bits)."""
    vocab = len(in_always)
    rows, occurrences = _block_pairs(sentences, a, b)
    pieces = sentences.target_pieces[occurrences]
    counts = np.bincount(rows * vocab + pieces, minlength=(b - a) * vocab)
    scores = _association(counts.reshape(b - a, vocab),
                          sentences.source_count[a:b, None].astype(np.float64),
                          sentences.target_count[None, :].astype(np.float64), sentences.pairs)
    # The frequent pieces are every sentence's candidates already: entries are the others.
    scores[:, in_always] = 0
    chosen = _chosen(scores, best)
    covered[occurrences[chosen[rows, pieces]]] = True
    # Of a sentence's source pieces, the one to carry a target piece that nothing offers
    # is the rarest associated with it: an entry costs a candidate in every sentence of
    # its source piece, and the most associated piece is most often a frequent one.
    associated = (scores[rows, pieces] > 0).astype(np.int64)
    rarity = RARITY_LIMIT - np.minimum(sentences.source_count[a + rows], RARITY_LIMIT)
    np.maximum.at(carrier, occurrences, (associated << 61) | (rarity << 32) | (a + rows))
    block_rows, block_cols = np.nonzero(chosen)
    return (a + block_rows) * vocab + block_cols


def _mean_candidates(lexical_map: LexicalMap, source: tuple[np.ndarray, np.ndarray],
                     sample: int = 1000) -> float:
    """The mean number of candidates of up to `sample` sentences spread over the split."""
    ids, offsets = source
    pairs = len(offsets) - 1
    if pairs == 0:
        return 0.0
    chosen = np.unique(np.linspace(0, pairs - 1, min(sample, pairs)).astype(np.int64))
    return float(np.mean([len(lexical_map.candidates(ids[offsets[i]:offsets[i + 1]]))
                          for i in chosen]))


def build_map(data_dir: str | Path, split: str = "train", best: int = DEFAULT_BEST,
              frequent: int = DEFAULT_FREQUENT, progress: bool = False
              ) -> tuple[LexicalMap, MapStats]:
    """The LexicalMap of `split` of the prepared data directory `data_dir` (see the
    module's docstring): per source piece its `best` most associated target pieces, the
    `frequent` most frequent target pieces for every sentence, and the entries that make
    every reference piece of the split a candidate of its sentence (except in pairs whose
    source is empty, which offer no piece to add it to); `progress`: a bar over the
    source pieces counted."""
    for name, value in (("best", best), ("frequent", frequent)):
        if type(value) is not int or value < 0:
            raise UserError(f"{name} must be a whole number of pieces, 0 or more, not {value!r}")
    source, target, vocab = _split_ids(data_dir, split)
    sentences = _sentences(source, target, vocab)
    always = _most_frequent(target[0], vocab, frequent)
    in_always = np.zeros(vocab, bool)
    in_always[always] = True
    covered = in_always[sentences.target_pieces]
    carrier = np.full(len(covered), -1, np.int64)
    keys = []
    with tqdm(total=vocab, desc=f"count {split}", unit=" pieces",
              disable=None if progress else True) as bar:
        for a, b in _blocks(sentences, vocab):
            keys.append(_count_block(sentences, a, b, in_always, best, covered, carrier))
            bar.update(b - a)
    missing = np.nonzero(~covered & (carrier >= 0))[0]
    added = np.unique((carrier[missing] & 0xFFFFFFFF) * vocab
                      + sentences.target_pieces[missing])
    keys = np.unique(np.concatenate(keys + [added]))
    offsets = np.concatenate([np.zeros(1, np.int64),
                              np.cumsum(np.bincount(keys // vocab, minlength=vocab))])
    lexical_map = LexicalMap(always, offsets, (keys % vocab).astype(np.int32))
    return lexical_map, MapStats(sentences.pairs, len(added),
                                 _mean_candidates(lexical_map, source), vocab)
