"""One shard of a corpus translation: its lines translated into DIR/.shards/NNNNNN.txt,
put in place whole, then its record (SHA-256, sentences, tokens) beside it, by whichever
process translated it; whether a shard is done, by its file and record; and every
input's output joined from its shards, line for line."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_nmt.corpus.manifest import MANIFEST, read_manifest
from transformer_nmt.data.text import LineWriter, read_lines
from transformer_nmt.decode.text.output import SpeedReport, format_translations
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.errors import UserError
from transformer_nmt.files import AtomicFile, file_sha256, write_json_atomic

SHARDS = ".shards"


@dataclass(frozen=True)
class ShardTask:
    """One shard to translate: lines [start, end) of `path` into `output`, its record
    into `record`."""

    number: int
    path: str
    start: int
    end: int
    output: str
    record: str
    offset: int = 0
    """The byte where line `start` begins in the (decompressed) text of `path`."""


def shard_path(out: Path, number: int) -> Path:
    """Where shard `number`'s translations are."""
    return out / SHARDS / f"{number:06d}.txt"


def checksum_path(out: Path, number: int) -> Path:
    """Where shard `number`'s record is (SHA-256, sentences, tokens), written after its
    translations by whichever process translated it."""
    return out / SHARDS / f"{number:06d}.json"


def shard_problem(out: Path, manifest: dict, number: int) -> str | None:
    """Why shard `number` is not done (None: it is, its file whole): its record and
    file are checked, whoever translated it, whatever the manifest has noted yet."""
    shard = manifest["shards"][number]
    try:
        record = json.loads(checksum_path(out, number).read_text(encoding="utf-8"))
        digest = file_sha256(shard_path(out, number))
    except FileNotFoundError:
        return "missing" if checksum_path(out, number).exists() else "not translated"
    except (OSError, ValueError) as error:
        return f"unreadable ({getattr(error, 'strerror', None) or error})"
    if record.get("sentences") != shard["end"] - shard["start"]:
        return "damaged (its record has another line count)"
    return None if digest == record.get("sha256") else "damaged (its SHA-256 differs)"


def describe_shard(manifest: dict, number: int) -> str:
    shard = manifest["shards"][number]
    return (f"shard {number} ({manifest['inputs'][shard['input']]['path']} lines "
            f"{shard['start'] + 1}-{shard['end']})")


def shard_task(out: Path, manifest: dict, number: int) -> ShardTask:
    shard = manifest["shards"][number]
    return ShardTask(number, manifest["inputs"][shard["input"]]["path"], shard["start"],
                     shard["end"], str(shard_path(out, number)),
                     str(checksum_path(out, number)), shard["offset"])


def translate_shard(translator: Translator, task: ShardTask, as_json: bool,
                    errors: str) -> dict[str, Any]:
    """Translate `task`'s lines into its file, put in place whole; its record: SHA-256,
    sentences and output tokens. Line numbers (n-best lines, and the seeds of samples)
    count from the input's first line, as `nmt translate` numbers them."""
    # From the shard's own first byte: a part of a corpus of millions of lines reads only
    # its lines, not all those before it.
    lines = itertools.islice(read_lines(task.path, errors, task.offset, task.start + 1),
                             task.end - task.start)
    speed = SpeedReport()
    vocab = translator.vocab if as_json else None
    nbest = translator.options.decode.nbest > 1
    with LineWriter(task.output) as writer:
        found = translator.translate_nbest(lines, first_line=task.start)
        for index, result in enumerate(speed.counted(found)):
            for line in format_translations(task.start + index, result, nbest, vocab):
                writer.write(line)
        if speed.lines != task.end - task.start:
            raise UserError(f"{task.path} has {task.start + speed.lines} lines, fewer than "
                            "when it was planned; translate it into another --out")
    record = {"sha256": file_sha256(task.output), "sentences": speed.lines,
              "tokens": speed.tokens}
    write_json_atomic(task.record, record)
    return record


def merge(out: str | Path) -> list[Path]:
    """Check every shard's file against its checksum and write each input's output
    whole; UserError in one line naming what is missing or damaged."""
    out = Path(out)
    manifest = read_manifest(out)
    if manifest is None:
        raise UserError(f"{out}: no {MANIFEST}; translate into it first")
    problems = [f"{describe_shard(manifest, number)} {problem}"
                for number in range(len(manifest["shards"]))
                if (problem := shard_problem(out, manifest, number)) is not None]
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise UserError(f"{out}: {len(problems)} shards not done: {'; '.join(problems[:3])}"
                        f"{more}; run the command again without --merge to translate them")
    outputs = []
    for index, entry in enumerate(manifest["inputs"]):
        target = out / entry["output"]
        with AtomicFile(target, buffer_size=1 << 20) as file:
            for number, shard in enumerate(manifest["shards"]):
                if shard["input"] == index:
                    with open(shard_path(out, number), "rb") as handle:
                        while block := handle.read(1 << 20):
                            file.handle.write(block)
        outputs.append(target)
    return outputs
