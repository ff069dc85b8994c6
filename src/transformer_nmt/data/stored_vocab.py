"""A stored vocabulary read back whichever its kind: a sentencepiece model (this project's
own, and imported OPUS-MT and fairseq sentencepiece models) or Moses tokenization with BPE
(fairseq's WMT models, data/bpe_vocab.py), told apart by their bytes."""

from __future__ import annotations

from transformer_nmt.data.bpe_vocab import BpeVocab, is_bpe_vocab
from transformer_nmt.data.vocab import Vocab


def read_vocab(model: bytes, source: str = "embedded vocabulary",
               target: bytes | None = None) -> Vocab | BpeVocab:
    """The vocabulary of stored bytes (and of its target side's, where it has its own); a
    one-line UserError naming `source` unless it is complete."""
    if is_bpe_vocab(model):
        return BpeVocab.from_bytes(model, source, target)
    return Vocab.from_bytes(model, source, target)
