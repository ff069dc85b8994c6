"""The run directory: which configuration a run uses, and whether to start, resume or refuse.

A configuration is composed, later sources winning: the preset, a --config JSON file,
--set FIELD=VALUE assignments, the dedicated flags (--max-steps ...). RUN_DIR/config.json
records the result with the data directory's digest and one entry per session. Training
into a directory that already holds a run resumes it when nothing but the fields that
TrainConfig marks as changeable on resume differ (config.CHANGEABLE_ON_RESUME, and
config.BATCH_SPLIT while the global batch is batch_tokens), and is refused naming the
difference otherwise; a non-empty directory without a run's config.json is never written
into.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

from transformer_nmt.version import __version__
from transformer_nmt.config import (BATCH_SPLIT, CHANGEABLE_ON_RESUME, ModelConfig,
                                    TrainConfig, config_from_dict, differences, get_preset)
from transformer_nmt.data.manifest import SPM_MODEL, read_manifest
from transformer_nmt.fields import parse_duration  # noqa: F401  (re-exported for callers)
from transformer_nmt.fields import parse_text
from transformer_nmt.files import write_json_atomic
from transformer_nmt.errors import UserError
from transformer_nmt.training.batch_size import fixes_batch_per_process
from transformer_nmt.training.checkpoint import LAST, numbered_checkpoints
from transformer_nmt.training.init_from import (FINETUNE_LR_PEAK, FINETUNE_WARMUP,
                                             check_init_architecture, check_init_vocab,
                                             read_init_model)
from transformer_nmt.training.run_lock import LOCK_FILE

RUN_FORMAT = "transformer-nmt-run"
RUN_VERSION = 1
CONFIG_FILE = "config.json"

_VOLATILE_MANIFEST_KEYS = ("created", "command", "seconds", "transformer_nmt_version")


def parse_assignment(text: str) -> tuple[str, str]:
    """'FIELD=VALUE' -> (field, value), dashes in the field name read as underscores."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UserError(f"a setting is FIELD=VALUE (e.g. dropout=0.2), not {text!r}")
    return name.strip().replace("-", "_"), value.strip()


def _convert(cls: type, name: str, value: Any) -> Any:
    """`value` as field `name` of `cls` holds it: a string from the command line is read
    as the field's type (see fields.parse_text), a typed value is kept."""
    return parse_text(cls, name, value) if isinstance(value, str) else value


def apply_overrides(model: ModelConfig, train: TrainConfig,
                    overrides: Iterable[tuple[str, Any]]) -> tuple[ModelConfig, TrainConfig]:
    """`model` and `train` with fields replaced, in order; unknown fields are a UserError."""
    model_fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    model_changes: dict[str, Any] = {}
    train_changes: dict[str, Any] = {}
    for name, value in overrides:
        if name in model_fields:
            model_changes[name] = _convert(ModelConfig, name, value)
        elif name in train_fields:
            train_changes[name] = _convert(TrainConfig, name, value)
        else:
            raise UserError(f"unknown setting {name!r}; model settings: "
                            f"{', '.join(model_fields)}; training settings: "
                            f"{', '.join(train_fields)}")
    return (dataclasses.replace(model, **model_changes),
            dataclasses.replace(train, **train_changes))


def data_digest(data_dir: str | Path) -> str:
    """SHA-256 of what a data directory holds: its manifest (less when and how it was
    made) and its BPE model. Preparing the same corpus the same way gives the same digest."""
    manifest = read_manifest(data_dir)
    for key in _VOLATILE_MANIFEST_KEYS:
        manifest.pop(key, None)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode())
    digest.update((Path(data_dir) / SPM_MODEL).read_bytes())
    return digest.hexdigest()


@dataclass
class RunPlan:
    """What `nmt train` is about to do, decided before any file is written."""

    run_dir: Path
    data_dir: Path
    preset: str
    model: ModelConfig
    train: TrainConfig
    data_digest: str
    resume_from: Path | None
    """The checkpoint to continue from; None starts a new run."""
    record: dict[str, Any]
    """config.json as it will be written (the trainer adds this session's entry)."""


def read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/config.json, None for an empty or missing directory; UserError for a
    directory that holds something else."""
    path = run_dir / CONFIG_FILE
    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is a file, not a run directory; choose another run directory")
    if not path.exists():
        if any(path.name != LOCK_FILE for path in run_dir.iterdir()):
            raise UserError(f"{run_dir} is not empty and holds no transformer-nmt run (no "
                            f"{CONFIG_FILE}); choose a new or empty run directory")
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable run configuration ({error})") from None
    if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
        raise UserError(f"{path} is not a transformer-nmt run configuration; "
                        "choose a new or empty run directory")
    if record.get("version") != RUN_VERSION:
        raise UserError(f"{path}: run format version {record.get('version')} is not "
                        f"supported by this release (expects {RUN_VERSION})")
    return record


def _train_record(stored: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig fields of a run's config.json. Runs from before batch_tokens fixed
    the batch per process, so their global batch was processes x update_freq x
    max_tokens; that batch with max_tokens as the cap plans the same batches on as many
    processes, and lets the run go on with others."""
    train = dict(stored["train"])
    if "batch_tokens" not in train:
        processes = (stored.get("sessions") or [{}])[-1].get("world_size", 1)
        train.update(batch_tokens=processes * train["update_freq"] * train["max_tokens"],
                     update_freq=0)
    return train


