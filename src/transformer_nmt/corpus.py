"""Whole corpora translated in shards (back-translation, a cluster's job array): a plan
of line ranges kept in a manifest, each shard translated into its own file and put in
place whole, a rerun doing only what is not done, and the shards joined into one output
per input, line for line.

The output directory DIR holds `manifest.json` (the plan, each shard's state and the
SHA-256 of its file, the models' SHA-256 and the settings that change a translation),
under `.shards/` each shard's translations and then its record (SHA-256, sentences,
tokens), and when every shard is done one file per input, named after it. The manifest
is written by one process at a time (an OS lock on DIR), each time whole, so that
several processes (`part`, a Slurm array) can share DIR and a killed one leaves a
manifest the next run reads; a shard counts as done by its file and record, whoever
translated it, so that the manifest need not be written after every shard. The local
backend hands the shards out in order to worker processes, each with its own Translator
on its share of the cores; a worker that dies takes its shard with it, and the shard is
translated once more. The ray backend makes the shards to do a Ray Data dataset, one row
per shard, translated by a pool of actors each holding one Translator, on this machine
or on a cluster; an actor that dies is restarted by Ray and its shard translated again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import queue
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer_nmt.config import DEFAULT_SHARD_LINES
from transformer_nmt.data.text import LineWriter, line_offsets, read_lines
from transformer_nmt.decode.stream import SpeedReport, format_translations
from transformer_nmt.decode.threads import decoding_threads, use_cores
from transformer_nmt.decode.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import AtomicFile, check_format, file_sha256, write_json_atomic
from transformer_nmt.interrupts import stop_signals_held
from transformer_nmt.locks import DirectoryLock

FORMAT = "nmt-translate-corpus"
VERSION = 1
MANIFEST = "manifest.json"
SHARDS = ".shards"
BACKENDS = ("local", "ray")

RAY_ATTEMPTS = 3
"""How many actors a shard may be given under the ray backend: Ray restarts a dead actor
and retries its shard without end, and a shard that kills every actor it is given (out
of memory, say) would never end."""

KILL_HOOK = "NMT_TEST_KILL_CORPUS_WORKER"
"""Test hook, for the tests of a dead worker only: `SHARD:LINES:MARKER` makes the worker
translating shard SHARD kill itself (SIGKILL) after LINES lines, once: the first to do so
creates the file MARKER, and a worker that finds it there goes on."""

LOCK_WAIT_SECONDS = 3600.0
"""How long a process waits for another to finish writing the manifest (a moment's
work, but planning a large corpus counts its lines) before it says which process holds
it; the lock of a process that died is free at once."""

SAVE_EVERY_SECONDS = 30.0
"""How often the shards' states done since are written into the manifest: each write
is the whole manifest, and the shards' own checksum files are what a run trusts."""


