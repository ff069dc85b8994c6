"""Training checkpoints: numbered files and their rotation, RNG state, and averaging.

A checkpoint is a model file (see transformer_nmt.model_file) plus the optimizer,
scheduler, sampler and RNG states that exact resume needs, all of them plain tensors,
numbers and containers so that the file loads with `weights_only=True`.

A run directory keeps numbered checkpoints `checkpoint_{step}.pt` (the newest
`keep_last`), `checkpoint_last.pt` (a hard link to the newest numbered one, so that it
costs no second copy) and `checkpoint_best.pt` (best by the run's valid_metric). Every file
appears by an atomic rename, so a crash leaves the previous good file in place.

Resuming reads checkpoint_last.pt, or when it is damaged the newest checkpoint that can
be read and whose weights match their checksum, checks that it belongs to the run, and
restores the optimizer, the batch order, the random streams and the run's progress from
it, so that a resumed run equals an uninterrupted one.

A checkpoint written at a step that was validated carries that validation under
"validation" ({step, metric, value, nll, bleu, chrf}): `nmt average --best K` ranks
checkpoints by it. The checkpoint itself is the record, rather than metrics.jsonl, so
that checkpoint files copied elsewhere can still be ranked and a truncated or deleted
log cannot mismatch steps and files.
"""

from __future__ import annotations

import os
import random
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from transformer_nmt.config import differences
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.errors import UserError
from transformer_nmt.files import atomic_link, remove_leftover_temporaries
from transformer_nmt.model_file import (build_model, model_languages, model_payload,
                                        read_model_file, save_model_file)
from transformer_nmt.training.distributed import Distributed
from transformer_nmt.training.progress import RunProgress
from transformer_nmt.training.trainer import Trainer

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
_NUMBERED = re.compile(r"checkpoint_(\d+)\.pt")


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


def save_numbered(run_dir: str | Path, payload: dict[str, Any], step: int, keep_last: int) -> Path:
    """Write checkpoint_{step}.pt, point checkpoint_last.pt at it, and delete the numbered
    checkpoints older than the newest `keep_last` (0 keeps all). Returns the new path."""
    path = checkpoint_path(run_dir, step)
    save_model_file(payload, path)
    atomic_link(path, Path(run_dir) / LAST)
    if keep_last > 0:
        for _, old in numbered_checkpoints(run_dir)[:-keep_last]:
            old.unlink(missing_ok=True)
    return path


def rng_states() -> dict[str, Any]:
    """Every random generator's state: Python, NumPy, torch CPU and, if present, CUDA.

    NumPy's state is stored as a tensor and plain numbers rather than the array it
    returns, so that a checkpoint holds nothing `torch.load(weights_only=True)` refuses.
    """
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(position),
                  int(has_gauss), float(cached_gaussian)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what `rng_states` returned (CUDA states only where CUDA is present)."""
    random.setstate(states["python"])
    name, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss,
                         cached_gaussian))
    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


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
    numbered one, else None (`read_newest_checkpoint` falls back to older ones that can
    be read)."""
    candidates = resume_candidates(run_dir)
    return candidates[0] if candidates else None


def read_newest_checkpoint(run_dir: Path) -> dict[str, Any]:
    """The newest checkpoint of the run that can be read and verifies (read_model_file
    checks its fields and its checksum), saying which damaged ones were skipped and why;
    the error of the newest if none can be read."""
    candidates = resume_candidates(run_dir)
    first_error = None
    for path in candidates:
        try:
            checkpoint = read_model_file(path)
        except UserError as error:
            first_error = first_error or error
            tqdm.write(f"skipping {path}: {error}", file=sys.stderr)
            continue
        if path != candidates[0]:
            tqdm.write(f"resuming from {path}, the newest checkpoint that reads and verifies",
                       file=sys.stderr)
        return checkpoint
    raise first_error