def _read_config_file(path: Path) -> dict[str, Any]:
    """A --config file: JSON with any of 'preset', 'model', 'train' (a run's config.json)."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such configuration file") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a JSON configuration ({error})") from None
    if not isinstance(values, dict) or not {"preset", "model", "train"} & set(values):
        raise UserError(f"{path}: a configuration file is a JSON object with 'preset', "
                        "'model' and/or 'train' keys (a run's config.json is one)")
    for key in ("model", "train"):
        if not isinstance(values.get(key, {}), dict):
            raise UserError(f"{path}: '{key}' must be an object of field: value")
    return values


def may_hold_run(run_dir: Path) -> bool:
    """Whether `run_dir` is a place a run may be written: missing, empty, or holding a
    run. Anything else (a file, a directory of other things) is refused by `plan_run`
    and must not even get a lock file."""
    if not run_dir.exists():
        return True
    return run_dir.is_dir() and ((run_dir / CONFIG_FILE).exists() or all(
        path.name == LOCK_FILE for path in run_dir.iterdir()))


def resume_candidates(run_dir: Path) -> list[Path]:
    """The checkpoints a run directory could continue from, newest first:
    checkpoint_last.pt, then the numbered ones that are not the same file (last, best and
    the newest numbered checkpoint are hard links to one file: a damaged one is damaged
    in all three, and older numbered checkpoints are the fallback)."""
    candidates = [run_dir / LAST] if (run_dir / LAST).is_file() else []
    for _, path in reversed(numbered_checkpoints(run_dir)):
        if not any(os.path.samefile(path, other) for other in candidates):
            candidates.append(path)
    return candidates


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run directory continues from: checkpoint_last.pt, else the newest
    numbered one, else None (the session falls back to older ones that can be read)."""
    candidates = resume_candidates(run_dir)
    return candidates[0] if candidates else None


