"""Word alignments from subword attention (decode/alignment.py)."""

import torch

from transformer_nmt.decode.alignment import word_alignment


def test_word_alignment_maps_pieces_to_words():
    src = ["▁the", "▁gar", "den"]
    tgt = ["▁der", "▁Gar", "ten", "."]
    attention = torch.tensor([[0.8, 0.1, 0.1, 0.0],  # der -> the
                              [0.1, 0.2, 0.7, 0.0],  # Gar -> den (word 1)
                              [0.1, 0.6, 0.3, 0.0],  # ten -> gar (word 1)
                              [0.5, 0.2, 0.2, 0.1],  # . (still word 1) -> the
                              [0.0, 0.0, 0.0, 1.0]])  # EOS row, ignored
    assert word_alignment(src, tgt, attention) == [(0, 0), (0, 1), (1, 1)]
