"""What the confidence needs, gathered by the searches while they search: the same numbers
as the teacher-forced pass of the confidence's definition, the same outputs as a search that
gathers nothing, and a calibrated Translator that no longer decodes its outputs again."""

from __future__ import annotations

import pytest
import torch

from decode_fixtures import SHORT, sentences, with_calibration
from search_fixtures import SPECIAL, random_sources, tiny_transformer
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.quality import confidence
from transformer_nmt.decode.quality.confidence import all_features, sentence_features
from transformer_nmt.decode.search.constrained import constrained_beam_search
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

FROM_STATES = (0, 1, 2, 5)
"""The places in FEATURES of the four that come from the model's states."""
SEARCHES = [DecodeConfig(beam=4, max_len_b=8), DecodeConfig(beam=1, max_len_b=8),
            DecodeConfig(beam=3, nbest=3, max_len_b=8),
            DecodeConfig(beam=8, no_repeat_ngram=2, max_len_b=8),  # the guard's fallback
            DecodeConfig(sampling=True, nbest=2, max_len_b=8)]


def source_ids(src: torch.Tensor, row: int) -> list[int]:
    return src[row][src[row].ne(SPECIAL.pad)].tolist()[:-1]  # without EOS


def assert_like_the_teacher_forced_pass(model, src, found) -> None:
    for row, hypotheses in enumerate(found):
        ids = source_ids(src, row)
        for hypothesis in hypotheses:
            assert hypothesis.features is not None
            gathered = all_features(hypothesis.features, hypothesis.tokens, ids)
            alone = src[row: row + 1, : len(ids) + 1]
            reference = sentence_features(model, alone, [hypothesis.tokens], SPECIAL)[0]
            assert gathered == pytest.approx(reference, abs=1e-4)


@pytest.mark.parametrize("cfg", SEARCHES, ids=lambda cfg: f"beam{cfg.beam}-nbest{cfg.nbest}"
                         f"-ngram{cfg.no_repeat_ngram}-sampling{cfg.sampling}")
def test_every_search_gathers_the_teacher_forced_features_and_finds_the_same(cfg):
    model = tiny_transformer()
    src = random_sources(6, 40, seed=3)
    with torch.inference_mode():
        gathered = search(model, src, cfg, SPECIAL, features=True)
        plain = search(model, src, cfg, SPECIAL)
    assert [[(h.tokens, h.score, h.log_prob) for h in hyps] for hyps in gathered] == \
        [[(h.tokens, h.score, h.log_prob) for h in hyps] for hyps in plain]
    assert all(h.features is None for hyps in plain for h in hyps)
    assert_like_the_teacher_forced_pass(model, src, gathered)


def test_a_constrained_search_gathers_them_too():
    model = tiny_transformer()
    src = random_sources(4, 40, seed=7)
    constraints = [[[9, 10]], [], [[12]], [[5], [30, 31]]]
    cfg = DecodeConfig(beam=4, max_len_b=8)
    with torch.inference_mode():
        gathered = constrained_beam_search(model, src, constraints, cfg, SPECIAL, features=True)
        plain = constrained_beam_search(model, src, constraints, cfg, SPECIAL)
    assert [[h.tokens for h in hyps] for hyps in gathered] == [[h.tokens for h in hyps]
                                                               for hyps in plain]
    assert_like_the_teacher_forced_pass(model, src, gathered)


def test_a_calibrated_translator_takes_the_confidence_from_its_search(model_file, tmp_path,
                                                                     monkeypatch):
    calibrated = with_calibration(model_file, tmp_path / "calibrated.pt",
                                  coefficients=[0.5, 0.3, -0.4, 0.0, -0.2, -0.6, -0.5, -0.3])
    lines = sentences(6, seed=2)
    teacher_forced = confidence.sentence_features

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the outputs were decoded again for their confidence")

    # The tiny model's outputs are mostly degenerate, whose confidence is 0 whatever their
    # features; the features are what this compares.
    monkeypatch.setattr(confidence, "output_reasons", lambda *arguments: [])
    translator = Translator.from_file(calibrated, TranslatorOptions(
        SHORT, engine="torch", workers=1, precision="fp32"))
    monkeypatch.setattr(confidence, "sentence_features", no_second_pass)
    found = [translations[0] for translations in translator.translate_nbest(lines)]
    monkeypatch.setattr(confidence, "sentence_features", teacher_forced)
    ids = translator.source_ids(lines)
    expected = translator.confidence.assess(translator.source_tensor(ids),
                                            [translation.tokens for translation in found])
    assert [translation.confidence for translation in found] == pytest.approx(
        [assessment.confidence for assessment in expected], abs=2e-4)
    assert len({translation.confidence for translation in found}) > 1
