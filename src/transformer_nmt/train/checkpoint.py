"""Checkpoint files: atomic writing, the model-file format, and loading for inference.

A checkpoint is a plain `torch.save` dict. Every file this project writes carries
FORMAT and VERSION so that a foreign or truncated file is refused with a clear error.
Keys of a model file (an averaged model or any training checkpoint):
  format, version, model (state dict), model_config (dict), vocab_size, pad_id,
  vocab (the sentencepiece model proto as bytes, so a model file is self-contained).
Training checkpoints add the optimizer, scheduler, sampler and RNG states (see trainer).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_nmt.config import ModelConfig, config_from_dict
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer

FORMAT = "transformer-nmt"
VERSION = 1


def atomic_save(obj: Any, path: str | Path) -> None:
    """torch.save to a temporary file in the same directory, fsync, then rename over `path`.

    A crash at any moment leaves either the old file or the new one, never a torn file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def model_payload(model: Transformer, vocab_bytes: bytes) -> dict[str, Any]:
    """The keys every model file holds: weights, architecture and vocabulary."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
        "model_config": dataclasses.asdict(model.cfg),
        "vocab_size": model.vocab_size,
        "pad_id": model.pad_id,
        "vocab": vocab_bytes,
    }


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint dict on the CPU, refusing missing, foreign or damaged files."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such model file; give a checkpoint_*.pt of a run "
                        "directory or a model written by `nmt average`")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises many types for a damaged or foreign file
        raise UserError(f"{path}: not a readable transformer-nmt model file ({error.__class__.__name__}: "
                        f"{str(error).splitlines()[0] if str(error) else 'unreadable'})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"{path}: not a transformer-nmt model file (a checkpoint of another "
                        "toolkit?); train one with `nmt train` or average with `nmt average`")
    if payload.get("version") != VERSION:
        raise UserError(f"{path}: model file version {payload.get('version')} is not supported "
                        f"by this release (expects {VERSION})")
    return payload


@dataclass
class InferenceModel:
    """A model ready to translate: the network in eval mode and its vocabulary."""

    model: Transformer
    vocab: Any
    """transformer_nmt.data.vocab.Vocab"""
    path: Path
    payload_meta: dict[str, Any]
    """Everything in the file except the weights and vocabulary (step, configs, ...)."""


def build_model(payload: dict[str, Any]) -> Transformer:
    """The Transformer a checkpoint payload describes, with its weights loaded."""
    cfg = config_from_dict(ModelConfig, payload["model_config"])
    model = Transformer(cfg, payload["vocab_size"], payload.get("pad_id", 0))
    model.load_state_dict(payload["model"])
    return model


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> InferenceModel:
    """Read a model file and return the model (eval mode, on `device`) with its vocabulary."""
    from transformer_nmt.data.vocab import Vocab

    payload = read_checkpoint(path)
    model = build_model(payload).to(device).eval()
    vocab = Vocab.from_bytes(payload["vocab"])
    meta = {key: value for key, value in payload.items() if key not in ("model", "vocab")}
    return InferenceModel(model, vocab, Path(path), meta)
