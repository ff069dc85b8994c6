"""The model file: its format and version, what it holds, writing, reading and loading.

A model file is a plain `torch.save` dict, read back with `weights_only=True`: tensors,
numbers, strings, bytes, lists, tuples and dicts only, so a file from elsewhere is data
and never code. Every file carries FORMAT and VERSION, so that a foreign or outdated file
is refused with a clear error. Keys of a model file (an averaged model or any training
checkpoint):
  format, version, model (state dict), model_config (dict), vocab_size, pad_id,
  vocab (the sentencepiece model proto as bytes, so that a model file is self-contained).
Training checkpoints add the optimizer, scheduler, sampler and RNG states
(see training/checkpoint.py). Translation, evaluation and training all read models here,
so that translating needs nothing of the trainer.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_nmt.config import ModelConfig, config_from_dict, preset_of_architecture
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.data.vocab_source import VocabSource, read_vocab_file_or_dir
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_write, check_format
from transformer_nmt.model_dir import is_model_dir, read_model_dir
from transformer_nmt.model.transformer import Transformer

FORMAT = "transformer-nmt"
VERSION = 1
_ZIP_MAGIC = b"PK\x03\x04"
"""How a file written by torch.save begins (a zip archive); a sentencepiece model never does."""
REQUIRED_KEYS = ("model", "model_config", "vocab_size", "vocab")
"""Keys without which a file cannot be a model, whatever its format tag says."""


def save_model_file(payload: dict[str, Any], path: str | Path) -> None:
    """torch.save `payload` to `path` atomically: a crash at any moment leaves either the
    old file or the new one, never a torn file."""
    atomic_write(path, lambda handle: torch.save(payload, handle))


def model_payload(model: Transformer, vocab_bytes: bytes,
                  languages: tuple[str, str] | None = None) -> dict[str, Any]:
    """The keys every model file holds: weights, architecture and vocabulary, and the
    (source, target) languages it translates when known (files from before they were
    recorded, and models not trained on a data directory, have none)."""
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "model": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
        "model_config": dataclasses.asdict(model.cfg),
        "vocab_size": model.vocab_size,
        "pad_id": model.pad_id,
        "vocab": vocab_bytes,
    }
    if languages is not None:
        payload["src_lang"], payload["tgt_lang"] = languages
    return payload


def model_languages(payload: dict[str, Any]) -> tuple[str, str] | None:
    """The (source, target) languages a model file records, or None."""
    if payload.get("src_lang") and payload.get("tgt_lang"):
        return payload["src_lang"], payload["tgt_lang"]
    return None


def model_training_steps(payload: dict[str, Any]) -> int | None:
    """The optimizer steps behind a model file: a checkpoint's step, an export's record
    of its source's, or for an average the step of its newest checkpoint; None when the
    file does not say."""
    for key in ("step", "training_steps"):
        if isinstance(payload.get(key), int):
            return payload[key]
    steps = [entry.get("step") for entry in payload.get("averaged_from") or []
             if isinstance(entry, dict) and isinstance(entry.get("step"), int)]
    return max(steps) if steps else None


def model_preset(payload: dict[str, Any]) -> tuple[str | None, str]:
    """(preset name, how it is known): a checkpoint records its preset; an older average
    does not, so the preset whose architecture the model has is named, if one has."""
    if payload.get("preset"):
        return payload["preset"], "recorded in the model file"
    name = preset_of_architecture(config_from_dict(ModelConfig, payload["model_config"]))
    if name is not None:
        return name, "the preset whose architecture the model has"
    return None, "not recorded, and no preset has this architecture"


def read_model_file(path: str | Path) -> dict[str, Any]:
    """Load a model file or checkpoint dict on the CPU, refusing missing, foreign,
    damaged or code-carrying files with a one-line UserError. A safetensors model
    directory (`nmt export --to safetensors`) is read as the same payload."""
    path = Path(path)
    if is_model_dir(path):
        return read_model_dir(path)
    if not path.is_file():
        raise UserError(f"{path}: no such model file; give a checkpoint_*.pt of a run "
                        "directory, a model written by `nmt average`, or a directory "
                        "written by `nmt export --to safetensors`")
    try:
        # weights_only: unpickling may only rebuild tensors and plain containers, so a
        # file whose pickle would run code is refused before anything runs.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # torch's own message would advise loading the file unrestricted, i.e. running
        # whatever its pickle holds: say what happened instead.
        raise UserError(f"{path}: not a readable transformer-nmt model file (damaged, or it "
                        "holds objects other than tensors and plain data, which are never "
                        "loaded)") from None
    except Exception as error:  # torch raises many types for a damaged or foreign file
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else "unreadable"
        raise UserError(f"{path}: not a readable transformer-nmt model file "
                        f"({error.__class__.__name__}: {first_line[:200]})") from None
    check_format(payload, path, FORMAT, VERSION,
                 remedy="train one with `nmt train` or average with `nmt average`")
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise UserError(f"{path}: damaged model file (no {', '.join(missing)}); use another "
                        "checkpoint of the run")
    return payload


def build_model(payload: dict[str, Any], source: str | Path = "model file") -> Transformer:
    """The Transformer a model-file payload describes, with its weights loaded; a
    UserError naming `source` if the weights do not fit the architecture it states."""
    cfg = config_from_dict(ModelConfig, payload["model_config"])
    model = Transformer(cfg, payload["vocab_size"], payload.get("pad_id", 0))
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, TypeError, AttributeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UserError(f"{source}: damaged model file: its weights do not fit its "
                        f"architecture ({first_line[:160]})") from None
    return model


@dataclass
class InferenceModel:
    """A model ready to translate: the network in eval mode and its vocabulary."""

    model: Transformer
    vocab: Vocab
    path: Path
    payload_meta: dict[str, Any]
    """Everything in the file except the weights and vocabulary (step, configs, ...)."""


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> InferenceModel:
    """Read a model file and return the model (eval mode, on `device`) with its vocabulary."""
    payload = read_model_file(path)
    model = build_model(payload, path).to(device).eval()
    vocab = Vocab.from_bytes(payload["vocab"])
    meta = {key: value for key, value in payload.items() if key not in ("model", "vocab")}
    return InferenceModel(model, vocab, Path(path), meta)


def vocab_source(path: str | Path) -> VocabSource:
    """The vocabulary to reuse from `path`: a model file or checkpoint (its embedded
    sentencepiece model), a data directory of `nmt prepare`, or a sentencepiece .model
    file; UserError naming `path` for anything else."""
    path = Path(path)
    if path.is_file():
        with open(path, "rb") as handle:
            is_torch_file = handle.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
        if is_torch_file:
            source = VocabSource(read_model_file(path)["vocab"], "model file",
                                 str(path.resolve()))
            source.vocab()
            return source
    return read_vocab_file_or_dir(path)
