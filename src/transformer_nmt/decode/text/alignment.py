"""Word alignments from the encoder-decoder attention of subword tokens."""

from __future__ import annotations

import torch

from transformer_nmt.data.words import word_index


def word_alignment(src_pieces: list[str], tgt_pieces: list[str],
                   attention: torch.Tensor) -> list[tuple[int, int]]:
    """Subword attention (tgt + EOS, src + EOS) to sorted (source word, target word) pairs.

    Each target piece aligns to the source piece with the highest attention (EOS
    excluded on both sides), in words as transformer_nmt.data.words counts them; a piece
    of no word (a target-language token, a lone ▁ that only spells a space) on either
    side gives no pair.
    """
    if not src_pieces or not tgt_pieces:
        return []
    src_word, tgt_word = word_index(src_pieces), word_index(tgt_pieces)
    best = attention[: len(tgt_pieces), : len(src_pieces)].argmax(dim=1).tolist()
    return sorted({(src_word[s], tgt_word[t]) for t, s in enumerate(best)
                   if src_word[s] is not None and tgt_word[t] is not None})
