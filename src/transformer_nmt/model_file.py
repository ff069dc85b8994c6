"""The model file: its format and version, what it holds, writing, reading and loading.

A model file is a plain `torch.save` dict, read back with `weights_only=True`: tensors,
numbers, strings, bytes, lists, tuples and dicts only, so a file from elsewhere is data
and never code. Every file carries FORMAT and VERSION, so that a foreign or outdated file
is refused with a clear error. Keys of a model file (an averaged model or any training
checkpoint):
  format, version, model (state dict), model_config (dict), vocab_size, pad_id,
  vocab (the sentencepiece model proto as bytes, so that a model file is self-contained),
  target_vocab (only where the target side has a sentencepiece model of its own over the
  same ids: an imported model's; see data/vocab.py),
  checksum (SHA-256 of the weights, see transformer_nmt.checksum; added by
  save_model_file, so that every writer stores one).
A model imported from another toolkit (`nmt import`) adds imported_from: its format,
model type, path and licence.
Training checkpoints add the optimizer, scheduler, sampler and RNG states (see
training/checkpoint.py). Translation, evaluation, export and training all read models
here, so that translating needs nothing of the trainer, and every reader goes through
read_model_file, whose `check_model_fields` is the one validation of these fields: a file
(or safetensors directory) that fails it is refused in one line before anything else
reads it.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from transformer_nmt.checksum import CHECKSUM_KEY, payload_checksum, verify_checksum
from transformer_nmt.config import ModelConfig, config_from_dict, preset_of_architecture
from transformer_nmt.data.bpe_vocab import BpeVocab, is_bpe_vocab
from transformer_nmt.data.stored_vocab import read_vocab
from transformer_nmt.data.vocab import PAD_ID, Vocab
from transformer_nmt.data.vocab_source import VocabSource, read_vocab_file_or_dir, vocab_digest
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_write, check_format
from transformer_nmt.model_dir import DIR_FORMAT, DIR_VERSION, is_model_dir, read_model_dir
from transformer_nmt.model.transformer import Transformer

FORMAT = "transformer-nmt"
VERSION = 1
_ZIP_MAGIC = b"PK\x03\x04"
"""How a file written by torch.save begins (a zip archive); a sentencepiece model never does."""
FIELD_TYPES = {"model": dict, "model_config": dict, "vocab_size": int, "pad_id": int,
               "vocab": bytes}
"""The keys without which a file cannot be a model, whatever its format tag says, and
the type of each."""
_DAMAGED_REMEDY = "use another checkpoint of the run, or copy the file again"


def save_model_file(payload: dict[str, Any], path: str | Path) -> None:
    """torch.save `payload` to `path` atomically: a crash at any moment leaves either the
    old file or the new one, never a torn file. A payload with weights gets a fresh
    checksum of them (and of its calibration), whoever wrote it and whatever it held."""
    if "model" in payload:
        payload = {**payload, CHECKSUM_KEY: payload_checksum(payload)}
    atomic_write(path, lambda handle: torch.save(payload, handle))


def model_payload(model: Transformer, vocab_bytes: bytes,
                  languages: tuple[str, str] | None = None,
                  target_vocab: bytes | None = None) -> dict[str, Any]:
    """The keys every model file holds: weights, architecture and vocabulary (and the
    target side's sentencepiece model where it has one, `Vocab.target_bytes`), and the
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
    if target_vocab is not None:
        payload["target_vocab"] = target_vocab
    if languages is not None:
        payload["src_lang"], payload["tgt_lang"] = languages
    return payload


def payload_vocab(payload: dict[str, Any], source: str = "embedded vocabulary"
                  ) -> Vocab | BpeVocab:
    """The vocabulary a model-file payload holds (both sides' where it has two)."""
    return read_vocab(payload["vocab"], source, payload.get("target_vocab"))


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
    damaged or code-carrying files, and files whose weights do not match their checksum,
    with a one-line UserError. A safetensors model directory (`nmt export --to
    safetensors`) is read as the same payload."""
    path = Path(path)
    if is_model_dir(path):
        payload = read_model_dir(path)
    else:
        payload = _load_torch_file(path)
        check_format(payload, path, FORMAT, VERSION,
                     remedy="train one with `nmt train` or average with `nmt average`")
    check_model_fields(payload, path)
    return payload


def _load_torch_file(path: Path) -> Any:
    """What torch.load reads from `path`, as data only; UserError for a missing, damaged
    or code-carrying file."""
    if not path.is_file():
        raise UserError(f"{path}: no such model file; give a checkpoint_*.pt of a run "
                        "directory, a model written by `nmt average`, or a directory "
                        "written by `nmt export --to safetensors`")
    try:
        # weights_only: unpickling may only rebuild tensors and plain containers, so a
        # file whose pickle would run code is refused before anything runs.
        return torch.load(path, map_location="cpu", weights_only=True)
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


def check_model_fields(payload: dict[str, Any], source: str | Path) -> None:
    """The one validation of a model file's fields, whichever file or directory they were
    read from (`source`): every required key present and of its type, weights that are
    named tensors, an architecture this release builds, a complete vocabulary of the
    size and padding id the model states, and weights that match their checksum.
    A one-line UserError naming `source` for the first that fails."""
    missing = [key for key in FIELD_TYPES if key not in payload]
    if missing:
        raise UserError(f"{source}: damaged model file (no {', '.join(missing)}); "
                        f"{_DAMAGED_REMEDY}")
    for key, kind in FIELD_TYPES.items():
        value = payload[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{source}: damaged model file ({key} is {type(value).__name__}, "
                            f"not {kind.__name__}); {_DAMAGED_REMEDY}")
    if not all(isinstance(name, str) and isinstance(tensor, torch.Tensor)
               for name, tensor in payload["model"].items()):
        raise UserError(f"{source}: damaged model file (its weights are not all named "
                        f"tensors); {_DAMAGED_REMEDY}")
    try:
        config_from_dict(ModelConfig, payload["model_config"])
    except (UserError, TypeError, ValueError) as error:
        raise UserError(f"{source}: damaged model file (model_config: {error})") from None
    if not isinstance(payload.get("target_vocab", b""), bytes):
        raise UserError(f"{source}: damaged model file (target_vocab is not bytes); "
                        f"{_DAMAGED_REMEDY}")
    vocab = payload_vocab(payload, f"{source}: its vocabulary")
    if len(vocab) != payload["vocab_size"] or payload["pad_id"] != PAD_ID:
        raise UserError(f"{source}: damaged model file (vocab_size {payload['vocab_size']} "
                        f"and pad_id {payload['pad_id']}, but its vocabulary has "
                        f"{len(vocab)} pieces and pads with {PAD_ID}); {_DAMAGED_REMEDY}")
    # Files written before checksums were recorded have none and load unverified; they
    # are verified from the time they are saved again (save_model_file adds one).
    verify_checksum(payload, source)


def build_model(payload: dict[str, Any], source: str | Path = "model file") -> Transformer:
    """The Transformer a model-file payload describes, with its weights loaded; a
    UserError naming `source` if the weights do not fit the architecture it states."""
    cfg = config_from_dict(ModelConfig, payload["model_config"])
    model = Transformer(cfg, payload["vocab_size"], payload["pad_id"])
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
    vocab: Vocab | BpeVocab
    path: Path
    payload_meta: dict[str, Any]
    """Everything in the file except the weights and vocabulary (step, configs, ...)."""


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> InferenceModel:
    """Read a model file and return the model (eval mode, on `device`) with its vocabulary."""
    return inference_model_of(read_model_file(path), path, device)


def inference_model_of(payload: dict[str, Any], path: str | Path,
                       device: str | torch.device = "cpu") -> InferenceModel:
    """The model of a payload `read_model_file` read from `path`, as load_for_inference
    gives it."""
    model = build_model(payload, path).to(device).eval()
    vocab = payload_vocab(payload)
    meta = {key: value for key, value in payload.items()
            if key not in ("model", "vocab", "target_vocab")}
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
            payload = read_model_file(path)
            source = VocabSource(payload["vocab"], "model file", str(path.resolve()),
                                 payload.get("target_vocab"))
            source.vocab()
            return source
    return read_vocab_file_or_dir(path)


def _architecture_line(payload: dict[str, Any]) -> str:
    cfg = config_from_dict(ModelConfig, payload["model_config"])
    preset, preset_from = model_preset(payload)
    layers = (str(cfg.encoder_layers) if cfg.encoder_layers == cfg.decoder_layers
              else f"{cfg.encoder_layers}+{cfg.decoder_layers}")
    return (f"{preset or 'no preset'} ({preset_from}): N={layers} d_model={cfg.d_model} "
            f"d_ff={cfg.d_ff} h={cfg.heads} d_k={cfg.d_k} d_v={cfg.d_v}, {cfg.positional} "
            f"positions{'' if cfg.tie_positions else ' (a table per stack)'} up to "
            f"{cfg.max_positions}, {'pre' if cfg.pre_norm else 'post'}-norm, "
            f"{cfg.activation} FFN, tied embeddings: {cfg.tie_embeddings}"
            f"{', logits bias' if cfg.logits_bias else ''}"
            f"{'' if cfg.scale_embeddings else ', unscaled embeddings'}")


def _vocabulary_line(payload: dict[str, Any]) -> str:
    target = payload.get("target_vocab")
    kind = ("Moses tokens and BPE codes" if is_bpe_vocab(payload["vocab"])
            else "sentencepiece")
    sides = ("shared by both languages" if target is None else
             f"one id space, {kind} for each side")
    return (f"{payload['vocab_size']} pieces, {sides} ({kind}, sha256 "
            f"{vocab_digest(payload['vocab'], target)[:16]})")


def describe_model(path: str | Path) -> list[tuple[str, str]]:
    """What `nmt info` shows of a model file, checkpoint or safetensors directory, as
    (label, value) rows. The file is read as every command reads it, so a damaged one is
    refused and the checksum shown is one that was verified."""
    path = Path(path)
    payload = read_model_file(path)
    if is_model_dir(path):
        kind = f"safetensors model directory ({DIR_FORMAT} version {DIR_VERSION})"
    else:
        what = "training checkpoint" if "trainer" in payload else "model file"
        if payload.get("averaged_from"):
            what += f", the average of {len(payload['averaged_from'])} checkpoints"
        kind = f"{what} ({FORMAT} version {VERSION})"
    languages = model_languages(payload)
    steps = model_training_steps(payload)
    parameters = count_parameters(config_from_dict(ModelConfig, payload["model_config"]),
                                  payload["vocab_size"])
    checksum = payload.get(CHECKSUM_KEY)
    imported = payload.get("imported_from")
    origin = [("imported from", _origin_line(imported))] if isinstance(imported, dict) else []
    return [
        ("file", str(path)),
        ("format", kind),
        ("architecture", _architecture_line(payload)),
        ("vocabulary", _vocabulary_line(payload)),
        ("languages", " -> ".join(languages) if languages else "not recorded"),
        ("training steps", str(steps) if steps is not None else "not recorded"),
        ("parameters", f"{parameters:,} ({parameters / 1e6:.1f}M)"),
        ("checksum", f"{checksum} (verified)" if checksum else
                     "none (written before model files recorded one; not verified until "
                     "saved again)"),
        *origin,
    ]


def _origin_line(imported: dict[str, Any]) -> str:
    """Where an imported model came from, and its licence as the source declared it."""
    licence = imported.get("license") or "not declared by the source"
    return (f"{imported.get('format')} {imported.get('model_type')} model "
            f"{imported.get('path')} (licence: {licence})")


def count_parameters(cfg: ModelConfig, vocab_size: int) -> int:
    """Exact number of trainable parameters of `cfg` at `vocab_size`, shared tensors once,
    counted on parameters of the meta device, so that even the big model costs no memory."""
    with _ParametersOnMeta():
        model = Transformer(cfg, vocab_size)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class _ParametersOnMeta(TorchFunctionMode):
    """torch.empty, with which modules make their parameters, on the meta device, where
    they hold no values; normal_ of a meta tensor a no-op. Not `torch.device("meta")`:
    that puts every tensor there, and PyTorch computes some meta ops (arange, for the
    sinusoids; normal_) in Python code that imports torch._dynamo on first use, seconds
    of a command's start (`nmt serve`'s model cards count parameters). Modes are per
    thread: no other thread is touched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty:
            return func(*args, **{**kwargs, "device": "meta"})
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            tensor = args[0] if args else kwargs["tensor"]  # init.normal_ passes a keyword
            if tensor.is_meta:
                return tensor
        return func(*args, **kwargs)
