"""The one lockstep loop (decode/search/beam.py) and its step (decode/search/step.py) against exhaustive
search on a toy model small enough to score every output, with plain top-k and with a
selection of its own; and the bound that stops a sentence early, on numbers computed by
hand."""

from __future__ import annotations

import itertools
import pytest
import torch

from search_fixtures import BOS, EOS, SPECIAL, ToyModel, random_sources, sequence_log_prob, unpadded
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.beam import beam_loop
from transformer_nmt.decode.search.ranking import Ranked, TopK
from transformer_nmt.decode.search.base import Hypothesis
from transformer_nmt.decode.search.step import SearchStep, best_first, best_possible_scores
from transformer_nmt.decode.search.step_rules import ForceEos

VOCAB = 6  # PAD 0 and BOS 2 are never generated: outputs use 1, 4 and 5, then EOS 3
WORDS = (1, 4, 5)
LIMIT = 3


def lp(length: int, alpha: float) -> float:
    """GNMT's length penalty of an output of `length` tokens, EOS counted."""
    return ((5 + length) / 6) ** alpha


def every_output(model: ToyModel, src: torch.Tensor, alpha: float) -> list[tuple[float, list[int]]]:
    """(score, tokens) of every output of at most LIMIT words, best first."""
    found = []
    for length in range(LIMIT + 1):
        for tokens in itertools.product(WORDS, repeat=length):
            log_p = sequence_log_prob(model, src, list(tokens))
            found.append((log_p / lp(length + 1, alpha), list(tokens)))
    return sorted(found, key=lambda pair: -pair[0])


def search(model: ToyModel, src: torch.Tensor, cfg: DecodeConfig, selection=None,
           early_stop: bool = True) -> list[list[Hypothesis]]:
    limits = torch.full((src.size(0),), LIMIT)
    return beam_loop(model, model.encode(src), limits, cfg, SPECIAL, [ForceEos(EOS)],
                     selection or TopK(), cfg.beam, early_stop=early_stop)


@pytest.mark.parametrize("alpha", [0.0, 0.6, -0.5])
@pytest.mark.parametrize("early_stop", [True, False])
def test_a_beam_wider_than_every_prefix_finds_the_exhaustive_n_best(alpha, early_stop):
    model = ToyModel(vocab=VOCAB, seed=1, eos_slope=0.3)
    src = random_sources(3, VOCAB, seed=2, max_len=4)
    cfg = DecodeConfig(beam=len(WORDS) ** LIMIT, nbest=5, alpha=alpha)
    found = search(model, src, cfg, early_stop=early_stop)
    for row, hypotheses in enumerate(found):
        expected = every_output(model, unpadded(src, row)[0], alpha)[:5]
        assert [hyp.tokens for hyp in hypotheses] == [tokens for _, tokens in expected]
        for hyp, (score, tokens) in zip(hypotheses, expected):
            assert hyp.score == pytest.approx(score, rel=1e-5, abs=1e-6)
            assert hyp.log_prob == pytest.approx(score * lp(len(tokens) + 1, alpha), rel=1e-5,
                                                 abs=1e-6)


def test_a_narrow_beam_keeps_only_the_best_prefixes_and_finds_each_sentence_alone():
    model = ToyModel(vocab=VOCAB, seed=3, eos_slope=0.3)
    src = random_sources(4, VOCAB, seed=4, max_len=4)
    cfg = DecodeConfig(beam=2, nbest=2)
    together = search(model, src, cfg)
    for row, hypotheses in enumerate(together):
        alone = search(model, unpadded(src, row), cfg)[0]
        assert [hyp.tokens for hyp in hypotheses] == [hyp.tokens for hyp in alone]
        assert [hyp.score for hyp in hypotheses] == pytest.approx([hyp.score for hyp in alone])
        assert len(hypotheses) == 2 and hypotheses[0].score >= hypotheses[1].score
        assert all(len(hyp.tokens) <= LIMIT for hyp in hypotheses)


class LongIsComplete(TopK):
    """Plain top-k whose requirement is an output of at least two words: finished
    hypotheses meeting it rank before any that does not. Records what the loop keeps."""

    def __init__(self) -> None:
        self.step = 0
        self.kept: list[tuple[list[int], tuple[int, ...]]] = []

    def rank(self, scores, log_probs, width, k) -> Ranked:
        ranked = super().rank(scores, log_probs, width, k)
        # An extension at step s that ends in EOS has s words.
        ranked.complete = torch.full_like(ranked.tokens, self.step >= 2, dtype=torch.bool)
        self.step += 1
        return ranked

    def keep(self, sentences, ranks) -> None:
        self.kept.append((None if sentences is None else sentences.tolist(),
                          tuple(ranks.shape)))


def test_hypotheses_that_meet_the_selections_requirement_rank_first():
    model = ToyModel(vocab=VOCAB, seed=1, eos_slope=0.3)
    src = random_sources(1, VOCAB, seed=5, max_len=3)
    k = len(WORDS) ** LIMIT
    selection = LongIsComplete()
    found = search(model, src, DecodeConfig(beam=k, nbest=6, alpha=0.6), selection,
                   early_stop=False)[0]
    ranked = sorted(every_output(model, unpadded(src, 0)[0], 0.6),
                    key=lambda pair: (len(pair[1]) < 2, -pair[0]))
    assert [hyp.tokens for hyp in found] == [tokens for _, tokens in ranked[:6]]
    # The step told the selection that every sentence goes on (None), with k ranks, after
    # each step but the last (where EOS is forced and nothing stays open).
    assert selection.kept == [(None, (1, k))] * LIMIT + [([], (0, k))]


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
