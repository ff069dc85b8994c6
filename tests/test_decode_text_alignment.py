"""Word alignments from subword attention (decode/text/alignment.py)."""

import torch

from transformer_nmt.decode.text.alignment import word_alignment


def test_word_alignment_maps_pieces_to_words():
    src = ["▁the", "▁gar", "den"]
    tgt = ["▁der", "▁Gar", "ten", "."]
    attention = torch.tensor([[0.8, 0.1, 0.1, 0.0],  # der -> the
                              [0.1, 0.2, 0.7, 0.0],  # Gar -> den (word 1)
                              [0.1, 0.6, 0.3, 0.0],  # ten -> gar (word 1)
                              [0.5, 0.2, 0.2, 0.1],  # . (still word 1) -> the
                              [0.0, 0.0, 0.0, 1.0]])  # EOS row, ignored
    assert word_alignment(src, tgt, attention) == [(0, 0), (0, 1), (1, 1)]


def test_a_target_language_token_is_no_word_so_the_lines_own_words_count_from_0():
    src = [">>fra<<", "▁the", "▁house"]
    tgt = ["▁la", "▁maison"]
    attention = torch.tensor([[0.6, 0.3, 0.1, 0.0],  # la -> the token: no pair
                              [0.1, 0.1, 0.8, 0.0],  # maison -> house (word 1)
                              [0.0, 0.0, 0.0, 1.0]])
    assert word_alignment(src, tgt, attention) == [(1, 1)]


def test_a_lone_word_mark_that_only_spells_a_space_is_no_word():
    # "a  b" as a model may emit it: the lone ▁ is the extra space, as in the text's
    # words ["a", "b"]; a lone ▁ before «, a piece without the mark, is that word's
    src = ["▁a", "▁", "«", "b", "»"]
    tgt = ["▁x", "▁", "▁y", "▁"]
    attention = torch.tensor([[0.1, 0.6, 0.1, 0.1, 0.1, 0.0],  # x -> ▁ of «b» (word 1)
                              [0.9, 0.0, 0.0, 0.1, 0.0, 0.0],  # lone ▁: no pair
                              [0.7, 0.1, 0.1, 0.1, 0.0, 0.0],  # y (word 1) -> a
                              [0.0, 0.0, 0.0, 0.9, 0.1, 0.0],  # trailing ▁: no pair
                              [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    assert word_alignment(src, tgt, attention) == [(0, 1), (1, 0)]
