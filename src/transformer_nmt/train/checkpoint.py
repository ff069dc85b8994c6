"""Checkpoint files: atomic writing, the model-file format, and loading for inference.

A checkpoint is a plain `torch.save` dict. Every file this project writes carries
FORMAT and VERSION so that a foreign or truncated file is refused with a clear error.
Keys of a model file (an averaged model or any training checkpoint):
  format, version, model (state dict), model_config (dict), vocab_size, pad_id,
  vocab (the sentencepiece model proto as bytes, so a model file is self-contained).
Training checkpoints add the optimizer, scheduler, sampler and RNG states (see trainer).

A run directory keeps numbered checkpoints `checkpoint_{step}.pt` (the newest
`keep_last`), `checkpoint_last.pt` (a hard link to the newest numbered one, so that it
costs no second copy) and `checkpoint_best.pt` (lowest validation loss). Every file
appears by an atomic rename, so a crash leaves the previous good file in place.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformer_nmt.config import ModelConfig, config_from_dict
from transformer_nmt.data.manifest import fsync_dir
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer

FORMAT = "transformer-nmt"
VERSION = 1
LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
_NUMBERED = re.compile(r"checkpoint_(\d+)\.pt")


def _umask() -> int:
    """The process's file mode creation mask (reading it means setting it: put it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_save(obj: Any, path: str | Path) -> None:
    """torch.save to a temporary file in the same directory, fsync, then rename over `path`.

    A crash at any moment leaves either the old file or the new one, never a torn file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); a model file gets the permissions of any
        # file the user creates, so that a group sharing a run directory can read it.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


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


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """RUN_DIR/checkpoint_{step}.pt."""
    return Path(run_dir) / f"checkpoint_{step}.pt"


def numbered_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint_{step}.pt in `run_dir`, oldest first."""
    found = []
    for path in Path(run_dir).glob("checkpoint_*.pt"):
        match = _NUMBERED.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def atomic_link(source: Path, target: Path) -> None:
    """Make `target` the same file as `source` (a hard link, or a copy where links are not
    supported), replacing any old `target` atomically."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def save_numbered(run_dir: str | Path, payload: dict[str, Any], step: int, keep_last: int) -> Path:
    """Write checkpoint_{step}.pt, point checkpoint_last.pt at it, and delete the numbered
    checkpoints older than the newest `keep_last` (0 keeps all). Returns the new path."""
    path = checkpoint_path(run_dir, step)
    atomic_save(payload, path)
    atomic_link(path, Path(run_dir) / LAST)
    if keep_last > 0:
        for _, old in numbered_checkpoints(run_dir)[:-keep_last]:
            old.unlink(missing_ok=True)
    return path


def rng_states() -> dict[str, Any]:
    """Every random generator's state: Python, NumPy, torch CPU and, if present, CUDA."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what `rng_states` returned (CUDA states only where CUDA is present)."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def checkpoints_to_average(inputs: list[str | Path], last: int | None) -> list[Path]:
    """The files `nmt average` should read: the `last` newest numbered checkpoints of a
    run directory, or the checkpoint files given (all of them, or their `last` newest)."""
    paths = [Path(item) for item in inputs]
    if not paths:
        raise UserError("give a run directory or checkpoint files to average")
    if len(paths) == 1 and paths[0].is_dir():
        numbered = [path for _, path in numbered_checkpoints(paths[0])]
        if not numbered:
            raise UserError(f"{paths[0]}: no checkpoint_<step>.pt files to average")
        if last is None:
            raise UserError(f"{paths[0]} is a run directory: say how many of its newest "
                            "checkpoints to average with --last N (paper: 5 base, 20 big)")
        if last > len(numbered):
            raise UserError(f"{paths[0]} holds {len(numbered)} numbered checkpoint(s), fewer "
                            f"than --last {last}; lower --last or keep more with --keep-last")
        return numbered[-last:]
    for path in paths:
        if path.is_dir():
            raise UserError(f"{path} is a directory; give either one run directory or files")
        if not path.exists():
            raise UserError(f"{path}: no such run directory or checkpoint file")
    if last is not None:
        if last > len(paths):
            raise UserError(f"--last {last} but only {len(paths)} checkpoint files given")
        paths = paths[-last:]
    return paths


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A model file whose weights are the mean of the checkpoints' weights.

    Every checkpoint must have the same architecture, vocabulary size and vocabulary;
    the result has the model-file keys only (no optimizer), plus 'averaged_from'.
    """
    first = read_checkpoint(paths[0])
    total = {name: tensor.double() for name, tensor in first["model"].items()
             if tensor.is_floating_point()}
    steps = [first.get("step")]
    for path in paths[1:]:
        payload = read_checkpoint(path)
        for key in ("model_config", "vocab_size"):
            if payload[key] != first[key]:
                detail = _first_difference(first[key], payload[key])
                raise UserError(f"cannot average {paths[0].name} and {path}: different "
                                f"architectures ({key}: {detail})")
        if payload["vocab"] != first["vocab"]:
            raise UserError(f"cannot average {paths[0].name} and {path}: different vocabularies")
        for name in total:
            total[name] += payload["model"][name].double()
        steps.append(payload.get("step"))
    state = dict(first["model"])
    for name, tensor in total.items():
        state[name] = (tensor / len(paths)).to(first["model"][name].dtype)
    model = build_model({**first, "model": state})
    result = model_payload(model, first["vocab"])
    result["averaged_from"] = [{"file": str(path), "step": step}
                               for path, step in zip(paths, steps)]
    return result


def _first_difference(old: Any, new: Any) -> str:
    """'field a -> b' for the first differing key of two config dicts, or 'a -> b'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return f"{key} {old.get(key)!r} vs {new.get(key)!r}"
    return f"{old!r} vs {new!r}"
