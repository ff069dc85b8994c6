"""`translate_corpus`: the shards of a plan not yet done translated by a backend (worker
processes, Ray actors, or this process for a part), noted in the manifest as they end,
and joined into the outputs; what a call did, as a report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer_nmt.corpus.manifest import ManifestNotes, open_manifest
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.ray_actors import translate_with_ray
from transformer_nmt.corpus.shards import merge, shard_problem, shard_task
from transformer_nmt.corpus.workers import translate_here, translate_in_workers
from transformer_nmt.errors import UserError


@dataclass
class CorpusReport:
    """What a call translated: sentences, output tokens, seconds, shards."""

    shards: int
    sentences: int = 0
    tokens: int = 0
    seconds: float = 0.0
    shards_translated: int = 0
    shards_redone: int = 0
    outputs: tuple[str, ...] = ()

    def summary(self) -> str:
        rate = self.sentences / max(self.seconds, 1e-9)
        merged = f"; outputs {', '.join(self.outputs)}" if self.outputs else ""
        return (f"translated {self.sentences} sentences ({self.tokens} subword tokens) in "
                f"{self.seconds:.1f} s: {rate:.1f} sentences/s; {self.shards_translated} of "
                f"{self.shards} shards translated, {self.shards_redone} redone{merged}")


def translate_corpus(options: CorpusOptions, part: tuple[int, int] | None = None
                     ) -> CorpusReport:
    """Translate the shards of `options`' plan not yet done, and join them into the
    outputs: all of them with worker processes on this machine, or with `part` (I, N)
    the I-th of N equal parts of the shards in this process, not joined (`merge`)."""
    start = time.perf_counter()
    if part is not None and options.backend != "local":
        raise UserError("--shard translates a part in this process; it takes no --backend")
    out = Path(options.out)
    manifest = open_manifest(options)
    numbers = range(len(manifest["shards"]))
    if part is not None:
        index, count = part
        if not 0 <= index < count:
            raise UserError(f"--shard {index}/{count}: I must be from 0 to N-1")
        numbers = numbers[index * len(numbers) // count:(index + 1) * len(numbers) // count]
    todo = [number for number in numbers if shard_problem(out, manifest, number) is not None]
    report = CorpusReport(shards=len(numbers))
    lines = sum(manifest["shards"][n]["end"] - manifest["shards"][n]["start"] for n in todo)
    notes = ManifestNotes(out)
    with logging_redirect_tqdm(), tqdm(total=lines, unit=" sentences", desc="translating",
                                       disable=not todo) as progress:
        def done(number: int, record: dict[str, Any]) -> None:
            notes.add(number, record)
            report.shards_translated += 1
            report.sentences += record["sentences"]
            report.tokens += record["tokens"]
            progress.update(record["sentences"])
            progress.set_postfix_str(f"shards {report.shards_translated}/{len(todo)}")

        tasks = [shard_task(out, manifest, number) for number in todo]
        try:
            if part is not None:
                translate_here(options, tasks, done)
            elif tasks and options.backend == "ray":
                report.shards_redone = translate_with_ray(options, tasks, done)
            elif tasks:
                report.shards_redone = translate_in_workers(options, tasks, done)
        finally:
            notes.save()
    if part is None:
        report.outputs = tuple(str(path) for path in merge(out))
    report.seconds = time.perf_counter() - start
    return report
