"""Word alignments from the encoder-decoder attention of subword tokens."""

from __future__ import annotations

import torch


def word_alignment(src_pieces: list[str], tgt_pieces: list[str],
                   attention: torch.Tensor) -> list[tuple[int, int]]:
    """Subword attention (tgt + EOS, src + EOS) to sorted (source word, target word) pairs.

    Each target piece aligns to the source piece with the highest attention (EOS
    excluded on both sides); a piece starting with '▁' begins a new word.
    """
    if not src_pieces or not tgt_pieces:
        return []
    src_word, tgt_word = _word_index(src_pieces), _word_index(tgt_pieces)
    best = attention[: len(tgt_pieces), : len(src_pieces)].argmax(dim=1).tolist()
    return sorted({(src_word[s], tgt_word[t]) for t, s in enumerate(best)})


def _word_index(pieces: list[str]) -> list[int]:
    """The 0-based word each sentencepiece piece belongs to."""
    index, word = [], -1
    for position, piece in enumerate(pieces):
        if piece.startswith("▁") or position == 0:
            word += 1
        index.append(word)
    return index
