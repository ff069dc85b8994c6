"""A stored vocabulary read back whichever its kind (data/stored_vocab.py): a
sentencepiece model as a Vocab, Moses and BPE as a BpeVocab, each with its target side's
where it has its own, and what is neither refused in one line naming where it came from."""

from __future__ import annotations

import pytest

from transformer_nmt.data.bpe_vocab import BpeVocab
from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.data.stored_vocab import read_vocab
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError

PIECES = ["<pad>", "<unk>", "<s>", "</s>", "the", "house"]


def test_a_sentencepiece_model_is_read_as_a_vocab(tiny_data):
    stored = (tiny_data / SPM_MODEL).read_bytes()
    vocab = read_vocab(stored)
    assert type(vocab) is Vocab and len(vocab) == 64
    assert vocab.encode("the house") == Vocab.from_bytes(stored).encode("the house")


def test_moses_and_bpe_is_read_as_a_bpe_vocab_with_its_target_side():
    source = BpeVocab(PIECES, [True] * len(PIECES), "#version: 0.2\nt h\n", "en")
    target = BpeVocab(PIECES, [True] * len(PIECES), "#version: 0.2\nt h\n", "de")
    vocab = read_vocab(source.to_bytes(), "m.pt", target.to_bytes())
    assert type(vocab) is BpeVocab and vocab.pieces_list == PIECES
    assert (vocab.language, vocab.target.language) == ("en", "de")


def test_bytes_of_neither_kind_are_refused_naming_where_they_came_from():
    with pytest.raises(UserError, match="m.pt"):
        read_vocab(b"not a vocabulary", "m.pt")
