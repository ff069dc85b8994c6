"""The confidence of a translation: its features on hand-made outputs, the calibration's
arithmetic, storage and reasons, and a Translator that attaches it without changing what
it translates."""

from __future__ import annotations

import math

import pytest

from decode_fixtures import SHORT, make_model_file, sentences, with_calibration
from transformer_nmt.decode.quality.confidence import (BASE_RATE_REASON, DEGENERATE_REASONS,
                                               FEATURES, Calibration, sentence_features)
from transformer_nmt.decode.quality.degenerate import TOO_LONG, degenerate_reasons
from transformer_nmt.decode.text.translator import (Translator, TranslationRequest,
                                               TranslatorOptions)
from transformer_nmt.errors import UserError

OPTIONS = TranslatorOptions(SHORT, workers=1, precision="fp32")


def calibration(coefficients=None, intercept=0.0, means=None) -> Calibration:
    return Calibration(tuple(means or [0.0] * len(FEATURES)), (1.0,) * len(FEATURES),
                       tuple(coefficients or [0.0] * len(FEATURES)), intercept,
                       target="by hand", threshold=50.0, split="valid", sentences=10,
                       accepted=0.5)


def test_features_of_hand_made_outputs_agree_with_the_models_token_scores(model_file):
    translator = Translator.from_file(model_file, OPTIONS)
    source = translator.source_ids(["the house is small ."])[0]
    word = source[1]
    outputs = [source[:], [word] * 8, []]
    src = translator.source_tensor([source] * len(outputs))
    features = [dict(zip(FEATURES, row))
                for row in sentence_features(translator.model, src, outputs, translator.special)]
    from transformer_nmt.decode.text.scoring import score_ids
    scored = score_ids(translator, [source] * len(outputs), outputs)
    for found, pair in zip(features, scored):
        assert found["mean_log_prob"] == pytest.approx(
            sum(pair.token_scores) / len(pair.token_scores), abs=1e-4)
        assert found["min_log_prob"] == pytest.approx(min(pair.token_scores), abs=1e-4)
        assert found["mean_entropy"] >= 0
        assert 0 <= found["unattended_source"] <= 1
    copy, repeat, empty = features
    assert copy["copied_tokens"] == 1 and copy["log_length_ratio"] == pytest.approx(0)
    assert repeat["repeated_bigrams"] == 6 / 7 and repeat["copied_tokens"] == 1
    assert repeat["log_length_ratio"] == pytest.approx(math.log(9 / (len(source) + 1)))
    assert repeat["log_length_ratio_squared"] == pytest.approx(repeat["log_length_ratio"] ** 2)
    assert empty["copied_tokens"] == empty["repeated_bigrams"] == 0


def test_a_calibration_is_a_logistic_regression_over_standardized_features():
    found = Calibration((1.0,) * 8, (2.0,) * 8, (0.5,) + (0.0,) * 7, -1.0, target="t",
                        threshold=1, split="valid", sentences=3, accepted=0.5)
    values = [5.0] + [0.0] * 7  # mean_log_prob two spreads above its mean
    assert found.probability(values) == pytest.approx(1 / (1 + math.exp(-(-1.0 + 0.5 * 2))))
    assert Calibration.from_dict(found.to_dict()) == found


def test_a_damaged_or_foreign_calibration_is_refused_with_a_remedy():
    stored = calibration().to_dict()
    with pytest.raises(UserError, match="nmt calibrate"):
        Calibration.from_dict({**stored, "features": ["something", "else"]})
    with pytest.raises(UserError, match="damaged"):
        Calibration.from_dict({**stored, "unknown": 1})
    with pytest.raises(UserError, match="nmt calibrate"):
        Calibration.from_dict({**stored, "coefficients": [1.0]})


