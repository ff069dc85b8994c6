"""`nmt quickstart` end to end at a tiny scale: a few hundred pairs, the tiny preset, seconds."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import sacrebleu
import torch

from transformer_nmt import quickstart as quickstart_module
from transformer_nmt.cli import main
from transformer_nmt.config import get_preset
from transformer_nmt.decode.text.translator import Translation
from transformer_nmt.quickstart import (RECIPE, QuickstartOptions, _shorter_warmup, quickstart,
                                        recipe_lines, training_overrides)
from transformer_nmt.training.schedule import InverseSqrtSchedule

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "multi30k"
RAW = Path("data") / "task1" / "raw"
SIZES = {"train": 300, "val": 20, "test_2016_flickr": 20}


@pytest.fixture(scope="module")
def small_mirror(tmp_path_factory) -> Path:
    """A copy of the Multi30k repository layout holding the first few hundred pairs."""
    if not (SHARED / RAW).is_dir():
        pytest.skip("the Multi30k mirror is not available")
    mirror = tmp_path_factory.mktemp("mirror")
    (mirror / RAW).mkdir(parents=True)
    for split, size in SIZES.items():
        for lang in ("de", "en"):
            with gzip.open(SHARED / RAW / f"{split}.{lang}.gz", "rt", encoding="utf-8") as source:
                lines = [line for line, _ in zip(source, range(size))]
            with gzip.open(mirror / RAW / f"{split}.{lang}.gz", "wt", encoding="utf-8") as target:
                target.writelines(lines)
    return mirror


def raw_lines(mirror: Path, split: str, lang: str) -> list[str]:
    with gzip.open(mirror / RAW / f"{split}.{lang}.gz", "rt", encoding="utf-8") as source:
        return [line.rstrip("\n") for line in source]


def run_quickstart(mirror: Path, out: Path) -> int:
    return main(["quickstart", "--corpus", "multi30k", "--src", "de", "--tgt", "en",
                 "--mirror", str(mirror), "--out", str(out), "--preset", "tiny",
                 "--minutes", "0.25", "--batch-tokens", "400"])


def test_quickstart_runs_every_stage_and_reruns_without_starting_over(small_mirror, tmp_path,
                                                                      capsys):
    out = tmp_path / "qs"
    assert run_quickstart(small_mirror, out) == 0
    printed = capsys.readouterr().out
    for stage in range(1, 7):
        assert f"[{stage}/6]" in printed
    assert "BLEU" in printed and "chrF2" in printed
    # The reported scores are sacreBLEU's on the written hypotheses against the corpus's
    # own test references, line by line, and the printed table shows the same numbers.
    scores = json.loads((out / "model.eval-test.json").read_text())
    hypotheses = (out / "model.test.hyp").read_text(encoding="utf-8").splitlines()
    references = raw_lines(small_mirror, "test_2016_flickr", "en")
    assert len(hypotheses) == len(references) == scores["sentences"] == 20
    assert scores["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert scores["chrf"] > 0  # an empty output scores 0
    for metric, key in (("BLEU", "bleu"), ("chrF2", "chrf")):
        assert any(line.split()[:2] == [metric, f"{scores[key]:.2f}"]
                   for line in printed.splitlines())
    # Training beat an untrained model, which does worse than a uniform guess over the
    # vocabulary (nll > ln 8000 ≈ 8.99 on this data; ~6.8 after 15 s on 2 busy cores).
    vocab_size = json.loads((out / "run" / "config.json").read_text())["data"]["vocab_size"]
    metrics = [json.loads(line)
               for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    last_valid = [entry for entry in metrics if entry["event"] == "valid"][-1]
    assert last_valid["nll"] < math.log(vocab_size)
    pictures = sorted(p.name for p in (out / "attention").glob("*.png"))
    assert "overview-layer2.png" in pictures and len(pictures) == 3 * 2 + 1
    assert "nmt translate --model" in printed
    assert (out / "run" / "curves.png").stat().st_size > 0
    assert json.loads((out / "run" / "config.json").read_text())["train"]["batch_tokens"] == 400

    step_files = sorted((out / "run").glob("checkpoint_[0-9]*.pt"))
    assert run_quickstart(small_mirror, out) == 0
    again = capsys.readouterr()
    assert "already prepared" in again.out + again.err
    assert sorted((out / "run").glob("checkpoint_[0-9]*.pt")) == step_files


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
