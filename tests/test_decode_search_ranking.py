"""How a search ranks a step's extensions (decode/search/ranking.py): beam search's 2k
likeliest, greedy search's likeliest token per row, and sampling's draws within top-k
and top-p."""

from __future__ import annotations

from dataclasses import replace

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.ranking import Draw, Likeliest, TopK, draw_tokens

SAMPLING = DecodeConfig(sampling=True, nbest=3, max_len_b=6, seed=5)


def test_top_k_ranks_the_2k_likeliest_extensions_of_every_row_of_a_sentence():
    log_probs = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]]))  # 2 rows, vocab 3
    scores = torch.tensor([[-1.0, -2.0]])  # one sentence, width 2
    ranked = TopK().rank(scores, log_probs, 2, 1)
    expected = scores.view(2, 1) + log_probs  # (rows, vocab)
    assert ranked.tokens.tolist() == [[1, 2]] and ranked.beams.tolist() == [[0, 0]]
    torch.testing.assert_close(ranked.scores, expected[0, [1, 2]].unsqueeze(0))
    ranked = TopK().rank(scores, log_probs, 2, 2)
    assert list(zip(ranked.beams[0].tolist(), ranked.tokens[0].tolist())) == [
        (0, 1), (0, 2), (1, 0), (0, 0)]


def test_a_vocabulary_smaller_than_the_beam_pads_with_impossible_extensions():
    ranked = TopK().rank(torch.zeros(1, 1), torch.log(torch.tensor([[0.75, 0.25]])), 1, 2)
    assert ranked.scores.shape == (1, 4) and ranked.scores[0, 2:].isinf().all()
    assert ranked.beams.tolist() == [[0, 0, 0, 0]]  # padding points at the last row


def test_greedy_takes_each_rows_argmax_scored_after_its_prefix():
    log_probs = torch.log_softmax(torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]]), dim=1)
    ranked = Likeliest().rank(torch.tensor([[-1.0], [-0.5]]), log_probs, 1, 1)
    assert ranked.tokens.tolist() == [[1], [0]] and ranked.beams.tolist() == [[0], [0]]
    torch.testing.assert_close(ranked.scores.squeeze(1),
                               torch.tensor([-1.0, -0.5]) + log_probs.max(dim=1).values)


def test_top_k_draws_only_among_the_k_likeliest():
    log_probs = torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]), dim=1).repeat(200, 1)
    uniforms = torch.rand(200, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    drawn = draw_tokens(log_probs, uniforms, replace(SAMPLING, topk=2))
    assert set(drawn.tolist()) == {0, 1}
    drawn = draw_tokens(log_probs, uniforms, SAMPLING)
    assert set(drawn.tolist()) == {0, 1, 2, 3, 4}
    # top-p 0.7: token 0 has 0.64 of the mass, tokens 0 and 1 reach it.
    assert set(draw_tokens(log_probs, uniforms, replace(SAMPLING, topp=0.7)).tolist()) == {0, 1}


def test_a_draw_uses_each_rows_number_of_the_step_and_follows_the_rows_kept():
    log_probs = torch.log(torch.tensor([[0.5, 0.5]])).repeat(3, 1)
    # Rows' numbers per step: row 0 draws token 0 then 1, row 2 token 1 then 0.
    uniforms = torch.tensor([[0.1, 0.9], [0.9, 0.9], [0.9, 0.1]])
    draw = Draw(uniforms, SAMPLING)
    ranked = draw.rank(torch.zeros(3, 1), log_probs, 1, 1)
    assert ranked.tokens.tolist() == [[0], [1], [1]]
    torch.testing.assert_close(ranked.scores, torch.full((3, 1), float(torch.log(
        torch.tensor(0.5)))))  # the model's log P, untempered
    draw.keep(torch.tensor([0, 2]), torch.zeros(2, 1, dtype=torch.long))
    assert draw.rank(torch.zeros(2, 1), log_probs[:2], 1, 1).tokens.tolist() == [[1], [0]]
