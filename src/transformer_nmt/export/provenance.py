"""What every export records about the model it came from: preset, steps, languages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from transformer_nmt import __version__
from transformer_nmt.config import PRESETS
from transformer_nmt.model_file import model_languages

EXPORT_FORMAT_VERSION = 1


def training_steps(meta: dict[str, Any]) -> int | None:
    """The optimizer steps behind a model file: a checkpoint's step, or for an average
    the step of its newest checkpoint (an export: what it recorded); None when the file
    does not say."""
    # A checkpoint's step; an export's record of its source's.
    for key in ("step", "training_steps"):
        if isinstance(meta.get(key), int):
            return meta[key]
    steps = [entry.get("step") for entry in meta.get("averaged_from") or []
             if isinstance(entry, dict) and isinstance(entry.get("step"), int)]
    return max(steps) if steps else None


def preset_of(meta: dict[str, Any]) -> tuple[str | None, str]:
    """(preset name, how it is known): a checkpoint records its preset; an average does
    not, so the preset whose architecture equals the model's is named, if one does."""
    if meta.get("preset"):
        return meta["preset"], "recorded in the model file"
    for name, preset in PRESETS.items():
        if dataclasses.asdict(preset.model) == meta["model_config"]:
            return name, "the preset whose architecture the model has"
    return None, "not recorded, and no preset has this architecture"


def provenance(meta: dict[str, Any], source: Path) -> dict[str, Any]:
    """The record of where an export came from: `meta` is a model file's payload without
    its weights and vocabulary (InferenceModel.payload_meta), `source` its path."""
    languages = model_languages(meta)
    preset, preset_from = preset_of(meta)
    record: dict[str, Any] = {
        "exported_by": f"transformer-nmt {__version__}",
        "source_model": source.name,
        "preset": preset,
        "preset_from": preset_from,
        "training_steps": training_steps(meta),
        "src_lang": languages[0] if languages else None,
        "tgt_lang": languages[1] if languages else None,
        "model_config": meta["model_config"],
    }
    if meta.get("averaged_from"):
        record["averaged_steps"] = [entry.get("step") for entry in meta["averaged_from"]]
    return record
