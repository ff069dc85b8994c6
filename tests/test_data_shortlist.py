"""Lexical shortlists counted on a corpus (data/shortlist.py): the map's layout, the most
frequent pieces for every sentence, association beyond chance rather than frequency,
every reference piece of the training data covered by its source (by its rarest
associated piece), whatever the blocks the counting is cut into."""

from __future__ import annotations

import numpy as np
import pytest

import transformer_nmt.data.shortlist as shortlist
from data_fixtures import make_split
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.shortlist import build_map
from transformer_nmt.errors import UserError

FREQUENT = 30  # in every target sentence: the most frequent piece


def _corpus(tmp_path, pairs, vocab_size=64):
    make_split(tmp_path, src=[s for s, _ in pairs], tgt=[t for _, t in pairs],
               vocab_size=vocab_size)
    return tmp_path


def _uncovered(lexical_map, data_dir):
    """(pair, piece) of every reference piece its source's candidates lack."""
    data = load_split(data_dir, "train")
    missing = []
    for i in range(len(data)):
        source, target = data.pair(i)
        if len(source):
            lacking = set(target.tolist()) - set(lexical_map.candidates(source).tolist())
            missing += [(i, piece) for piece in sorted(lacking)]
    return missing


def test_the_maps_layout(tmp_path):
    data = _corpus(tmp_path, [([5, 6], [20, FREQUENT]), ([6, 7, 7], [21, 22, FREQUENT]),
                              ([5], [20, FREQUENT])])
    lexical_map, stats = build_map(data, best=2, frequent=1)
    assert lexical_map.vocab_size == 64 and stats.vocab_size == 64 and stats.pairs == 3
    assert lexical_map.offsets.dtype == np.int64 and lexical_map.offsets.shape == (65,)
    assert lexical_map.targets.dtype == np.int32 and lexical_map.always.dtype == np.int32
    assert lexical_map.offsets[0] == 0 and lexical_map.offsets[-1] == len(lexical_map.targets)
    assert lexical_map.always.tolist() == [FREQUENT]
    for source in range(64):
        entries = lexical_map.entries(source).tolist()
        assert entries == sorted(set(entries)) and FREQUENT not in entries
    assert lexical_map.entries(5).tolist() == [20]
    assert lexical_map.entries(0).tolist() == []  # never seen
    assert lexical_map.candidates([5]).tolist() == [20, FREQUENT]


def test_association_beyond_chance_not_frequency(tmp_path):
    # Piece 5 goes with 20; 21 is in most sentences, with 5 no more often than without.
    pairs = [([5, 9], [20, 21]), ([5, 10], [20, 21]), ([5, 11], [20, 22]),
             ([6, 9], [23, 21]), ([7, 10], [24, 21]), ([8, 11], [25, 21])]
    lexical_map, _ = build_map(_corpus(tmp_path, pairs), best=1, frequent=0)
    assert lexical_map.entries(5).tolist() == [20]
    assert lexical_map.always.tolist() == []


@pytest.mark.parametrize("best, frequent", [(0, 0), (1, 0), (2, 3)])
def test_every_reference_piece_of_the_training_data_is_covered(tiny_data, best, frequent):
    lexical_map, stats = build_map(tiny_data, best=best, frequent=frequent)
    assert _uncovered(lexical_map, tiny_data) == []
    assert stats.pairs == 240 and 0 < stats.mean_candidates < stats.vocab_size == 64
    if best == 0 and frequent == 0:  # the coverage pass made every entry
        assert stats.added == len(lexical_map.targets) > 0


def test_the_coverage_pass_gives_a_piece_to_the_rarest_associated_source_piece(tmp_path):
    # 40 goes with 9 most of all (in each of its four sentences; 9 in one more), and with
    # 12, 13, 16 and 17 once each: the entries that cover it go to those, each costing a
    # candidate in one sentence, not to 9, which would offer 40 to every sentence of 9.
    pairs = [([9, 12], [40]), ([9, 13], [40]), ([9, 16], [40]), ([9, 17], [40]),
             ([9], [41]), ([14], [42]), ([15], [42]), ([18], [42]), ([19], [42])]
    data = _corpus(tmp_path, pairs)
    lexical_map, _ = build_map(data, best=0, frequent=0)
    for rare in (12, 13, 16, 17):
        assert lexical_map.entries(rare).tolist() == [40]
    assert lexical_map.entries(9).tolist() == [41]
    assert _uncovered(lexical_map, data) == []


def test_blocks_of_any_size_count_the_same(tiny_data, monkeypatch):
    whole, _ = build_map(tiny_data, best=2, frequent=2)
    monkeypatch.setattr(shortlist, "PAIR_BUDGET", 7)
    monkeypatch.setattr(shortlist, "CELL_BUDGET", 64)  # one source piece per block
    cut, _ = build_map(tiny_data, best=2, frequent=2)
    for name in ("always", "offsets", "targets"):
        assert np.array_equal(getattr(whole, name), getattr(cut, name)), name


def test_pairs_with_an_empty_side_are_counted_without_failing(tmp_path):
    data = _corpus(tmp_path, [([], [20]), ([5], []), ([5, 6], [21])])
    lexical_map, _ = build_map(data, best=1, frequent=0)
    assert lexical_map.entries(5).tolist() == [21] or lexical_map.entries(6).tolist() == [21]
    assert _uncovered(lexical_map, data) == []


def test_bad_settings_are_one_line_errors(tiny_data):
    with pytest.raises(UserError, match="best must be"):
        build_map(tiny_data, best=-1)
    with pytest.raises(UserError, match="frequent must be"):
        build_map(tiny_data, frequent=2.5)
    with pytest.raises(UserError, match="no 'dev' split"):
        build_map(tiny_data, split="dev")
