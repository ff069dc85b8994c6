"""One step of every search (decode/search/step.py): a sentence at its limit ends with
its EOS rows while the others go on, complete hypotheses sort first, and the bound that
stops a sentence early, on numbers computed by hand and against every completion of an
open prefix of a toy model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from search_fixtures import (BOS, EOS, LIMIT, VOCAB, WORDS, ToyModel, every_output,
                             random_sources, unpadded)
from transformer_nmt.decode.search.base import Hypothesis, length_penalty
from transformer_nmt.decode.search.ranking import TopK
from transformer_nmt.decode.search.step import (Finished, SearchStep, best_first,
                                              best_possible_scores)


def test_the_bound_is_the_best_open_score_over_the_largest_length_penalty():
    open_log_probs = torch.tensor([[-1.0, -2.0], [-3.0, -0.5]])
    limits = torch.tensor([5, 2])
    assert best_possible_scores(open_log_probs, 2, limits, 0.0).tolist() == [-1.0, -0.5]
    # alpha 1: lp grows with length, largest at limit + 1 tokens (EOS counted).
    bound = best_possible_scores(open_log_probs, 2, limits, 1.0)
    torch.testing.assert_close(bound, torch.tensor([-1.0 / (11 / 6), -0.5 / (8 / 6)]))
    # alpha -1: lp shrinks with length, largest at the shortest completion, length + 1.
    bound = best_possible_scores(open_log_probs, 2, limits, -1.0)
    torch.testing.assert_close(bound, torch.tensor([-1.0 * (8 / 6), -0.5 * (8 / 6)]))


def prefix_log_prob(model: ToyModel, src: torch.Tensor, prefix: list[int]) -> float:
    """log P(prefix | src) of an open prefix (no EOS), by one teacher-forced decode."""
    tgt = torch.tensor([[BOS] + prefix])
    log_probs = torch.log_softmax(model.decode(tgt[:, :-1], model.encode(src[None])).logits, -1)
    return float(log_probs[0].gather(1, tgt[0, 1:, None]).sum())


@pytest.mark.parametrize("alpha", [0.6, -0.5])
def test_no_completion_of_an_open_prefix_beats_the_bound(alpha):
    model = ToyModel(vocab=VOCAB, seed=1, eos_slope=0.3)
    src = unpadded(random_sources(1, VOCAB, seed=2, max_len=4), 0)[0]
    outputs = every_output(model, src, alpha)
    for prefix in itertools.product(WORDS, repeat=2):
        bound = best_possible_scores(torch.tensor([[prefix_log_prob(model, src, list(prefix))]]),
                                     len(prefix), torch.tensor([LIMIT]), alpha)
        completions = [score for score, tokens in outputs if tokens[:2] == list(prefix)]
        assert max(completions) <= float(bound[0]) + 1e-6


def test_complete_hypotheses_sort_first_then_by_score():
    a, b, c = (Hypothesis([1], score, score) for score in (-1.0, -2.0, -0.5))
    pairs = [(True, a), (False, c), (True, b)]
    assert [hyp for _, hyp in sorted(pairs, key=best_first)] == [a, b, c]


def test_a_sentence_at_its_limit_ends_with_its_eos_rows_and_the_others_go_on():
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(4, VOCAB, generator=generator) * 3, dim=1)
    log_probs[:, [0, BOS]] = float("-inf")
    log_probs[:2, [1, 4, 5]] = float("-inf")  # sentence 0 at its limit: EOS only
    scores = torch.tensor([[-0.5, -1.0], [-0.2, -3.0]])  # (sentences, width 2)
    tokens = torch.tensor([[BOS, 4, 5, 0], [BOS, 5, 5, 0], [BOS, 1, 4, 0], [BOS, 4, 4, 0]])
    taking = SearchStep(TopK(), 2, 2, 0.6, EOS, torch.device("cpu"))
    taking.finished.open(2)
    outcome = taking.take(log_probs, scores, 2, 2, torch.tensor([2, 5]), tokens)
    found = [[hyp.tokens for hyp in taking.finished.close(slot)] for slot in outcome.ended]
    # Sentence 0 is at its limit (2 tokens): both its rows end; sentence 1 goes on.
    assert outcome.ended == [0] and outcome.keep.tolist() == [1]
    assert sorted(found[0]) == [[4, 5], [5, 5]]
    assert outcome.rows.tolist() and all(row >= 2 for row in outcome.rows.tolist())


def test_finished_keeps_each_sentences_nbest_th_score_and_closes_best_first():
    finished = Finished(nbest=2, device=torch.device("cpu"))
    assert finished.open(2) == [0, 1] and finished.open(1) == [2]
    hyp = {score: Hypothesis([4], score, score) for score in (-1.0, -2.0, -3.0, -0.5)}
    # (open sentence, slot, complete, hypothesis): sentence 1 has its two, the others not.
    assert finished.add([(1, 1, True, hyp[-2.0]), (1, 1, True, hyp[-1.0]),
                         (0, 0, True, hyp[-3.0])]) == [1, 2, 1]
    assert finished.nbest_scores.tolist() == [float("-inf"), -2.0, float("-inf")]
    finished.keep(torch.tensor([0, 2]))  # sentence 1 ended
    assert finished.slots.tolist() == [0, 2]
    assert finished.close(1) == [hyp[-1.0], hyp[-2.0]]
    finished.add([(0, 0, False, hyp[-0.5]), (0, 0, True, hyp[-1.0])])
    # Complete ones first: the incomplete -0.5 ranks after both complete ones.
    assert finished.nbest_scores.tolist() == [-3.0, float("-inf")]
    assert finished.close(0) == [hyp[-1.0], hyp[-3.0]]
    assert finished.found == {2: []}


def test_bound_uses_the_longest_reachable_length():
    """The early-stopping bound for alpha >= 0 is log P / lp(max_len + 1) (math check of
    the helper against a direct maximum over every reachable length)."""
    open_log_probs = torch.tensor([[-2.0, -3.0], [-0.5, -9.0]])
    limits = torch.tensor([6, 9])
    for alpha in (0.6, -0.4):
        bound = best_possible_scores(open_log_probs, 2, limits, alpha)
        for i, limit in enumerate(limits.tolist()):
            direct = max(float(open_log_probs[i].max()) / length_penalty(n, alpha)
                         for n in range(3, limit + 2))
            assert float(bound[i]) == pytest.approx(direct)
            assert math.isfinite(direct)
