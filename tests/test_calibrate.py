"""The calibration (calibrate.py): the fit, its quality numbers, and the round trip
through the model file: fitted on a small model's own translations, stored, loaded, the
same confidence."""

from __future__ import annotations

import random
import shutil

import pytest

from transformer_nmt.calibrate import calibrate, fit_logistic, fit_quality
from transformer_nmt.data.manifest import text_path
from transformer_nmt.decode.quality.confidence import FEATURES, Calibration
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import read_model_file

OPTIONS = TranslatorOptions(workers=1, precision="fp32")
"""fp32: the tests compare confidences across runs, exactly."""


def test_the_fit_finds_the_feature_that_decides():
    rng = random.Random(0)
    rows = [[rng.gauss(0, 1), rng.gauss(5, 3)] for _ in range(400)]
    accepted = [row[0] + 0.3 * rng.gauss(0, 1) > 0 for row in rows]
    means, stds, coefficients, intercept = fit_logistic(rows, accepted)
    assert means[1] == pytest.approx(5, abs=0.5) and stds[1] == pytest.approx(3, abs=0.5)
    assert coefficients[0] > 3 and abs(coefficients[1]) < 0.5 and abs(intercept) < 0.5


def test_the_fit_quality_numbers():
    quality = fit_quality([0.9, 0.8, 0.3, 0.2], [True, True, False, False])
    assert quality["auc"] == 1 and quality["log_loss"] < quality["base_log_loss"]
    assert fit_quality([0.5, 0.5], [True, False])["auc"] == 0.5


def test_the_round_trip_fit_save_load_gives_the_same_confidence(trained_model_file,
                                                                tiny_data, tmp_path):
    model = tmp_path / "model.pt"
    shutil.copy(trained_model_file, model)
    fitted = calibrate(model, tiny_data, "valid", out=tmp_path / "calibrated.pt",
                       options=OPTIONS, log=lambda text: None)
    assert read_model_file(model).get("calibration") is None  # --out leaves the input be
    stored = read_model_file(tmp_path / "calibrated.pt")["calibration"]
    assert Calibration.from_dict(stored) == fitted and list(stored["features"]) == list(FEATURES)
    assert fitted.sentences == 24 and 0 < fitted.accepted < 1
    assert set(fitted.quality) == {"log_loss", "base_log_loss", "auc"}
    lines = text_path(tiny_data, "valid", "en").read_text(encoding="utf-8").splitlines()
    first = [found[0] for found in Translator.from_file(
        tmp_path / "calibrated.pt", OPTIONS).translate_nbest(lines)]
    again = [found[0] for found in Translator.from_file(
        tmp_path / "calibrated.pt", OPTIONS).translate_nbest(lines)]
    assert [t.confidence for t in first] == [t.confidence for t in again]
    assert all(0 <= t.confidence <= 1 for t in first)
    assert len({t.confidence for t in first}) > 1
    # Calibrating again, in place, replaces the calibration rather than stacking on it.
    calibrate(tmp_path / "calibrated.pt", tiny_data, "valid", options=OPTIONS,
              log=lambda text: None)
    assert Calibration.from_dict(read_model_file(tmp_path / "calibrated.pt")[
        "calibration"]) == fitted


def test_a_threshold_nobody_reaches_is_a_user_error(tiny_model_file, tiny_data, tmp_path):
    with pytest.raises(UserError, match="at least 5 on each side"):
        calibrate(tiny_model_file, tiny_data, "valid", out=tmp_path / "m.pt", threshold=100,
                  options=OPTIONS, log=lambda text: None)
    assert not (tmp_path / "m.pt").exists()
