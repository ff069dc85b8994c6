"""The safetensors model directory: a model as weights, JSON and a sentencepiece model.

What `nmt export --to safetensors` writes and every command that reads a model file also
reads (model_file.read_model_file hands a directory here):
  model.safetensors  the state dict; a tensor that several names share (tied embeddings)
                     is stored once, under its first name
  config.json        format, version, model_config, vocab_size, pad_id, the names that
                     share a stored tensor ("tied": {name: stored name}), the checksum
                     of the weights as model files have it (transformer_nmt.checksum;
                     tied names included, so that it equals the source model's), the
                     calibration when the model has one, and the source
                     model's record (preset, training steps, languages), which every
                     export writes and which carries its own version (EXPORT_FORMAT_VERSION)
  spm.model          the sentencepiece vocabulary
  spm.target.model   the target side's, where it has its own over the same ids
safetensors holds tensors only and JSON holds data only, so reading runs no code, as a
model file read with weights_only does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from transformer_nmt.checksum import CHECKSUM_KEY, payload_checksum
from transformer_nmt.errors import UserError
from transformer_nmt.files import check_format

DIR_FORMAT = "transformer-nmt-safetensors"
DIR_VERSION = 1
"""The version of this directory's layout: its files and the "tied" map."""
EXPORT_FORMAT_VERSION = 1
"""The version of the record that every export writes about its source model
(export/provenance.py), under EXPORT_VERSION_KEY: which fields it has and what they mean."""
EXPORT_VERSION_KEY = "export_format_version"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
VOCAB = "spm.model"
TARGET_VOCAB = "spm.target.model"


def _require_safetensors() -> None:
    try:
        import safetensors  # noqa: F401
    except ImportError:
        raise UserError("safetensors model directories need the safetensors package: "
                        "pip install 'transformer-nmt[safetensors]'") from None


def split_tied(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """(tensors to store, {name: stored name} for names sharing an earlier tensor's memory)."""
    stored: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    first_of: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in first_of:
            tied[name] = first_of[key]
        else:
            first_of[key] = name
            stored[name] = tensor.contiguous()
    return stored, tied


def write_model_dir(payload: dict[str, Any], directory: Path, record: dict[str, Any]) -> None:
    """Write a model-file payload into the existing, empty `directory`; `record` (the
    source model's preset, steps, languages) goes into config.json."""
    _require_safetensors()
    from safetensors.torch import save_file

    stored, tied = split_tied(payload["model"])
    save_file(stored, str(directory / WEIGHTS))
    config = {"format": DIR_FORMAT, "version": DIR_VERSION,
              "model_config": payload["model_config"], "vocab_size": payload["vocab_size"],
              "pad_id": payload["pad_id"], "tied": tied, **record}
    if payload.get("calibration") is not None:
        config["calibration"] = payload["calibration"]
    # What the directory holds, read back, is checksummed: the weights and calibration.
    config[CHECKSUM_KEY] = payload_checksum(payload)
    (directory / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (directory / VOCAB).write_bytes(payload["vocab"])
    if payload.get("target_vocab") is not None:
        (directory / TARGET_VOCAB).write_bytes(payload["target_vocab"])


def is_model_dir(path: Path) -> bool:
    """Whether `path` looks like a safetensors model directory (it has config.json)."""
    return path.is_dir() and (path / CONFIG).is_file()


def check_export_version(record: dict[str, Any], path: Path) -> None:
    """UserError in one line unless the export record in `record` (read from `path`) is of
    EXPORT_FORMAT_VERSION. A record without a version was written before exports recorded
    one, and is read as version 1."""
    version = {EXPORT_VERSION_KEY: record.get(EXPORT_VERSION_KEY, 1)}
    check_format(version, path, "transformer-nmt export", EXPORT_FORMAT_VERSION,
                 name_key=None, version_key=EXPORT_VERSION_KEY,
                 remedy="export the model again with this release, or install the release "
                        "that exported it")


def read_model_dir(directory: Path) -> dict[str, Any]:
    """A safetensors model directory as a model-file payload (the keys of
    model_file.model_payload, plus the record's and the checksum); UserError for a
    damaged one. Its fields and checksum are checked by model_file.read_model_file, the
    one reader that calls this, as a model file's are."""
    _require_safetensors()
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    remedy = "export one with `nmt export --to safetensors`"
    try:
        config = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{directory / CONFIG}: not valid JSON ({error}); {remedy}") from None
    check_format(config, directory / CONFIG, DIR_FORMAT, DIR_VERSION, remedy=remedy)
    check_export_version(config, directory / CONFIG)
    missing = [name for name in (WEIGHTS, VOCAB) if not (directory / name).is_file()]
    if missing or not isinstance(config.get("model_config"), dict):
        what = ", ".join(missing) if missing else "model_config in config.json"
        raise UserError(f"{directory}: damaged model directory (no {what}); {remedy}")
    try:
        state = load_file(str(directory / WEIGHTS))
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(f"{directory / WEIGHTS}: not a readable safetensors file "
                        f"({error}); {remedy}") from None
    for name, stored in (config.get("tied") or {}).items():
        if stored not in state:
            raise UserError(f"{directory / CONFIG}: {name} is tied to {stored}, which "
                            f"{WEIGHTS} does not hold; {remedy}")
        state[name] = state[stored]
    payload = {key: value for key, value in config.items()
               if key not in ("format", "version", "tied", EXPORT_VERSION_KEY)}
    payload.update(model=state, vocab=(directory / VOCAB).read_bytes())
    if (directory / TARGET_VOCAB).is_file():
        payload["target_vocab"] = (directory / TARGET_VOCAB).read_bytes()
    return payload
