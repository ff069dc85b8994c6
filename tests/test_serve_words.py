"""Attention between words, and a sentence map given its words (serve/words.py); the
words themselves are tests/test_data_words.py's."""

from __future__ import annotations

import torch

from transformer_nmt.data.words import word_groups
from transformer_nmt.decode.text.alignment import word_alignment
from transformer_nmt.serve.words import word_attention, with_words


def test_attention_between_words_sums_a_source_word_and_averages_a_target_word():
    # (target pieces 3, source pieces 3): target words [0, 1] and [2]; source [0] and [1, 2]
    weights = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [1.0, 0.0, 0.0]])
    source = [{"text": "a", "pieces": [0]}, {"text": "bc", "pieces": [1, 2]}]
    target = [{"text": "xy", "pieces": [0, 1]}, {"text": "z", "pieces": [2]}]
    words = word_attention(weights, source, target)
    assert torch.allclose(words, torch.tensor([[0.3, 0.7], [1.0, 0.0]]))
    # Per layer and head as well: (layers, heads, target, source).
    stacked = word_attention(weights.expand(2, 4, 3, 3), source, target)
    assert stacked.shape == (2, 4, 2, 2) and torch.allclose(stacked[1, 3], words)


def test_a_sentence_map_gets_its_words_and_rounded_word_attention_per_layer_and_head():
    tokens = ["▁a", "b", "</s>"]
    cross = [torch.full((2, 3, 3), 1 / 3)]  # one layer of two heads
    attention = {"source_tokens": tokens, "target_tokens": tokens, "layers": "kept"}
    found = with_words(attention, cross, decimals=3)
    assert found["layers"] == "kept"
    assert found["source_words"] == found["target_words"] == [{"text": "ab", "pieces": [0, 1]}]
    assert found["word_layers"] == [[[[0.667]], [[0.667]]]]


def test_alignment_indices_name_the_word_groups_the_answer_sends():
    # One rule for both: a lone ▁ that spells only a space and the language token are
    # no word in the alignment and in the groups alike.
    source, target = [">>fra<<", "▁the", "▁", "▁house"], ["▁la", "▁", "▁maison", "▁"]
    # (target pieces + EOS, source pieces + EOS): la -> the, ▁ -> >>fra<<, maison -> house
    attention = torch.eye(5)[[1, 0, 3, 2, 4]]
    pairs = word_alignment(source, target, attention)
    source_words, target_words = word_groups(source), word_groups(target)
    named = [(source_words[s]["text"], target_words[t]["text"]) for s, t in pairs]
    assert named == [("the", "la"), ("house", "maison")]
