"""What GET /v1/model says (serve/model_card.py)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from transformer_nmt.config import get_preset
from transformer_nmt.config import preset_of_architecture as preset_name
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.model_file import model_training_steps as training_steps
from transformer_nmt.serve.model_card import model_card, recorded_bleu


def test_a_preset_is_recognised_whatever_its_dropout():
    base = get_preset("base").model
    assert preset_name(base) == "base"
    assert preset_name(replace(base, dropout=0.3, attention_dropout=0.1)) == "base"
    assert preset_name(replace(base, d_ff=1000)) is None
    # The positions bound the inputs and size a learned table: part of the architecture.
    assert preset_name(replace(base, max_positions=256)) is None


def test_training_steps_of_a_checkpoint_and_of_an_average():
    assert training_steps({"step": 42}) == 42
    assert training_steps({"averaged_from": [{"step": 10}, {"step": 30}, {"step": 20}]}) == 30
    assert training_steps({}) is None


def test_the_newest_evaluation_beside_the_model_gives_its_bleu(tmp_path):
    model = tmp_path / "model.pt"
    assert recorded_bleu(model) is None
    (tmp_path / "model.eval-valid.json").write_text(json.dumps({"bleu": 9.0, "split": "valid"}))
    newer = tmp_path / "model.eval-test.json"
    newer.write_text(json.dumps({"bleu": 12.345, "chrf": 40.0, "split": "test"}))
    os.utime(newer, (2e9, 2e9))
    (tmp_path / "other.eval-test.json").write_text(json.dumps({"bleu": 99}))
    assert recorded_bleu(model) == {"bleu": 12.35, "chrf": 40.0, "split": "test"}


def test_the_card_of_a_model_without_languages_or_evaluation(model_file):
    card = model_card(load_for_inference(model_file), "int8")
    assert card["source_language"] is None and card["bleu"] is None
    assert card["precision"] == "int8" and card["preset"] == "tiny"
    assert card["architecture"]["d_model"] == get_preset("tiny").model.d_model


def test_the_card_is_the_same_before_and_after_a_translator_converts_the_model(model_file):
    inference_model = load_for_inference(model_file)
    float_parameters = sum(p.numel() for p in inference_model.model.parameters())
    before = model_card(inference_model, "int8")
    Translator(inference_model, TranslatorOptions(precision="int8"))  # converts in place
    assert sum(p.numel() for p in inference_model.model.parameters()) != float_parameters
    assert model_card(inference_model, "int8") == before
    assert before["parameters"] == float_parameters
