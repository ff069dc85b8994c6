"""What every export records about the model it came from: preset, steps, languages, and
the checksum of its weights (None for a file written before model files recorded one).

The record goes into every export (CTranslate2's transformer_nmt.json, an Argos package's
metadata.json, a safetensors directory's config.json) with the version of its format,
which the reader of exported models (model_dir.py) checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_nmt.checksum import CHECKSUM_KEY
from transformer_nmt.model_dir import EXPORT_FORMAT_VERSION, EXPORT_VERSION_KEY
from transformer_nmt.model_file import model_languages, model_preset, model_training_steps
from transformer_nmt.version import __version__


def provenance(meta: dict[str, Any], source: Path) -> dict[str, Any]:
    """The record of where an export came from: `meta` is a model file's payload without
    its weights and vocabulary (InferenceModel.payload_meta), `source` its path."""
    languages = model_languages(meta)
    preset, preset_from = model_preset(meta)
    record: dict[str, Any] = {
        EXPORT_VERSION_KEY: EXPORT_FORMAT_VERSION,
        "exported_by": f"transformer-nmt {__version__}",
        "source_model": source.name,
        "source_checksum": meta.get(CHECKSUM_KEY),
        "preset": preset,
        "preset_from": preset_from,
        "training_steps": model_training_steps(meta),
        "src_lang": languages[0] if languages else None,
        "tgt_lang": languages[1] if languages else None,
        "model_config": meta["model_config"],
    }
    if meta.get("averaged_from"):
        record["averaged_steps"] = [entry.get("step") for entry in meta["averaged_from"]]
    return record