def plan_run(*, out: str | Path | None, resume: str | Path | None, data: str | Path | None,
             preset: str | None, config_file: str | Path | None,
             overrides: Iterable[tuple[str, Any]], init_from: str | Path | None = None
             ) -> RunPlan:
    """Decide the run directory, data, configuration and starting checkpoint.

    out: the run directory of a new run, or of one to continue if it holds the same run;
    resume: a run directory to continue (its config.json gives what is not overridden);
    init_from: a model file whose weights start a new run (also the TrainConfig field
    init_from). A new run from a model takes the model's architecture and regime unless
    a preset or config file is given, with FINETUNE_WARMUP and FINETUNE_LR_PEAK unless
    set, and is refused if the data's vocabulary or the architecture is not the model's.
    """
    overrides = list(overrides)
    if init_from is not None:
        overrides.append(("init_from", str(init_from)))
    requested = [value for name, value in overrides if name == "init_from"]
    if requested and requested[-1]:
        # One spelling of the path, so that rerunning from another directory is the same run.
        overrides.append(("init_from", str(Path(requested[-1]).resolve())))
    if resume is not None and out is not None and Path(resume).resolve() != Path(out).resolve():
        raise UserError(f"resume {resume} and out {out} name different run directories; "
                        "give one of them")
    run_dir = Path(resume if resume is not None else out) if (resume or out) else None
    if run_dir is None:
        raise UserError("say where the run goes (out, a run directory) or which run to "
                        "continue (resume)")
    stored = read_run_config(run_dir)
    if resume is not None and stored is None:
        raise UserError(f"{run_dir} holds no run to resume (no {CONFIG_FILE}); start one with "
                        "prepared data and a new run directory")

    file_values = _read_config_file(Path(config_file)) if config_file else {}
    init = read_init_model(requested[-1]) if requested and requested[-1] and stored is None \
        else None
    preset_name = (preset or file_values.get("preset") or (stored or {}).get("preset")
                   or (init.preset if init else None) or "base")
    if stored is not None and not preset and not config_file:
        model = config_from_dict(ModelConfig, stored["model"])
        train = config_from_dict(TrainConfig, _train_record(stored))
    elif init is not None and not preset and not config_file:
        model = init.model()
        train = init.train() or get_preset(preset_name).train
    else:
        chosen = get_preset(preset_name)
        model, train = chosen.model, chosen.train
        model = config_from_dict(ModelConfig, {**dataclasses.asdict(model),
                                               **file_values.get("model", {})})
        train = config_from_dict(TrainConfig, {**dataclasses.asdict(train),
                                               **file_values.get("train", {})})
    if init is not None:
        regime = file_values.get("train", {})
        train = dataclasses.replace(
            train, warmup_steps=regime.get("warmup_steps", FINETUNE_WARMUP),
            lr_peak=regime.get("lr_peak", FINETUNE_LR_PEAK))
    model, train = apply_overrides(model, train, overrides)

    if data is None:
        if stored is None:
            raise UserError("say which prepared data directory to train on (data)")
        data = stored["data"]["dir"]
    data_dir = Path(data).resolve()
    digest = data_digest(data_dir)
    manifest = read_manifest(data_dir)

    resume_from = None
    if stored is not None:
        old_model = config_from_dict(ModelConfig, stored["model"])
        old_train = config_from_dict(TrainConfig, _train_record(stored))
        changeable = CHANGEABLE_ON_RESUME
        if not any(fixes_batch_per_process(cfg.max_tokens, cfg.update_freq)
                   for cfg in (old_train, train)):
            changeable |= BATCH_SPLIT
        changes = differences({**dataclasses.asdict(old_model), **dataclasses.asdict(old_train)},
                              {**dataclasses.asdict(model), **dataclasses.asdict(train)},
                              skip=changeable)
        if stored.get("preset") != preset_name and (preset or config_file):
            changes.insert(0, f"preset {stored.get('preset')!r} -> {preset_name!r}")
        if changes:
            raise UserError(f"{run_dir} holds a run with another configuration ("
                            f"{'; '.join(changes)}); continue it without these changes, or "
                            "train into a new run directory")
        if stored["data"]["digest"] != digest:
            raise UserError(f"{run_dir} was trained on other data ({stored['data']['dir']}, "
                            f"digest {stored['data']['digest'][:12]}) than {data_dir} (digest "
                            f"{digest[:12]}); resume with the same prepared data, or train "
                            "into a new run directory")
        resume_from = resume_checkpoint(run_dir)
    if init is not None:
        check_init_architecture(init.path, init.model_config, model)
        check_init_vocab(init.path, init.vocab_sha256, data_dir)

    record = {
        "format": RUN_FORMAT,
        "version": RUN_VERSION,
        "preset": preset_name,
        "model": dataclasses.asdict(model),
        "train": dataclasses.asdict(train),
        "data": {"dir": str(data_dir), "digest": digest, "src_lang": manifest["src_lang"],
                 "tgt_lang": manifest["tgt_lang"], "vocab_size": manifest["vocab"]["size"]},
        "sessions": list((stored or {}).get("sessions", [])),
    }
    started_from = init.record() if init is not None else (stored or {}).get("init_from")
    if started_from is not None:
        record["init_from"] = started_from
    return RunPlan(run_dir, data_dir, preset_name, model, train, digest, resume_from, record)


def check_checkpoint(checkpoint: dict[str, Any], plan: RunPlan, vocab_size: int) -> None:
    """UserError unless `checkpoint` (read from plan.resume_from) is a training checkpoint
    of this run's model and data, whose vocabulary has `vocab_size` pieces."""
    where = plan.resume_from
    if "trainer" not in checkpoint:
        raise UserError(f"{where} is a model file without training state; it cannot be resumed")
    if checkpoint.get("data_digest") != plan.data_digest:
        raise UserError(f"{where} was trained on other data (digest "
                        f"{str(checkpoint.get('data_digest'))[:12]}, now "
                        f"{plan.data_digest[:12]}); resume with the same prepared data")
    model_cfg = plan.record["model"]
    for key, value in checkpoint["model_config"].items():
        if model_cfg.get(key) != value:
            raise UserError(f"{where} holds another architecture ({key} {value!r}, the run "
                            f"config says {model_cfg.get(key)!r})")
    if checkpoint["vocab_size"] != vocab_size:
        raise UserError(f"{where} has a vocabulary of {checkpoint['vocab_size']}, the data "
                        f"{vocab_size}; resume with the same prepared data")


def session_record(*, from_step: int, command: str, world_size: int, device: str,
                   precision: str, batch: dict[str, Any]) -> dict[str, Any]:
    """config.json's entry for a session of training that starts now: from which step, by
    which command, on what, with which batch plan, and the versions that ran it."""
    return {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "from_step": from_step, "command": command, "world_size": world_size,
            "device": device, "precision": precision, "batch": batch,
            "transformer_nmt": __version__, "torch": torch.__version__}


def write_run_config(run_dir: Path, record: dict[str, Any]) -> None:
    """Write RUN_DIR/config.json atomically."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / CONFIG_FILE, record)
