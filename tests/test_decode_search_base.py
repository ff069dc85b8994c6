"""What every search shares (transformer_nmt.decode.search.base): the length rules."""

from __future__ import annotations

import pytest
import torch

from search_fixtures import EOS, PAD
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.base import length_penalty, max_lengths, source_lengths


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2 ** 0.6)
    assert length_penalty(20, 0.0) == 1.0
    lengths = torch.tensor([1.0, 7.0, 25.0])
    torch.testing.assert_close(length_penalty(lengths, 1.0), (5 + lengths) / 6)


def test_source_lengths_count_neither_eos_nor_padding():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD], [EOS, PAD, PAD, PAD]])
    assert source_lengths(src, PAD).tolist() == [3, 1, 0]


def test_max_lengths_count_source_without_eos_and_padding():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD]])
    cfg = DecodeConfig(max_len_a=1.5, max_len_b=2)
    assert max_lengths(src, cfg, PAD).tolist() == [6, 3]  # floor(1.5 * 3 + 2), 1.5 + 2
    assert max_lengths(src, cfg, PAD, limit=4).tolist() == [4, 3]
    # The rule's floor: 0.7 * 3 + 0 = 2.1 gives 2 tokens, 0.7 * 1 gives none.
    assert max_lengths(src, DecodeConfig(max_len_a=0.7, max_len_b=0), PAD).tolist() == [2, 0]