@dataclass(frozen=True)
class CorpusOptions:
    """What `translate_corpus` translates, where to, and how."""

    models: tuple[str, ...]
    """The model file, or several for an ensemble."""
    inputs: tuple[str, ...]
    """Text files (gzipped or not), or directories whose files are all inputs."""
    out: str
    """The output directory: manifest, shards and one output per input."""
    translator: TranslatorOptions = TranslatorOptions()
    """The search and its resources; `workers` is the number of worker processes (Ray
    actors with the ray backend)."""
    output_format: str = "text"
    """text (nmt translate's lines) or json (one JSON object per input line)."""
    errors: str = "strict"
    """Invalid UTF-8 in the input: strict (an error naming file and line) or replace."""
    shard_lines: int = DEFAULT_SHARD_LINES
    """Input lines per shard."""
    backend: str = "local"
    """local (worker processes on this machine) or ray (Ray actors, here or on a cluster)."""
    ray_address: str | None = None
    """The Ray cluster to join (the ray backend); None starts Ray on this machine."""

    def __post_init__(self) -> None:
        if type(self.shard_lines) is not int or self.shard_lines < 1:
            raise UserError(f"--shard-lines must be at least 1, not {self.shard_lines!r}")
        if self.backend not in BACKENDS:
            raise UserError(f"--backend is one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.ray_address is not None and self.backend != "ray":
            raise UserError("--ray-address is for --backend ray")


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


def _task(out: Path, manifest: dict, number: int) -> ShardTask:
    shard = manifest["shards"][number]
    return ShardTask(number, manifest["inputs"][shard["input"]]["path"], shard["start"],
                     shard["end"], str(shard_path(out, number)),
                     str(checksum_path(out, number)), shard["offset"])


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
    die_after = _kill_hook(task.number)
    with LineWriter(task.output) as writer:
        found = translator.translate_nbest(lines, first_line=task.start)
        for index, result in enumerate(speed.counted(found)):
            for line in format_translations(task.start + index, result, nbest, vocab):
                writer.write(line)
            if index + 1 == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
        if speed.lines != task.end - task.start:
            raise UserError(f"{task.path} has {task.start + speed.lines} lines, fewer than "
                            "when it was planned; translate it into another --out")
    record = {"sha256": file_sha256(task.output), "sentences": speed.lines,
              "tokens": speed.tokens}
    write_json_atomic(task.record, record)
    return record


def _kill_hook(number: int) -> int | None:
    """Lines after which this worker kills itself (KILL_HOOK), or None."""
    hook = os.environ.get(KILL_HOOK)
    if not hook:
        return None
    shard, lines, marker = hook.split(":", 2)
    if int(shard) != number:
        return None
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    return int(lines)


_WORKER: dict[str, Any] = {}
"""A worker process's Translator and settings, made by `_start_worker`."""


def _start_worker(models: tuple[str, ...], options: TranslatorOptions, cores: int,
                  as_json: bool, errors: str, started: Any) -> None:
    # Ctrl-C reaches the whole process group: the parent alone answers it, stopping us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_cores(cores)
    _WORKER.update(translator=Translator.from_files(models, options), as_json=as_json,
                   errors=errors, started=started)


def _work(task: ShardTask) -> dict[str, Any]:
    _WORKER["started"].put(task.number)
    return translate_shard(_WORKER["translator"], task, _WORKER["as_json"], _WORKER["errors"])


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

        tasks = [_task(out, manifest, number) for number in todo]
        try:
            if part is not None:
                _translate_here(options, tasks, done)
            elif tasks and options.backend == "ray":
                report.shards_redone = _translate_with_ray(options, tasks, done)
            elif tasks:
                report.shards_redone = _translate_in_workers(options, tasks, done)
        finally:
            notes.save()
    if part is None:
        report.outputs = tuple(str(path) for path in merge(out))
    report.seconds = time.perf_counter() - start
    return report


def _translate_here(options: CorpusOptions, tasks: list[ShardTask], done) -> None:
    """The shards of `tasks` translated by this process's own Translator."""
    if not tasks:
        return
    with stop_signals_held():
        translator = Translator.from_files(options.models, options.translator)
    for task in tasks:
        done(task.number, translate_shard(translator, task, options.output_format == "json",
                                          options.errors))


def _translate_in_workers(options: CorpusOptions, tasks: list[ShardTask], done) -> int:
    """The shards of `tasks` translated by worker processes, handed out in order; a
    shard whose worker died is translated again, once. Returns how many were redone."""
    resolved = options.translator.resolved()
    processes = min(resolved.workers, len(tasks))
    # Each worker decodes one batch at a time on its share of the cores, the batch as
    # large as `nmt translate` would make it for that many workers.
    worker_options = replace(resolved, workers=1)
    cores = decoding_threads(resolved.workers, resolved.device)
    context = multiprocessing.get_context("spawn")
    pending = {task.number: task for task in tasks}
    died: set[int] = set()
    unseen = 0  # pools broken before a worker said which shard it had started
    while pending:
        started = context.Queue()
        pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker,
                                   initargs=(options.models, worker_options, cores,
                                             options.output_format == "json",
                                             options.errors, started))
        try:
            futures = {pool.submit(_work, task): number for number, task in pending.items()}
            broken = False
            while futures and not broken:
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in finished:
                    number = futures.pop(future)
                    try:
                        record = future.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    del pending[number]
                    done(number, record)
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        lost = [number for number in _drain(started) if number in pending]
        unseen += bool(pending and not lost)
        if unseen > 1:
            raise UserError("the worker processes ended before translating a shard (their "
                            "error is above); fix it and run the command again")
        for number in lost:
            if number in died:
                raise UserError(f"{describe_shard(read_manifest(Path(options.out)), number)}:"
                                " its worker process died twice (out of memory?); run the "
                                "command again to retry, or with fewer --workers")
            died.add(number)
    return len(died)