def test_a_low_confidence_names_the_features_that_lower_it_most():
    weights = dict.fromkeys(FEATURES, 0.0)
    weights.update(repeated_bigrams=-3.0, unattended_source=-1.0, log_length_ratio_squared=-1.0)
    fitted = calibration([weights[name] for name in FEATURES])
    values = dict.fromkeys(FEATURES, 0.0)
    values.update(repeated_bigrams=1.0, unattended_source=0.8)
    assert fitted.reasons([values[name] for name in FEATURES]) == [
        "repeats a word", "leaves source words unattended"]
    values.update(repeated_bigrams=0.0, unattended_source=0.0, log_length_ratio=1.5,
                  log_length_ratio_squared=2.25)
    assert fitted.reasons([values[name] for name in FEATURES]) == [
        "much longer than the source"]
    # A fit that weighs attention against its name (attending to everything lowering the
    # confidence) never says "leaves source words unattended" of a fully attended output.
    contrary = calibration([2.0 if name == "unattended_source" else 0.0 for name in FEATURES],
                           means=[0.5 if name == "unattended_source" else 0.0
                                  for name in FEATURES])
    assert contrary.reasons([0.0] * len(FEATURES)) == [BASE_RATE_REASON]
    # Nothing lowers it, but the model is seldom right: its base rate is the reason.
    assert calibration(intercept=-2.0).reasons([0.0] * len(FEATURES)) == [BASE_RATE_REASON]
    assert calibration(intercept=2.0).reasons([0.0] * len(FEATURES)) == []


def test_a_model_without_calibration_gives_no_confidence(model_file):
    translator = Translator.from_file(model_file, OPTIONS)
    assert translator.confidence is None
    found = next(translator.translate_nbest(["the house is small ."]))[0]
    assert found.confidence is None and found.confidence_reasons == []


def test_a_calibrated_model_gives_every_translation_a_confidence_and_the_same_text(
        model_file, tmp_path):
    lines = sentences(12, seed=3) + [""]
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("mean_log_prob")] = 1.0
    calibrated = Translator.from_file(with_calibration(model_file, tmp_path / "c.pt", 0.2,
                                                       weights), OPTIONS)
    plain = Translator.from_file(model_file, OPTIONS)
    nbest = OPTIONS.decode.__class__(beam=2, nbest=2, max_len_b=6)
    found = list(calibrated.translate_nbest(lines, nbest))
    assert [[t.text for t in line] for line in found] == [
        [t.text for t in line] for line in plain.translate_nbest(lines, nbest)]
    for line, translations in zip(lines[:-1], found):
        for translation in translations:
            assert 0 <= translation.confidence <= 1
    assert found[-1][0].confidence is None  # an empty line is not translated
    # The confidence follows the mean log-probability, the one feature weighed here.
    best = [line[0] for line in found[:-1]]
    by_confidence = sorted(best, key=lambda t: t.confidence)
    assert by_confidence[0].confidence < by_confidence[-1].confidence


def test_a_degenerate_translation_gets_confidence_0_and_says_why(model_file, tmp_path):
    """The calibration gives every translation 0.5; those degenerate get 0 instead,
    n-best alternatives each by their own output."""
    translator = Translator.from_file(with_calibration(model_file, tmp_path / "c.pt"),
                                      OPTIONS)
    lines = sentences(8, seed=5) + ["12345 the dog runs"]  # readable: no unknown-source reason
    nbest = OPTIONS.decode.__class__(beam=2, nbest=2, max_len_b=6)
    confidences = set()
    for source, translations in zip(translator.source_ids(lines),
                                    translator.translate_nbest(lines, nbest)):
        for translation in translations:
            broken = degenerate_reasons([translator.vocab.piece(token) for token in source],
                                        translation.pieces(translator.vocab))
            assert translation.confidence == (0.0 if broken else 0.5)
            assert translation.confidence_reasons == [DEGENERATE_REASONS[reason]
                                                      for reason in broken]
            confidences.add(translation.confidence)
    assert confidences == {0.0, 0.5}


def test_an_output_cut_at_the_length_limit_claims_no_certainty(tmp_path):
    # 32 positions: outputs of at most 31 tokens, fewer than the required term has.
    model = make_model_file(tmp_path, max_positions=32)
    sure = Translator.from_file(with_calibration(model, tmp_path / "sure.pt", 20.0), OPTIONS)
    term = " ".join(["green garden house"] * 5)
    [cut] = next(sure.translate_nbest([TranslationRequest("the dog runs",
                                                          constraints=(term,))]))
    assert len(cut.tokens) == sure.max_len_limit and TOO_LONG in cut.degenerate
    assert cut.confidence == 0.0
    assert DEGENERATE_REASONS[TOO_LONG] in cut.confidence_reasons


def test_an_ensemble_gives_no_confidence(model_file, tmp_path):
    calibrated = with_calibration(model_file, tmp_path / "c.pt")
    assert Translator.from_files([calibrated, calibrated], OPTIONS).confidence is None
