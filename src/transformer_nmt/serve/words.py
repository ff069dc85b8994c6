"""A translation's encoder-decoder attention summed into words, with the words of its
subword pieces (transformer_nmt.data.words, the rule its alignments follow too), as the
web page shows them: the server knows the pieces, so clients need not re-derive the
words."""

from __future__ import annotations

from typing import Any

import torch

from transformer_nmt.data.words import word_groups


def word_attention(weights: torch.Tensor, source_words: list[dict[str, Any]],
                   target_words: list[dict[str, Any]]) -> torch.Tensor:
    """Attention between words from attention between pieces: (..., target pieces,
    source pieces) -> (..., target words, source words). A source word's columns are
    summed (the attention mass on the word) and a target word's rows averaged (each row
    sums to one, so a word's row does too)."""
    *_, target_pieces, source_pieces = weights.shape
    # (source pieces, source words): 1 where the piece belongs to the word
    to_source_words = torch.zeros(source_pieces, len(source_words), dtype=weights.dtype)
    for column, word in enumerate(source_words):
        to_source_words[word["pieces"], column] = 1
    # (target words, target pieces): 1 / pieces of the word where the piece belongs to it
    to_target_words = torch.zeros(len(target_words), target_pieces, dtype=weights.dtype)
    for row, word in enumerate(target_words):
        to_target_words[row, word["pieces"]] = 1 / len(word["pieces"])
    return to_target_words @ weights @ to_source_words


def with_words(attention: dict[str, Any], cross: list[torch.Tensor],
               decimals: int) -> dict[str, Any]:
    """`attention` (a sentence's attention map as the API sends it: source_tokens,
    target_tokens, layers) with its word groups and its attention between words per
    layer and head ('word_layers', rounded to `decimals`), from `cross`: per layer
    (heads, target pieces, source pieces)."""
    source_words = word_groups(attention["source_tokens"])
    target_words = word_groups(attention["target_tokens"])
    # per layer (heads, target words, source words); float64 so that the rounded values
    # print as short decimals
    word_layers = [word_attention(layer.double(), source_words, target_words)
                   .round(decimals=decimals).tolist() for layer in cross]
    return {**attention, "source_words": source_words, "target_words": target_words,
            "word_layers": word_layers}
