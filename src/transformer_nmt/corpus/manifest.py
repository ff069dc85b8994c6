"""DIR/manifest.json, the plan of a corpus translation: its inputs and their shards'
line ranges, the models' SHA-256 and the settings that change a translation, and each
shard's state. It is written by one process at a time (an OS lock on DIR), each time
whole, so that several processes can share DIR and a killed one leaves a manifest the
next run reads; a rerun with other models, settings or inputs is refused in one line."""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Sequence

from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.data.text import line_offsets
from transformer_nmt.errors import UserError
from transformer_nmt.files import check_format, file_sha256, write_json_atomic
from transformer_nmt.locks import DirectoryLock

FORMAT = "nmt-translate-corpus"
VERSION = 1
MANIFEST = "manifest.json"
LOCK_WAIT_SECONDS = 3600.0
"""How long a process waits for another to finish writing the manifest (a moment's
work, but planning a large corpus counts its lines) before it says which process holds
it; the lock of a process that died is free at once."""

SAVE_EVERY_SECONDS = 30.0
"""How often the shards' states done since are written into the manifest: each write
is the whole manifest, and the shards' own checksum files are what a run trusts."""


def input_files(inputs: Sequence[str]) -> list[Path]:
    """The input files: each file given, and the files (not hidden) of each directory
    given, in name order; UserError naming a missing one or two with one output name."""
    files: list[Path] = []
    for given in map(Path, inputs):
        if given.is_dir():
            files += sorted(path for path in given.iterdir()
                            if path.is_file() and not path.name.startswith("."))
        elif given.is_file():
            files.append(given)
        else:
            raise UserError(f"{given}: no such file or directory")
    seen: dict[str, Path] = {}
    for path in files:
        name = output_name(path)
        if name in seen:
            raise UserError(f"{seen[name]} and {path} would both be translated into {name}; "
                            "rename one or translate them into separate directories")
        seen[name] = path
    return files


def output_name(path: Path) -> str:
    """The output file of input `path`: its name, without .gz (the output is plain)."""
    name = path.name.removesuffix(".gz")
    if name == MANIFEST:
        raise UserError(f"{path}: an input may not be named {MANIFEST}; rename it")
    return name


def settings_record(options: CorpusOptions) -> dict[str, Any]:
    """The settings that change a translation, as the manifest records them."""
    translator = options.translator
    settings = {**asdict(translator.decode), "precision": translator.precision,
                "format": options.output_format, "alignments": translator.alignments,
                "token_scores": translator.token_scores, "errors": options.errors,
                "shard_lines": options.shard_lines}
    if translator.batch_invariant:  # recorded only when set: older manifests lack it
        settings["batch_invariant"] = True
    if translator.engine != "torch":  # older manifests, which lack it, ran on torch
        settings["engine"] = translator.engine
    return json.loads(json.dumps(settings))


def _plan(files: list[Path], shard_lines: int) -> tuple[list[dict], list[dict]]:
    """The inputs and their shards, lines counted once: each shard with the byte offset
    (in the decompressed text) where it starts, so that it reads only its own lines."""
    inputs, shards = [], []
    for index, path in enumerate(files):
        lines, offsets = line_offsets(path, shard_lines)
        inputs.append({"path": str(path.resolve()), "output": output_name(path),
                       "lines": lines, "bytes": path.stat().st_size})
        for start, offset in zip(range(0, lines, shard_lines), offsets):
            shards.append({"input": index, "start": start, "offset": offset,
                           "end": min(start + shard_lines, lines), "state": "todo"})
    return inputs, shards


@contextmanager
def _manifest_lock(out: Path) -> Iterator[None]:
    """The right to write DIR's manifest, waited for while another process writes it."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            lock = DirectoryLock(out, "written", "give another --out")
            break
        except UserError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with lock:
        yield


def read_manifest(out: Path) -> dict[str, Any] | None:
    """DIR's manifest, or None if there is none yet."""
    path = out / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: cannot be read ({error}); delete it to start again, or "
                        "translate into another --out") from None
    check_format(manifest, path, FORMAT, VERSION,
                 remedy="translate into another --out, or delete it to start again")
    return manifest


def open_manifest(options: CorpusOptions) -> dict[str, Any]:
    """DIR's manifest for `options`: the existing one, refused in one line if its
    models, settings or inputs differ, or a new plan."""
    out = Path(options.out)
    files = input_files(options.inputs)
    models = [file_sha256_of(path) for path in options.models]
    settings = settings_record(options)
    with _manifest_lock(out):
        manifest = read_manifest(out)
        if manifest is None:
            inputs, shards = _plan(files, options.shard_lines)
            manifest = {"format": FORMAT, "version": VERSION, "models": models,
                        "settings": settings, "inputs": inputs, "shards": shards}
            write_json_atomic(out / MANIFEST, manifest)
            return manifest
    _check_same(out / MANIFEST, manifest, models, settings, files)
    return manifest


def file_sha256_of(path: str | Path) -> str:
    """SHA-256 of a model file, or of a model directory's files in name order."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such model file")
    if path.is_dir():
        return file_sha256_of_all(sorted(p for p in path.rglob("*") if p.is_file()))
    return file_sha256(path)


def file_sha256_of_all(paths: list[Path]) -> str:
    """One SHA-256 of several files' SHA-256s."""
    return hashlib.sha256(" ".join(file_sha256(p) for p in paths).encode()).hexdigest()


def _check_same(path: Path, manifest: dict, models: list[str], settings: dict,
                files: list[Path]) -> None:
    """UserError in one line naming the first thing that differs from the manifest."""
    remedy = "use the same ones, or translate into another --out"
    if manifest["models"] != models:
        raise UserError(f"{path} was made with another model (SHA-256 "
                        f"{', '.join(m[:12] for m in manifest['models'])}, now "
                        f"{', '.join(m[:12] for m in models)}); {remedy}")
    for key in sorted(set(settings) | set(manifest["settings"])):
        was, now = manifest["settings"].get(key), settings.get(key)
        if was != now:
            raise UserError(f"{path} was made with {key} {was!r}, not {now!r}; {remedy}")
    was_inputs = [entry["path"] for entry in manifest["inputs"]]
    now_inputs = [str(file.resolve()) for file in files]
    if was_inputs != now_inputs:
        raise UserError(f"{path} was made for other inputs ({', '.join(was_inputs)}); "
                        f"{remedy}")
    for entry, file in zip(manifest["inputs"], files):
        if file.stat().st_size != entry["bytes"]:
            raise UserError(f"{file} has changed since {path} was made "
                            f"({entry['bytes']} bytes, now {file.stat().st_size}); {remedy}")


class ManifestNotes:
    """The records of shards done, noted in the manifest every SAVE_EVERY_SECONDS and
    at the end (`save`), each time under the lock."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.records: dict[int, dict[str, Any]] = {}
        self.saved = time.monotonic()

    def add(self, number: int, record: dict[str, Any]) -> None:
        self.records[number] = record
        if time.monotonic() - self.saved > SAVE_EVERY_SECONDS:
            self.save()

    def save(self) -> None:
        if self.records:
            with _manifest_lock(self.out):
                manifest = read_manifest(self.out)
                for number, record in self.records.items():
                    manifest["shards"][number].update(record, state="done")
                write_json_atomic(self.out / MANIFEST, manifest)
        self.records = {}
        self.saved = time.monotonic()
