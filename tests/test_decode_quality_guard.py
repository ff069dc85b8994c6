"""The guard against degenerate output (decode/quality/guard.py): which sentences are decoded
again, with what settings, which result wins, and the Translator's use of it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from decode_fixtures import SHORT, sentences
from transformer_nmt.config import MAX_BEAM, DecodeConfig
from transformer_nmt.decode.quality.degenerate import ONLY_SYMBOLS, REPEATS
from transformer_nmt.decode.quality.guard import checks, fallback_config, guard
from transformer_nmt.decode.search.base import Hypothesis
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model_file import load_for_inference

PIECES = ["\u2581God", "\u2581saw", "\u2581the", "\u2581light", ".",
          "\u2581Gott", "\u2581sah", "\u2581das", "\u2581Licht", "\u2581Herr", ","]
SOURCE = [0, 1, 2, 3, 4]
SOUND = [5, 6, 7, 8, 4]
LOOP = [9, 10] * 5
SYMBOLS = [4, 10]


def hyp(tokens: list[int], score: float) -> Hypothesis:
    return Hypothesis(tokens, score, score)


def guarded(found, retried=None):
    """guard() over sentences of SOURCE; records which rows it decodes again."""
    asked = []

    def decode_again(rows):
        asked.append(rows)
        return [retried[row] for row in rows]

    return guard([SOURCE] * len(found), found, lambda ids: [PIECES[i] for i in ids],
                 decode_again), asked


def test_sound_translations_are_kept_and_not_decoded_again():
    found = [[hyp(SOUND, -1.0)], [hyp(SOUND[:3] + [4], -2.0)]]
    results, asked = guarded(found)
    assert asked == []
    assert [(r.hypotheses, r.degenerate, r.fallback) for r in results] == \
        [(found[0], [], False), (found[1], [], False)]


def test_only_the_degenerate_sentences_are_decoded_again_and_a_sound_fallback_wins():
    found = [[hyp(SOUND, -1.0)], [hyp(LOOP, -0.5)], [hyp(SOUND, -1.5)]]
    retried = {1: [hyp(SOUND, -3.0), hyp(SOUND[:4], -4.0)]}
    results, asked = guarded(found, retried)
    assert asked == [[1]]
    assert results[1].degenerate == [REPEATS]
    assert results[1].fallback and results[1].hypotheses == retried[1]
    assert not results[0].fallback and not results[2].fallback


def test_when_the_fallback_is_degenerate_too_the_search_s_own_stays_whatever_the_scores():
    found = [[hyp(LOOP, -2.0)], [hyp(LOOP, -2.0)]]
    retried = {0: [hyp(SYMBOLS, -1.0)], 1: [hyp(SYMBOLS, -3.0)]}
    results, _ = guarded(found, retried)
    for row in 0, 1:
        assert not results[row].fallback and results[row].hypotheses == found[row]
        assert results[row].degenerate == [REPEATS]


def test_a_sentence_without_hypotheses_is_left_alone():
    results, asked = guarded([[]])
    assert asked == [] and results[0].hypotheses == [] and results[0].degenerate == []


def test_the_fallback_blocks_3_grams_widens_the_beam_and_caps_the_length():
    fallback = fallback_config(DecodeConfig(beam=4, alpha=0.8, nbest=2))
    assert (fallback.no_repeat_ngram, fallback.beam, fallback.alpha, fallback.nbest) == \
        (3, 8, 0.8, 2)
    assert (fallback.max_len_a, fallback.max_len_b) == (1.0, 10)
    assert fallback_config(DecodeConfig(beam=1)).beam == 4
    assert fallback_config(DecodeConfig(beam=MAX_BEAM)).beam == MAX_BEAM
    assert fallback_config(DecodeConfig(no_repeat_ngram=2)).no_repeat_ngram == 2
    assert fallback_config(DecodeConfig(no_repeat_ngram=5)).no_repeat_ngram == 3
    assert fallback_config(DecodeConfig(max_len_a=3.0, max_len_b=5)).max_len_a == 2.0
    assert fallback_config(DecodeConfig(max_len_a=3.0, max_len_b=5)).max_len_b == 5


def test_the_guard_checks_searches_it_is_on_for_but_not_samples():
    assert checks(DecodeConfig()) and DecodeConfig().guard
    assert not checks(DecodeConfig(guard=False))
    assert not checks(DecodeConfig(sampling=True))


# The Translator's guard, on the tiny random model of the `model_file` fixture, whose
# outputs loop more often than not: most lines are decoded again.

def translator_for(model_file, decode: DecodeConfig, **fields) -> Translator:
    return Translator(load_for_inference(model_file), TranslatorOptions(
        decode, **{"precision": "fp32", "engine": "torch", **fields}))


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return sentences(12, seed=3)


@pytest.fixture(scope="module")
def unguarded(model_file, lines):
    translator = translator_for(model_file, replace(SHORT, guard=False), workers=1)
    return list(translator.translate_nbest(lines))


@pytest.fixture(scope="module")
def guarded_translations(model_file, lines):
    translator = translator_for(model_file, SHORT, workers=1)
    return list(translator.translate_nbest(lines))


def test_without_the_guard_nothing_is_checked(unguarded):
    assert all(t.degenerate is None and not t.fallback for ts in unguarded for t in ts)


def test_sound_outputs_are_the_searchs_own_and_degenerate_ones_are_marked(
        unguarded, guarded_translations):
    assert any(ts[0].fallback for ts in guarded_translations)
    for plain, (best,) in zip(unguarded, guarded_translations):
        assert isinstance(best.degenerate, list)
        if not best.degenerate:
            assert (best.text, best.score, best.fallback) == (plain[0].text, plain[0].score,
                                                              False)
        elif not best.fallback:
            assert best.text == plain[0].text


def test_a_fallback_translation_is_the_fallback_settings_own(model_file, lines,
                                                             guarded_translations):
    settings = replace(fallback_config(SHORT), guard=False)
    fallback = translator_for(model_file, settings, workers=1)
    for line, (best,) in zip(lines, guarded_translations):
        if best.fallback:
            [again] = next(fallback.translate_nbest([line]))
            assert best.text == again.text
            assert best.score == pytest.approx(again.score, abs=1e-5)


def test_the_guard_keeps_batching_invisible(model_file, lines, guarded_translations):
    translator = translator_for(model_file, SHORT, batch_size=5, buffer_size=7, workers=2)
    batched = list(translator.translate_nbest(lines))
    assert [ts[0].text for ts in batched] == [ts[0].text for ts in guarded_translations]
    assert [ts[0].fallback for ts in batched] == [ts[0].fallback for ts in guarded_translations]


def test_every_nbest_entry_carries_its_lines_reasons_and_empty_lines_none(model_file):
    translator = translator_for(model_file, replace(SHORT, nbest=2), workers=1)
    found = list(translator.translate_nbest(sentences(4, seed=5) + [""]))
    for translations in found[:4]:
        assert len({(tuple(t.degenerate), t.fallback) for t in translations}) == 1
    assert found[4][0].degenerate is None and not found[4][0].fallback


def test_samples_are_not_checked(model_file):
    translator = translator_for(model_file, DecodeConfig(sampling=True, max_len_b=6),
                                workers=1)
    [[sample]] = translator.translate_nbest(["the house is small"])
    assert sample.degenerate is None and not sample.fallback


def test_symbols_only_output_counts_as_degenerate():
    results, _ = guarded([[hyp(SYMBOLS, -1.0)]], {0: [hyp(SOUND, -5.0)]})
    assert results[0].degenerate == [ONLY_SYMBOLS] and results[0].fallback