def check_resumable(checkpoint: dict[str, Any], where: Path, data_digest: str,
                    model_config: dict[str, Any], vocab_size: int) -> None:
    """UserError unless `checkpoint` (read from `where`) is a training checkpoint of a
    run of the architecture `model_config` on the data of `data_digest`, whose
    vocabulary has `vocab_size` pieces."""
    if "trainer" not in checkpoint:
        raise UserError(f"{where} is a model file without training state; it cannot be resumed")
    if checkpoint.get("data_digest") != data_digest:
        raise UserError(f"{where} was trained on other data (digest "
                        f"{str(checkpoint.get('data_digest'))[:12]}, now "
                        f"{data_digest[:12]}); resume with the same prepared data")
    for key, value in checkpoint["model_config"].items():
        if model_config.get(key) != value:
            raise UserError(f"{where} holds another architecture ({key} {value!r}, the run "
                            f"config says {model_config.get(key)!r})")
    if checkpoint["vocab_size"] != vocab_size:
        raise UserError(f"{where} has a vocabulary of {checkpoint['vocab_size']}, the data "
                        f"{vocab_size}; resume with the same prepared data")


def restore(checkpoint: dict[str, Any], trainer: Trainer, sampler: TokenBatchSampler,
            context: Distributed) -> RunProgress:
    """Continue the optimizer, batch order and random streams of `checkpoint` (the model's
    weights are loaded already); return the run's progress. Rank 0 warns when another
    number of processes or another batch size makes the result differ from an
    uninterrupted run."""
    trainer.load_state_dict(checkpoint["trainer"])
    sampler.load_state_dict(checkpoint["sampler"])
    states, world_size = checkpoint["rng"], context.world_size
    changes = []
    if len(states) == world_size:
        set_rng_states(states[context.rank])
    else:
        changes.append(f"{len(states)} processes before, {world_size} now: dropout "
                       "draws new random numbers")
    before, now = checkpoint["sampler"]["max_tokens"], sampler.max_tokens
    if before != now:
        changes.append(f"batches of {before} tokens before, {now} now: the epoch goes on "
                       "from the same fraction of batches cut anew")
    if changes and context.is_main:
        warnings.warn(f"resuming with {'; and '.join(changes)}; the result differs from "
                      "an uninterrupted run", stacklevel=3)
    return RunProgress.from_dict(checkpoint["progress"])


