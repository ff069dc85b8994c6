"""Teacher forcing (decode/search/teacher_forced.py): given outputs scored in one decoder
pass as the searches score them, token by token with EOS last, and the attention and token
scores a search's chosen hypotheses get afterwards."""

from __future__ import annotations

import pytest
import torch

from search_fixtures import (BOS, EOS, PAD, SPECIAL, random_sources, sequence_log_prob,
                             tiny_transformer, unpadded)
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.search.teacher_forced import (attach_details, teacher_forced,
                                                          teacher_forced_pass)


def test_each_sequence_is_scored_against_its_own_source_row_with_eos_last():
    model, src = tiny_transformer(), random_sources(2, 40, seed=3)
    sequences = [[7, 8, 9], [], [5, 6]]
    owners = torch.tensor([1, 0, 1])  # two outputs of source row 1, one of row 0
    scores, attention = teacher_forced(model, src, owners, sequences, SPECIAL)
    assert [len(row) for row in scores] == [4, 1, 3] and attention == []
    for tokens, owner, row in zip(sequences, owners.tolist(), scores):
        alone = sequence_log_prob(model, unpadded(src, owner)[0], tokens)
        assert sum(row) == pytest.approx(alone, abs=1e-4)


def test_the_pass_hides_pad_and_bos_and_pads_past_each_sequence():
    model, src = tiny_transformer(), random_sources(1, 40, seed=3)
    log_probs, picked, _ = teacher_forced_pass(model, src, torch.tensor([0, 0]),
                                               [[7, 8, 9], [5]], SPECIAL)
    assert log_probs.shape[:2] == (2, 4)
    assert log_probs[..., PAD].isinf().all() and log_probs[..., BOS].isinf().all()
    assert picked[1, 1] == log_probs[1, 1, EOS]  # EOS right after the one token
    assert picked[1, 2:].isinf().all()  # padding: PAD's -inf


def test_attention_of_each_hypothesis():
    model, src = tiny_transformer(), random_sources(3, 40, seed=7)
    results = search(model, src, DecodeConfig(beam=2, nbest=2, max_len_b=3), SPECIAL)
    attach_details(model, src, results, SPECIAL)
    for row, hyps in enumerate(results):
        src_len = int(src[row].ne(PAD).sum())
        for hyp in hyps:
            assert hyp.attention.shape == (len(hyp.tokens) + 1, src_len)
            torch.testing.assert_close(hyp.attention.sum(-1), torch.ones(len(hyp.tokens) + 1))


@pytest.mark.parametrize("beam", [1, 3])
def test_token_scores_are_each_tokens_log_probability(beam):
    model = tiny_transformer()
    src = random_sources(4, 12, seed=5)
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_b=5)
    found = search(model, src, cfg, SPECIAL)
    attach_details(model, src, found, SPECIAL, attention=False, token_scores=True)
    for row, hyps in enumerate(found):
        for hyp in hyps:
            assert len(hyp.token_scores) == len(hyp.tokens) + 1
            assert sum(hyp.token_scores) == pytest.approx(hyp.log_prob, abs=1e-4)
            # The last token's score: log P(Y) minus log P of the sequence without it.
            if hyp.tokens:
                shorter = hyp.tokens[:-1]
                with torch.inference_mode():
                    tgt = torch.tensor([[BOS] + shorter])
                    logits = model.decode(tgt, model.encode(unpadded(src, row))).logits
                last = torch.log_softmax(logits.float(), -1)[0, -1, hyp.tokens[-1]]
                assert hyp.token_scores[-2] == pytest.approx(float(last), abs=1e-4)
    plain = search(model, src, cfg, SPECIAL)
    assert all(hyp.token_scores is None for hyps in plain for hyp in hyps)
