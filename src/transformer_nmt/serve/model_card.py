"""What `GET /v1/model` says about the served model: languages, architecture, size,
vocabulary, training steps, the BLEU recorded for it and what its confidence was
calibrated on, all read from the model file and
the evaluation that `nmt evaluate` wrote beside it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from transformer_nmt.calibrate import calibration_summary
from transformer_nmt.config import ModelConfig, config_from_dict
from transformer_nmt.model_file import (InferenceModel, count_parameters, model_languages,
                                        model_preset, model_training_steps)


def recorded_bleu(model_path: Path) -> dict[str, Any] | None:
    """The newest evaluation `nmt evaluate` wrote beside the model (MODEL.eval-SPLIT.json):
    {'bleu', 'chrf', 'split'}, or None."""
    found = sorted(model_path.parent.glob(f"{model_path.stem}.eval-*.json"),
                   key=lambda path: path.stat().st_mtime)
    for path in reversed(found):
        try:
            scores = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(scores, dict) and isinstance(scores.get("bleu"), (int, float)):
            return {"bleu": round(scores["bleu"], 2), "chrf": scores.get("chrf"),
                    "split": scores.get("split")}
    return None


def model_card(inference_model: InferenceModel, precision: str | None) -> dict[str, Any]:
    """The description of a loaded model, as GET /v1/model returns it.

    Read from what the file stores, never from the network: a Translator converts the
    network in place (int8 replaces its linear layers), which must not change the card,
    and the precision it decodes in is given."""
    return file_card(inference_model.path, inference_model.payload_meta,
                     len(inference_model.vocab), precision)


def file_card(path: Path, meta: dict[str, Any], vocabulary_size: int,
              precision: str | None) -> dict[str, Any]:
    """The description of the model file at `path` from its stored fields (`meta`: the
    file's payload, weights and vocabulary included or not); `precision` None for a model
    not loaded yet."""
    architecture = config_from_dict(ModelConfig, meta["model_config"])
    languages = model_languages(meta) or (None, None)
    evaluation = recorded_bleu(path)
    return {
        "name": path.name,
        "source_language": languages[0],
        "target_language": languages[1],
        "preset": model_preset(meta)[0],
        "parameters": count_parameters(architecture, meta["vocab_size"]),
        "vocabulary_size": vocabulary_size,
        "training_steps": model_training_steps(meta),
        "bleu": evaluation["bleu"] if evaluation else None,
        "evaluation": evaluation,
        "precision": precision,
        "confidence": calibration_summary(meta),
        "architecture": dataclasses.asdict(architecture),
    }
