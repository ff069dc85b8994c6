"""What `GET /v1/model` says about the served model: languages, architecture, size,
vocabulary, training steps and the BLEU recorded for it, all read from the model file and
the evaluation that `nmt evaluate` wrote beside it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from transformer_nmt.config import PRESETS, ModelConfig
from transformer_nmt.model_file import InferenceModel, model_languages

_TRAINING_ONLY = ("dropout", "attention_dropout", "activation_dropout", "max_positions")
"""ModelConfig fields that do not tell presets apart once a model is trained."""


def preset_name(cfg: ModelConfig) -> str | None:
    """The preset whose architecture `cfg` has, or None for a custom one."""
    for preset in PRESETS.values():
        same_training = {name: getattr(cfg, name) for name in _TRAINING_ONLY}
        if dataclasses.replace(preset.model, **same_training) == cfg:
            return preset.name
    return None


def training_steps(meta: dict[str, Any]) -> int | None:
    """The step of a checkpoint, or the newest step an average was made from."""
    if isinstance(meta.get("step"), int):
        return meta["step"]
    steps = [entry.get("step") for entry in meta.get("averaged_from") or []
             if isinstance(entry, dict)]
    steps = [step for step in steps if isinstance(step, int)]
    return max(steps) if steps else None


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


def model_card(inference_model: InferenceModel, precision: str) -> dict[str, Any]:
    """The description of a loaded model, as GET /v1/model returns it."""
    model = inference_model.model
    languages = model_languages(inference_model.payload_meta) or (None, None)
    evaluation = recorded_bleu(inference_model.path)
    return {
        "name": inference_model.path.name,
        "source_language": languages[0],
        "target_language": languages[1],
        "preset": preset_name(model.cfg),
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "vocabulary_size": len(inference_model.vocab),
        "training_steps": training_steps(inference_model.payload_meta),
        "bleu": evaluation["bleu"] if evaluation else None,
        "evaluation": evaluation,
        "precision": precision,
        "architecture": dataclasses.asdict(model.cfg),
    }