def recorded_validation(path: Path) -> dict[str, Any] | None:
    """The validation a checkpoint records of its own step, or None. The file is memory
    mapped, so that ranking many checkpoints reads little more than their metadata."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # torch raises many types; read_model_file says what is wrong
        payload = read_model_file(path)
    return payload.get("validation") if isinstance(payload, dict) else None


def best_checkpoints(paths: list[Path], best: int) -> list[Path]:
    """The `best` checkpoints of `paths` with the best recorded validation (see the module
    docstring), in step order; UserError if fewer than `best` record one of a metric."""
    validated = [(path, record) for path in paths
                 if (record := recorded_validation(path)) is not None]
    metrics = sorted({record["metric"] for _, record in validated})
    if len(metrics) > 1:
        raise UserError(f"the checkpoints were validated by different metrics "
                        f"({', '.join(metrics)}); give the files of one run")
    if len(validated) < best:
        raise UserError(f"only {len(validated)} of the {len(paths)} checkpoint(s) record a "
                        f"validation of their own step, fewer than best={best}; train with "
                        "--save-every equal to --valid-every so that every validated step "
                        "keeps a checkpoint, or lower best")
    lower_is_better = metrics[0] == "loss"
    ranked = sorted(validated, key=lambda item: item[1]["value"] if lower_is_better
                    else -item[1]["value"])
    chosen = {path for path, _ in ranked[:best]}
    return [path for path in paths if path in chosen]


def checkpoints_to_average(inputs: list[str | Path], last: int | None,
                           best: int | None = None) -> list[Path]:
    """The files `nmt average` should read: the `last` newest numbered checkpoints of a
    run directory, or the checkpoint files given (all of them, or their `last` newest);
    or, with `best`, the `best` of them by their recorded validation."""
    paths = [Path(item) for item in inputs]
    if not paths:
        raise UserError("give a run directory or checkpoint files to average")
    if last is not None and best is not None:
        raise UserError("give either last (the newest checkpoints) or best (the best "
                        "validated ones), not both")
    if len(paths) == 1 and paths[0].is_dir():
        numbered = [path for _, path in numbered_checkpoints(paths[0])]
        if not numbered:
            raise UserError(f"{paths[0]}: no checkpoint_<step>.pt files to average")
        if best is not None:
            return best_checkpoints(numbered, best)
        if last is None:
            raise UserError(f"{paths[0]} is a run directory: set last to how many of its "
                            "newest checkpoints to average (paper: 5 base, 20 big), or best "
                            "to how many of its best validated ones")
        if last > len(numbered):
            raise UserError(f"{paths[0]} holds {len(numbered)} numbered checkpoint(s), fewer "
                            f"than last={last}; lower last, or train with a higher keep_last "
                            "to keep more")
        return numbered[-last:]
    for path in paths:
        if path.is_dir():
            raise UserError(f"{path} is a directory; give either one run directory or files")
        if not path.exists():
            raise UserError(f"{path}: no such run directory or checkpoint file")
    if best is not None:
        return best_checkpoints(paths, best)
    if last is not None:
        if last > len(paths):
            raise UserError(f"last={last} but only {len(paths)} checkpoint files are given; "
                            "lower last or give more files")
        paths = paths[-last:]
    return paths


def check_average_output(out: str | Path, inputs: list[Path]) -> None:
    """UserError if writing the average to `out` would replace one of its inputs or a
    checkpoint of a run directory (resume would then find a model without training
    state where its checkpoint was). Otherwise the leftovers of an average into `out`
    that was killed are removed, before this one takes memory and time."""
    out = Path(out)
    for path in inputs:
        if out.exists() and path.exists() and out.resolve() == path.resolve():
            raise UserError(f"the output {out} is one of the checkpoints being averaged; "
                            "write the average to a new file (e.g. RUN_DIR/average.pt)")
    if _NUMBERED.fullmatch(out.name) or out.name in (LAST, BEST):
        raise UserError(f"the output {out} has a checkpoint's name, which `nmt train` owns; "
                        "write the average under another name (e.g. average.pt)")
    if out.parent.is_dir():
        remove_leftover_temporaries(out.parent, out.name)


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A model file whose weights are the mean of the checkpoints' weights.

    Every checkpoint must have the same architecture, vocabulary size and vocabulary;
    the result has the model-file keys only (no optimizer), plus 'averaged_from'.
    """
    first = read_model_file(paths[0])
    total = {name: tensor.double() for name, tensor in first["model"].items()
             if tensor.is_floating_point()}
    steps = [first.get("step")]
    for path in paths[1:]:
        payload = read_model_file(path)
        for key in ("model_config", "vocab_size"):
            if payload[key] != first[key]:
                detail = differences(first[key], payload[key], path=key)[0]
                raise UserError(f"cannot average {paths[0].name} and {path}: different "
                                f"architectures ({detail})")
        if (payload["vocab"], payload.get("target_vocab")) != (first["vocab"],
                                                                first.get("target_vocab")):
            raise UserError(f"cannot average {paths[0].name} and {path}: different vocabularies")
        for name in total:
            total[name] += payload["model"][name].double()
        steps.append(payload.get("step"))
    state = dict(first["model"])
    for name, tensor in total.items():
        state[name] = (tensor / len(paths)).to(first["model"][name].dtype)
    model = build_model({**first, "model": state})
    result = model_payload(model, first["vocab"], model_languages(first),
                           first.get("target_vocab"))
    result["averaged_from"] = [{"file": str(path), "step": step}
                               for path, step in zip(paths, steps)]
    # What `nmt train --init-from` takes as the defaults of a fine-tuning run.
    for key in ("preset", "train_config"):
        if key in first:
            result[key] = first[key]
    return result

