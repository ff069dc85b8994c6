"""The quickstart's recipe (quickstart.py): the shorter warmup, the recipe applied and
explained, the device given reaching every stage. (The whole command at a tiny scale:
tests/test_cli_quickstart.py.)"""

from __future__ import annotations

import pytest
import torch

from transformer_nmt import quickstart as quickstart_module
from transformer_nmt.config import get_preset
from transformer_nmt.decode.text.translator import Translation
from transformer_nmt.quickstart import (RECIPE, QuickstartOptions, _shorter_warmup, quickstart,
                                        recipe_lines, training_overrides)
from transformer_nmt.training.schedule import InverseSqrtSchedule


def test_the_shorter_warmup_reaches_the_presets_peak_learning_rate():
    preset = get_preset("small")
    settings = dict(_shorter_warmup(QuickstartOptions(preset="small", warmup=300)))
    assert int(settings["warmup_steps"]) == 300
    shorter = InverseSqrtSchedule(preset.model.d_model, 300, float(settings["lr_scale"]))
    original = InverseSqrtSchedule(preset.model.d_model, preset.train.warmup_steps,
                                   preset.train.lr_scale)
    assert shorter(300) == pytest.approx(original(preset.train.warmup_steps), rel=1e-5)
    assert _shorter_warmup(QuickstartOptions(preset="tiny", warmup=300)) == []  # already short


def test_the_recipe_is_applied_and_explained_and_the_users_settings_win():
    # The recipe's settings come after the preset's and before the user's, so a setting
    # given with --set replaces the recipe's, and the printed recipe no longer claims it.
    options = QuickstartOptions(preset="small")
    settings = dict(training_overrides(options))
    assert settings["dropout"] == "0.1" and get_preset("small").model.dropout == 0.3
    lines = recipe_lines(options)
    assert any(line.startswith("dropout 0.1 (the preset: 0.3): ") for line in lines)
    assert any(line.startswith("batch_tokens 2048 (the preset: 4096): ") for line in lines)
    assert any(line.startswith("warmup_steps 300 (the preset: 1000)") for line in lines)
    assert all(setting.why for setting in RECIPE)

    mine = QuickstartOptions(preset="small", overrides=[("dropout", "0.3")])
    assert dict(training_overrides(mine))["dropout"] == "0.3"
    assert not any(line.startswith("dropout") for line in recipe_lines(mine))
    # The tiny preset already trains with dropout 0.1: nothing to explain.
    assert not any(line.startswith("dropout") for line in recipe_lines(QuickstartOptions(preset="tiny")))


def test_the_device_given_reaches_evaluation_and_translation(tmp_path, monkeypatch):
    # This PyTorch is told it has a GPU; every stage is a fake that records its device.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **kwargs: True)
    devices = {}

    def evaluate_model(model_path, data_dir, split, options):
        devices["evaluation"] = torch.device(options.device)
        return {"speed": "fast", "json": tmp_path / "scores.json"}

    class Translator:
        model = vocab = None

        @classmethod
        def from_file(cls, path, options):
            devices["translation"] = torch.device(options.device)
            return cls()

        def translate_nbest(self, lines, **settings):
            return [[Translation(line.upper(), 0.0, [])] for line in lines]

    def calibrate(model_path, data_dir, split, options, log):
        devices["calibration"] = torch.device(options.device)

    monkeypatch.setattr(quickstart_module, "prepare", lambda *args, **kwargs: None)
    monkeypatch.setattr(quickstart_module, "_train", lambda *args: (None, tmp_path / "c.png"))
    monkeypatch.setattr(quickstart_module, "_average", lambda *args: [tmp_path / "a.pt"])
    monkeypatch.setattr(quickstart_module, "evaluate_model", evaluate_model)
    monkeypatch.setattr(quickstart_module, "calibrate", calibrate)
    monkeypatch.setattr(quickstart_module, "format_table", lambda scores: "")
    monkeypatch.setattr(quickstart_module, "Translator", Translator)
    monkeypatch.setattr(quickstart_module, "compute_attention", lambda *args: None)
    monkeypatch.setattr(quickstart_module, "write_attention_pictures",
                        lambda maps, out: [out / "overview.png"])
    result = quickstart(QuickstartOptions(out=tmp_path, device="cuda"), log=lambda text: None)
    assert {stage: device.type for stage, device in devices.items()} == {
        "calibration": "cuda", "evaluation": "cuda", "translation": "cuda"}
    assert result["translations"][0][1] == result["translations"][0][0].upper()
