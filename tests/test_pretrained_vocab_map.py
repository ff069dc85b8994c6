"""An imported model's ids as ours (pretrained/vocab_map.py), on id maps written by hand:
our specials first and the rest in the model's order, a start token that is another
special renamed, separate vocabularies joined into one id space, and each side's table
rows and logits bias moved accordingly. (With real sentencepiece models:
tests/test_pretrained_huggingface.py, tests/test_pretrained_separate_vocabs.py.)"""

from __future__ import annotations

import pytest
import torch

from transformer_nmt.errors import UserError
from transformer_nmt.pretrained.vocab_map import ABSENT, COPY_BIAS, IdOrder, Side, joint_ids

MARIAN = Side(b"", ["</s>", "<unk>", "▁a", "▁b", "<pad>"],
              {"pad": 4, "unk": 1, "eos": 0, "start": 4})
"""OPUS-MT's layout: </s> at 0, <unk> at 1, <pad> last and the decoder's start."""


def test_our_specials_come_first_and_a_start_token_that_is_pad_gets_a_name():
    pieces, source_ids, target_ids = joint_ids(MARIAN, MARIAN, "vocab.json")
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>", "▁a", "▁b"]
    assert source_ids == target_ids == [4, 1, 4, 0, 2, 3]


def test_separate_vocabularies_become_one_id_space_target_first():
    target = Side(b"", ["<s>", "<pad>", "</s>", "<unk>", "▁das", "▁Haus"],
                  {"pad": 1, "unk": 3, "eos": 2, "start": 0})
    source = Side(b"", ["<s>", "<pad>", "</s>", "<unk>", "▁the", "▁das"],
                  {"pad": 1, "unk": 3, "eos": 2, "start": 0})
    pieces, source_ids, target_ids = joint_ids(source, target, "dicts")
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>", "▁das", "▁Haus", "▁the"]
    assert source_ids == [1, 3, ABSENT, 2, 5, ABSENT, 4]
    assert target_ids == [1, 3, 0, 2, 4, 5, ABSENT]


def test_specials_sharing_an_id_are_refused_naming_where():
    shared = Side(b"", ["<pad>", "</s>"], {"pad": 0, "unk": 0, "eos": 1, "start": 0})
    with pytest.raises(UserError, match="vocab.json: pad, unk and eos must be three "
                                        "different ids, not 0, 0 and 1"):
        joint_ids(shared, shared, "vocab.json")


def test_table_rows_and_the_logits_bias_follow_our_order():
    _, _, target_ids = joint_ids(MARIAN, MARIAN, "vocab.json")
    order = IdOrder(target_ids + [ABSENT])  # and a piece only the source side has
    table = torch.arange(5.0).unsqueeze(1).repeat(1, 2)  # (their vocab, 2): row i is i
    assert order.rows(table)[:, 0].tolist() == [4, 1, 4, 0, 2, 3, 0]
    bias = order.logits_bias(torch.tensor([0.5, 1.5, 2.5, 3.5, 4.5]))
    # bos copies the decoder's start (<pad>): it and the absent piece get no probability.
    assert bias.tolist() == [4.5, 1.5, COPY_BIAS, 0.5, 2.5, 3.5, COPY_BIAS]
