"""The one lockstep loop (decode/search/beam.py) against exhaustive search on a toy model
small enough to score every output, with plain top-k and with a selection of its own (the
step and its bound: tests/test_decode_search_step.py)."""

from __future__ import annotations

import pytest
import torch

from search_fixtures import (EOS, LIMIT, SPECIAL, VOCAB, WORDS, ToyModel, every_output, lp,
                             random_sources, unpadded)
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.beam import beam_loop
from transformer_nmt.decode.search.ranking import Ranked, TopK
from transformer_nmt.decode.search.base import Hypothesis
from transformer_nmt.decode.search.step_rules import ForceEos


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