def _drain(started: Any) -> list[int]:
    """The shard numbers the workers said they started."""
    numbers = []
    while True:
        try:
            numbers.append(started.get(timeout=0.2))
        except queue.Empty:
            return numbers


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers at once (an interrupt, an error): their shards' temporary
    files are left for the next run's writer to remove."""
    for process in list((pool._processes or {}).values()):  # no public handle on them
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _started_path(task: ShardTask) -> Path:
    """The mark a Ray actor leaves while it translates `task`, counting the actors given
    it: found by the next one, it says that the shard is being redone."""
    return Path(task.output).with_suffix(".started")


def _start_ray_shard(task: ShardTask) -> bool:
    """Count an attempt at `task` in its mark; whether it is being redone. UserError
    when it has had RAY_ATTEMPTS already."""
    started = _started_path(task)
    started.parent.mkdir(parents=True, exist_ok=True)
    try:
        attempts = int(json.loads(started.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError, TypeError):
        attempts = 0
    if attempts >= RAY_ATTEMPTS:
        started.unlink()
        raise UserError(f"shard {task.number} ({task.path} lines {task.start + 1}-"
                        f"{task.end}): its Ray actor died {attempts} times (out of "
                        "memory?); run the command again to retry, or with fewer --workers")
    write_json_atomic(started, attempts + 1)
    return attempts > 0


class _RayShardTranslator:
    """A Ray Data actor: one Translator, built once on its share of the cores, translating
    a batch of shard rows into their files and records."""

    def __init__(self, models: tuple[str, ...], options: TranslatorOptions, cores: int,
                 as_json: bool, errors: str) -> None:
        use_cores(cores)
        self.translator = Translator.from_files(models, options)
        self.as_json, self.errors = as_json, errors

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        fields = ShardTask.__dataclass_fields__
        rows: list[dict[str, Any]] = []
        for values in zip(*(batch[name] for name in fields)):
            task = ShardTask(*(getattr(value, "item", lambda: value)() for value in values))
            redone = _start_ray_shard(task)
            record = translate_shard(self.translator, task, self.as_json, self.errors)
            _started_path(task).unlink()
            rows.append({"number": task.number, **record, "redone": redone})
        return {key: np.array([row[key] for row in rows]) for key in
                ("number", "sha256", "sentences", "tokens", "redone")}


def _translate_with_ray(options: CorpusOptions, tasks: list[ShardTask], done) -> int:
    """The shards of `tasks` as a Ray Data dataset, one row each, translated by a pool of
    Ray actors (`--workers` of them, each on its share of this machine's cores); Ray
    Data restarts an actor that dies and retries its shard (its default, which
    `_start_ray_shard` bounds). Ray is started here and stopped after, unless it is
    running already. Returns how many shards were redone."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'transformer-nmt[ray]'") from None
    resolved = options.translator.resolved()
    actors = min(resolved.workers, len(tasks))
    cores = decoding_threads(resolved.workers, resolved.device)
    started_here = not ray.is_initialized()
    if started_here:
        if options.ray_address is None:
            ray.init(num_cpus=actors * cores, include_dashboard=False)
        else:
            ray.init(address=options.ray_address)
    try:
        # Ray Data keeps half of the cluster's CPUs in reserve for other operators by
        # default, and queues up to four rows on the first actor that is ready: on one
        # machine started for this job, either ran one actor of --workers at a time
        # (bench/RESULTS.md, "translate-corpus against nmt translate"). A shard is long
        # work: one at a time per actor, no reserve.
        ray.data.DataContext.get_current().op_resource_reservation_enabled = False
        rows = [asdict(task) for task in tasks]
        shards = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            _RayShardTranslator, batch_size=1, num_cpus=cores,
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            fn_constructor_args=(options.models, replace(resolved, workers=1), cores,
                                 options.output_format == "json", options.errors))
        redone = 0
        try:
            for row in shards.iter_rows():
                redone += bool(row["redone"])
                done(int(row["number"]), {"sha256": str(row["sha256"]),
                                          "sentences": int(row["sentences"]),
                                          "tokens": int(row["tokens"])})
        except ray.exceptions.RayError as error:
            raise _user_error_in(error) or error
        return redone
    finally:
        if started_here:
            ray.shutdown()


def _user_error_in(error: BaseException) -> UserError | None:
    """The UserError an actor raised, found among the causes Ray wraps it in."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if type(error) is UserError:
            return error
        seen.add(id(error))
        error = getattr(error, "cause", None) or error.__cause__
    return None


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
