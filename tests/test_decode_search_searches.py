"""Properties greedy and beam search must have (transformer_nmt.decode.search.searches).

Two kinds of model (tests/search_fixtures.py): the tiny random Transformer, and
`ToyModel`, a small recurrent model written against the search protocol.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from search_fixtures import (BOS, EOS, PAD, SPECIAL, ToyCache, ToyModel, random_sources,
                             searches_with_and_without_cache, sequence_log_prob,
                             tiny_transformer, unpadded)
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.base import length_penalty, max_lengths
from transformer_nmt.decode.search.searches import beam_search, greedy_search, search
from transformer_nmt.decode.search.teacher_forced import attach_details
from transformer_nmt.errors import UserError


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
def test_beam_1_equals_greedy(model):
    src = random_sources(8, 12)
    cfg = DecodeConfig(beam=1, max_len_b=4)
    greedy = greedy_search(model, src, cfg, SPECIAL)
    beam = beam_search(model, src, cfg, SPECIAL)
    assert [hyp.tokens for hyp in greedy] == [hyps[0].tokens for hyps in beam]
    assert [hyp.score for hyp in greedy] == pytest.approx([hyps[0].score for hyps in beam])


class CacheRecorder(ToyModel):
    """A ToyModel that keeps the caches it hands out and the lengths they were sized for."""

    def __init__(self) -> None:
        super().__init__(eos_bias=-20.0)  # never stops by itself: runs to the maximum length
        self.caches: list[tuple[int, ToyCache]] = []

    def new_cache(self, max_length: int = 0) -> ToyCache:
        cache = super().new_cache(max_length)
        self.caches.append((max_length, cache))
        return cache


@pytest.mark.parametrize("beam", [1, 4])
def test_the_cache_is_sized_for_the_longest_output_and_never_outgrows_it(beam):
    model = CacheRecorder()
    src = random_sources(5, 12, seed=3)
    cfg = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=3)
    search(model, src, cfg, SPECIAL)
    [(max_length, cache)] = model.caches
    longest = int(max_lengths(src, cfg, SPECIAL.pad).max())
    assert max_length == longest + 1  # BOS and every token before the EOS
    assert cache.length == max_length  # the longest output decoded all of them


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
@pytest.mark.parametrize("beam", [1, 4])
def test_cached_decoding_equals_uncached(model, beam):
    src = random_sources(6, 12, seed=1)
    cached, uncached = searches_with_and_without_cache(model, src, beam)
    for with_cache, without in zip(cached, uncached):
        assert [hyp.tokens for hyp in with_cache] == [hyp.tokens for hyp in without]
        assert [hyp.score for hyp in with_cache] == pytest.approx(
            [hyp.score for hyp in without], abs=1e-4)


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
@pytest.mark.parametrize("beam", [1, 3])
def test_a_batch_translates_like_each_sentence_alone(model, beam):
    src = random_sources(5, 12, seed=2)
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_b=3)
    batched = search(model, src, cfg, SPECIAL)
    for row, hyps in enumerate(batched):
        alone = search(model, unpadded(src, row), cfg, SPECIAL)[0]
        assert [hyp.tokens for hyp in hyps] == [hyp.tokens for hyp in alone]
        assert [hyp.score for hyp in hyps] == pytest.approx([hyp.score for hyp in alone], abs=1e-4)


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
def test_scores_are_the_models_log_probabilities(model):
    """Each hypothesis' log P equals a fresh teacher-forced scoring of its tokens: the
    search accumulated the right prefix scores through every beam reordering."""
    src = random_sources(4, 12, seed=3)
    cfg = DecodeConfig(beam=4, nbest=4, max_len_b=4, alpha=0.6)
    for row, hyps in enumerate(beam_search(model, src, cfg, SPECIAL)):
        assert [hyp.score for hyp in hyps] == sorted((hyp.score for hyp in hyps), reverse=True)
        for hyp in hyps:
            log_prob = sequence_log_prob(model, unpadded(src, row)[0], hyp.tokens)
            assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)
            assert hyp.score == pytest.approx(
                hyp.log_prob / length_penalty(len(hyp.tokens) + 1, cfg.alpha))


def test_beam_search_scores_better_than_greedy():
    """Beam search beats or ties greedy search under the same scoring on nearly every
    sentence. Not on every one: that is no theorem of beam search. Greedy's prefix can
    drop off the beam and still end best, and a sentence is complete at `beam` finished
    hypotheses, possibly before a longer one that alpha would favour (on these toy
    models about 2% of sentences)."""
    differences = []
    for seed in range(3):
        model, src = ToyModel(seed=seed), random_sources(16, 12, seed=seed)
        for alpha in (0.0, 0.6):
            cfg = DecodeConfig(beam=4, alpha=alpha, max_len_b=5)
            greedy = greedy_search(model, src, cfg, SPECIAL)
            beam = beam_search(model, src, cfg, SPECIAL)
            differences += [hyps[0].score - hyp.score for hyp, hyps in zip(greedy, beam)]
    differences = torch.tensor(differences)
    assert differences.ge(-1e-6).float().mean() >= 0.95
    assert differences.mean() > 0


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0, -0.5])
@pytest.mark.parametrize("nbest", [1, 2])
def test_early_stopping_does_not_change_the_result(alpha, nbest):
    """Stopping once no open hypothesis can beat the nbest-th finished one (which here
    saves 10-70% of the decoder calls) returns what running each sentence to
    completion returns."""
    model, src = ToyModel(eos_slope=0.3), random_sources(16, 12, seed=4)
    cfg = DecodeConfig(beam=4, nbest=nbest, alpha=alpha, max_len_b=6)
    early = beam_search(model, src, cfg, SPECIAL, early_stop=True)
    full = beam_search(model, src, cfg, SPECIAL, early_stop=False)
    assert [[hyp.tokens for hyp in hyps] for hyps in early] == \
        [[hyp.tokens for hyp in hyps] for hyps in full]


def test_wide_beam_finds_the_exhaustive_optimum():
    """With a beam wider than every set of prefixes, the search is exact: it must return
    the best-scoring sequence among all that fit the maximum length."""
    vocab, model = 7, ToyModel(vocab=7, seed=5, eos_slope=0.5)
    cfg = DecodeConfig(beam=64, alpha=0.6, max_len_a=0.0, max_len_b=4)
    src = torch.tensor([[5, 6, EOS]])
    words = [token for token in range(vocab) if token not in (PAD, BOS, EOS)]
    best = max((sequence_log_prob(model, src[0], list(tokens))
                / length_penalty(len(tokens) + 1, cfg.alpha), list(tokens))
               for length in range(cfg.max_len_b + 1)
               for tokens in itertools.product(words, repeat=length))
    found = beam_search(model, src, cfg, SPECIAL)[0][0]
    assert found.tokens == best[1]
    assert found.score == pytest.approx(best[0], abs=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
def test_maximum_length_is_respected(beam):
    model = ToyModel(eos_slope=0.0, eos_bias=-1e4)  # EOS only when forced
    src = random_sources(6, 12, seed=6)
    cfg = DecodeConfig(beam=beam, max_len_a=0.5, max_len_b=2)
    limits = max_lengths(src, cfg, PAD).tolist()
    for hyps, limit in zip(search(model, src, cfg, SPECIAL), limits):
        assert len(hyps[0].tokens) == limit
    for hyps in search(model, src, cfg, SPECIAL, max_len_limit=3):
        assert len(hyps[0].tokens) <= 3


@pytest.mark.parametrize("beam", [1, 4])
def test_pad_and_bos_are_never_generated(beam):
    model = ToyModel()
    model.out[:, PAD] = 50.0  # the model would pick them at every step
    model.out[:, BOS] = 50.0
    for hyps in search(model, random_sources(4, 12), DecodeConfig(beam=beam, max_len_b=5), SPECIAL):
        assert PAD not in hyps[0].tokens and BOS not in hyps[0].tokens


def test_nbest_larger_than_beam_is_refused():
    with pytest.raises(UserError, match="nbest must be between 1 and the beam size"):
        DecodeConfig(beam=2, nbest=3)


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize("beam", [1, 3])
def test_outputs_start_with_their_prefix(beam):
    model = tiny_transformer()
    src = random_sources(4, 12, seed=8)
    prefixes = [[7, 7, 9], [], [5], [11, 4, 6, 8, 10, 5, 7, 9, 11, 4]]  # the last: past max_len
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_b=3)
    found = search(model, src, cfg, SPECIAL, prefixes=prefixes)
    attach_details(model, src, found, SPECIAL, attention=False, token_scores=True)
    for prefix, hyps in zip(prefixes, found):
        for hyp in hyps:
            assert hyp.tokens[: len(prefix)] == prefix
            # The forced tokens are scored by the model like any other.
            assert sum(hyp.token_scores) == pytest.approx(hyp.log_prob, abs=1e-4)
    assert [hyp.tokens for hyp in found[1]] == [hyp.tokens for hyp in search(
        model, src[1:2, : int(src[1].ne(PAD).sum())], cfg, SPECIAL)[0]]


def test_greedy_search_forced_along_its_own_output_finds_it_again():
    model = tiny_transformer(seed=2)
    src = random_sources(5, 12, seed=4)
    cfg = DecodeConfig(beam=1, max_len_b=6)
    free = greedy_search(model, src, cfg, SPECIAL)
    forced = greedy_search(model, src, cfg, SPECIAL, prefixes=[hyp.tokens[:2] for hyp in free])
    assert [hyp.tokens for hyp in forced] == [hyp.tokens for hyp in free]
    assert [hyp.score for hyp in forced] == pytest.approx([hyp.score for hyp in free], abs=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_forbids_repeated_ngrams(beam, n):
    model = tiny_transformer(vocab=16, seed=1)
    src = random_sources(6, 16, seed=2, min_len=6, max_len=9)
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_b=8)
    free = search(model, src, cfg, SPECIAL)
    assert any(len(set(ngrams(hyp.tokens, n))) < len(ngrams(hyp.tokens, n))
               for hyps in free for hyp in hyps)  # the model does repeat itself
    limited = search(model, src, replace(cfg, no_repeat_ngram=n), SPECIAL)
    for row, hyps in enumerate(limited):
        for hyp in hyps:
            grams = ngrams(hyp.tokens, n)
            assert len(set(grams)) == len(grams)
            assert hyp.log_prob == pytest.approx(
                sequence_log_prob(model, unpadded(src, row)[0], hyp.tokens), abs=1e-4)


SAMPLING = DecodeConfig(sampling=True, nbest=3, max_len_b=6, seed=5)


@pytest.mark.parametrize("model", [ToyModel(), tiny_transformer()], ids=["toy", "transformer"])
def test_samples_are_reproducible_and_independent_of_batch_mates(model):
    src = random_sources(6, 12, seed=6)
    batched = search(model, src, SAMPLING, SPECIAL, seeds=list(range(10, 16)))
    assert [[hyp.tokens for hyp in hyps] for hyps in batched] == [
        [hyp.tokens for hyp in hyps]
        for hyps in search(model, src, SAMPLING, SPECIAL, seeds=list(range(10, 16)))]
    for row, hyps in enumerate(batched):
        alone = search(model, unpadded(src, row), SAMPLING, SPECIAL, seeds=[10 + row])[0]
        assert [hyp.tokens for hyp in hyps] == [hyp.tokens for hyp in alone]
        assert [hyp.score for hyp in hyps] == sorted((hyp.score for hyp in hyps), reverse=True)
        for hyp in hyps:  # scores are the model's own log-probabilities
            assert hyp.log_prob == pytest.approx(
                sequence_log_prob(model, unpadded(src, row)[0], hyp.tokens), abs=1e-4)
    other_seed = search(model, src, replace(SAMPLING, seed=6), SPECIAL, seeds=list(range(10, 16)))
    assert [[h.tokens for h in hyps] for hyps in other_seed] != [
        [h.tokens for h in hyps] for hyps in batched]


def test_top_1_and_a_cold_temperature_sample_the_greedy_output():
    model = tiny_transformer()
    src = random_sources(5, 12, seed=7)
    greedy = [hyp.tokens for hyp in greedy_search(model, src, DecodeConfig(beam=1, max_len_b=6),
                                                  SPECIAL)]
    for cfg in replace(SAMPLING, nbest=1, topk=1), replace(SAMPLING, nbest=1, temperature=1e-4), \
            replace(SAMPLING, nbest=1, topp=1e-6):
        assert [hyps[0].tokens for hyps in search(model, src, cfg, SPECIAL)] == greedy


# Outputs of beam search before its loop was shared with constrained search (captured on
# this project's CPUs): the shared loop must find the same hypotheses, in the same order.
PINNED_PLAIN = [
    [([6, 4, 6, 11, 5, 1], -2.5008), ([11, 5, 7, 7, 5, 7, 7, 5, 7, 7], -3.4357),
     ([11, 5, 7, 7, 5, 7, 7, 5, 7, 4], -3.5605), ([6, 4, 6, 11, 5, 7, 7, 5, 7, 7], -3.6611)],
    [([6, 6, 4, 6, 11, 5, 1], -2.3772), ([6, 6, 4, 6, 11, 5, 1, 6, 5, 7], -3.1467),
     ([], -3.2209), ([11, 5, 7, 7, 5, 7, 7, 5, 7, 7, 5], -3.4334)],
    [([6, 4, 6, 4, 6, 11, 5, 1], -2.7218), ([6, 4, 6, 4, 6, 11, 5, 1, 6, 5, 7], -3.0929),
     ([6, 4, 6, 4, 6, 11, 5, 1, 6, 5, 1], -3.2434),
     ([6, 4, 6, 4, 6, 11, 5, 7, 7, 5, 7, 7, 5], -3.6532)],
    [([], -1.7950), ([9, 1], -2.7566), ([11, 5, 7, 7, 5, 7, 7, 5], -2.9166),
     ([11, 5, 7, 7, 5, 7, 4, 6], -3.1489)],
    [([11, 5, 7, 7, 5, 7, 4, 6, 4], -2.6534), ([9, 1], -2.6605),
     ([11, 5, 7, 7, 5, 7, 7, 5, 7], -3.0254), ([11, 5, 7, 7, 7, 5, 7, 7, 5], -3.2323)],
    [([11, 5, 7, 7, 5, 7, 4, 6, 4], -2.7357), ([11, 5, 7, 7, 5, 7, 4, 6, 4, 6], -2.7753),
     ([], -2.9878), ([11, 5, 7, 7, 5, 7, 7, 5, 7, 7, 5], -3.2040)],
    [([1, 6, 4, 6, 11, 5, 1], -2.7562), ([5, 1, 11, 5, 7, 7, 5, 7, 7], -3.3707),
     ([5, 1, 11, 5, 7, 7, 5, 7, 4], -3.5856), ([5, 1, 11, 5, 7, 7, 7, 5, 7], -3.7563)],
]
PINNED_PREFIXED = [
    [([5, 6], -15.7785), ([5, 6, 11, 5, 1], -16.0194), ([5, 6, 11, 5, 7], -17.5902)],
    [([11, 5, 7, 7, 5, 1, 6, 4, 6], -16.0432), ([11, 5, 7, 7, 9, 7, 5, 1, 9], -16.1497),
     ([11, 5, 7, 8, 7, 4, 10, 4, 6], -16.9970)],
    [([7, 1], -9.8193), ([7], -10.3433), ([7, 1, 9, 1], -11.1108)],
    [([8, 9, 5, 7, 4, 1], -25.9913), ([8, 9, 5, 7, 7, 5, 1], -29.8221),
     ([8, 9, 5, 7, 4, 1, 6, 5], -30.0129)],
    # The forced prefix repeats the bigram (5, 5): forced all the same, as before.
    [([5, 5, 5, 7, 9, 1], -26.3732), ([5, 5, 5, 7, 4, 1], -27.8164), ([5, 5, 5, 1, 6, 5], -28.7235)],
    [([], -0.6770), ([9, 1], -3.8941), ([6, 4, 11, 5, 1], -8.2701)],
    [([4, 1, 6, 4, 6, 11, 5, 1], -21.4278), ([4, 1, 6, 5, 1, 11, 5, 7, 7], -26.7372),
     ([4, 1, 6, 4, 6, 11, 5, 7, 7], -27.7591)],
]


@pytest.mark.parametrize("cfg, seed, prefixes, expected", [
    (DecodeConfig(beam=4, nbest=4, alpha=1.0, max_len_b=6), 0, None, PINNED_PLAIN),
    (DecodeConfig(beam=5, nbest=3, alpha=-0.5, max_len_b=6, no_repeat_ngram=2), 1,
     [[5, 6], [], [7], [8, 9, 5], [5, 5, 5], [], [4]], PINNED_PREFIXED)], ids=["plain", "rules"])
def test_beam_search_finds_what_it_found_before_the_loop_was_shared(cfg, seed, prefixes,
                                                                    expected):
    found = beam_search(ToyModel(), random_sources(7, 12, seed=seed), cfg, SPECIAL,
                        max_len_limit=None if prefixes is None else 9, prefixes=prefixes)
    assert [[hyp.tokens for hyp in hyps] for hyps in found] == [
        [tokens for tokens, _ in hyps] for hyps in expected]
    assert [[hyp.score for hyp in hyps] for hyps in found] == [
        pytest.approx([score for _, score in hyps], abs=1e-4) for hyps in expected]


class _GradFreeCheck(ToyModel):
    """A ToyModel that records whether autograd was off when it encoded: a search that
    encodes with autograd on keeps the encoder's activations for as long as it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.embed.requires_grad_(True)
        self.modes: list[bool] = []

    def encode(self, src):
        self.modes.append(torch.is_inference_mode_enabled())
        return super().encode(src)


@pytest.mark.parametrize("run, cfg", [
    (greedy_search, DecodeConfig(beam=1)), (beam_search, DecodeConfig(beam=3)),
    (search, DecodeConfig(beam=1)), (search, DecodeConfig(beam=3)),
    (search, DecodeConfig(sampling=True, nbest=2))],
    ids=["greedy_search", "beam_search", "search-greedy", "search-beam", "search-sampling"])
def test_every_search_encodes_without_autograd(run, cfg):
    model = _GradFreeCheck()
    run(model, random_sources(3, 12), replace(cfg, max_len_b=6), SPECIAL)
    assert model.modes == [True]
