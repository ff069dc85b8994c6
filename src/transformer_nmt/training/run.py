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
from transformer_nmt.files import check_format, write_json_atomic
from transformer_nmt.errors import UserError
from transformer_nmt.training.batch_size import fixes_batch_per_process
from transformer_nmt.training.checkpoint import resume_checkpoint
from transformer_nmt.training.init_from import (FINETUNE_LR_PEAK, FINETUNE_WARMUP, InitModel,
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
    """config.json as it will be written (the session adds its own entry)."""


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
    check_format(record, path, RUN_FORMAT, RUN_VERSION,
                 remedy="continue it with the release that wrote it, or train into a new "
                        "or empty run directory")
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
    overrides, init_path = _with_init_from(list(overrides), init_from)
    run_dir = _run_dir(out, resume)
    stored = read_run_config(run_dir)
    if resume is not None and stored is None:
        raise UserError(f"{run_dir} holds no run to resume (no {CONFIG_FILE}); start one with "
                        "prepared data and a new run directory")
    file_values = _read_config_file(Path(config_file)) if config_file else {}
    init = read_init_model(init_path) if init_path and stored is None else None
    preset_name = (preset or file_values.get("preset") or (stored or {}).get("preset")
                   or (init.preset if init else None) or "base")
    chosen = bool(preset or config_file)
    model, train = _configuration(preset_name, chosen, file_values, stored, init)
    model, train = apply_overrides(model, train, overrides)
    data_dir = _data_dir(data, stored)
    digest = data_digest(data_dir)

    resume_from = None
    if stored is not None:
        _check_same_run(run_dir, stored, preset_name, chosen, model, train, data_dir, digest)
        resume_from = resume_checkpoint(run_dir)
    if init is not None:
        check_init_architecture(init.path, init.model_config, model)
        check_init_vocab(init.path, init.vocab_sha256, data_dir)
    record = _run_record(preset_name, model, train, data_dir, digest, stored, init)
    return RunPlan(run_dir, data_dir, preset_name, model, train, digest, resume_from, record)


def _with_init_from(overrides: list[tuple[str, Any]], init_from: str | Path | None
                    ) -> tuple[list[tuple[str, Any]], str | None]:
    """`overrides` with `init_from` added and the model file it ends up naming spelt as
    an absolute path, and that path (None: the run starts from no model)."""
    if init_from is not None:
        overrides.append(("init_from", str(init_from)))
    requested = [value for name, value in overrides if name == "init_from"]
    if not requested or not requested[-1]:
        return overrides, None
    # One spelling of the path, so that rerunning from another directory is the same run.
    overrides.append(("init_from", str(Path(requested[-1]).resolve())))
    return overrides, requested[-1]


def _run_dir(out: str | Path | None, resume: str | Path | None) -> Path:
    """The run directory `out` or `resume` names; UserError if neither or two do."""
    if resume is not None and out is not None and Path(resume).resolve() != Path(out).resolve():
        raise UserError(f"resume {resume} and out {out} name different run directories; "
                        "give one of them")
    if not (resume or out):
        raise UserError("say where the run goes (out, a run directory) or which run to "
                        "continue (resume)")
    return Path(resume if resume is not None else out)


def _configuration(preset_name: str, chosen: bool, file_values: dict[str, Any],
                   stored: dict[str, Any] | None, init: InitModel | None
                   ) -> tuple[ModelConfig, TrainConfig]:
    """The configuration before overrides: the stored run's, or the starting model's,
    unless a preset or config file was `chosen`; else the preset's under the file's."""
    if stored is not None and not chosen:
        return (config_from_dict(ModelConfig, stored["model"]),
                config_from_dict(TrainConfig, _train_record(stored)))
    if init is not None and not chosen:
        model, train = init.model(), init.train() or get_preset(preset_name).train
    else:
        preset = get_preset(preset_name)
        model = config_from_dict(ModelConfig, {**dataclasses.asdict(preset.model),
                                               **file_values.get("model", {})})
        train = config_from_dict(TrainConfig, {**dataclasses.asdict(preset.train),
                                               **file_values.get("train", {})})
    if init is not None:
        regime = file_values.get("train", {})
        train = dataclasses.replace(
            train, warmup_steps=regime.get("warmup_steps", FINETUNE_WARMUP),
            lr_peak=regime.get("lr_peak", FINETUNE_LR_PEAK))
    return model, train


def _data_dir(data: str | Path | None, stored: dict[str, Any] | None) -> Path:
    """The prepared data directory: `data`, else the stored run's."""
    if data is None:
        if stored is None:
            raise UserError("say which prepared data directory to train on (data)")
        data = stored["data"]["dir"]
    return Path(data).resolve()


def _check_same_run(run_dir: Path, stored: dict[str, Any], preset_name: str, chosen: bool,
                    model: ModelConfig, train: TrainConfig, data_dir: Path, digest: str
                    ) -> None:
    """UserError naming the difference unless the configuration and data continue the
    run stored in `run_dir` (only the fields that may change on resume may differ)."""
    old_model = config_from_dict(ModelConfig, stored["model"])
    old_train = config_from_dict(TrainConfig, _train_record(stored))
    changeable = CHANGEABLE_ON_RESUME
    if not any(fixes_batch_per_process(cfg.max_tokens, cfg.update_freq)
               for cfg in (old_train, train)):
        changeable |= BATCH_SPLIT
    changes = differences({**dataclasses.asdict(old_model), **dataclasses.asdict(old_train)},
                          {**dataclasses.asdict(model), **dataclasses.asdict(train)},
                          skip=changeable)
    if stored.get("preset") != preset_name and chosen:
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


def _run_record(preset_name: str, model: ModelConfig, train: TrainConfig, data_dir: Path,
                digest: str, stored: dict[str, Any] | None, init: InitModel | None
                ) -> dict[str, Any]:
    """config.json as the run will write it: its configuration, data and the sessions
    so far (the session about to start adds its own)."""
    manifest = read_manifest(data_dir)
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
    return record


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
