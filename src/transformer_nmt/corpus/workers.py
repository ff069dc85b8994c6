"""The local backend: the shards handed out in order to worker processes, each with its
own Translator on its share of the cores; a worker that dies takes its shard with it,
and the shard is translated once more. Also a part of the shards translated in this
process (`--shard I/N`)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any

from transformer_nmt.corpus.manifest import read_manifest
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.processes import enter_worker_process, terminate_processes
from transformer_nmt.corpus.shards import ShardTask, describe_shard, translate_shard
from transformer_nmt.decode.device.threads import decoding_threads
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import stop_signals_held

_WORKER: dict[str, Any] = {}
"""A worker process's Translator and settings, made by `_start_worker`."""


def _start_worker(models: tuple[str, ...], options: TranslatorOptions, cores: int,
                  as_json: bool, errors: str, started: Any) -> None:
    enter_worker_process(cores)
    _WORKER.update(translator=Translator.from_files(models, options), as_json=as_json,
                   errors=errors, started=started)


def _work(task: ShardTask) -> dict[str, Any]:
    # Written to the pipe before the shard begins (a SimpleQueue has no feeder thread to
    # die with the process), so that a worker killed at any moment after is known to
    # have taken this shard.
    _WORKER["started"].put(task.number)
    return translate_shard(_WORKER["translator"], task, _WORKER["as_json"], _WORKER["errors"])


def translate_here(options: CorpusOptions, tasks: list[ShardTask], done) -> None:
    """The shards of `tasks` translated by this process's own Translator."""
    if not tasks:
        return
    with stop_signals_held():
        translator = Translator.from_files(options.models, options.translator)
    for task in tasks:
        done(task.number, translate_shard(translator, task, options.output_format == "json",
                                          options.errors))


def translate_in_workers(options: CorpusOptions, tasks: list[ShardTask], done) -> int:
    """The shards of `tasks` translated by worker processes, handed out in order; a
    shard whose worker died is translated again, once. Returns how many were redone."""
    resolved = options.translator.resolved()
    processes = min(resolved.workers, len(tasks))
    # Each worker decodes one batch at a time on its share of the cores, the batch as
    # large as `nmt translate` would make it for that many workers.
    cores = decoding_threads(resolved.workers, resolved.device, resolved.threads)
    worker_options = replace(resolved, workers=1, threads=cores)
    context = multiprocessing.get_context("spawn")
    pending = {task.number: task for task in tasks}
    died: set[int] = set()
    unseen = 0  # pools broken before a worker said which shard it had started
    while pending:
        started = context.SimpleQueue()
        taken: list[int] = []
        pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker,
                                   initargs=(options.models, worker_options, cores,
                                             options.output_format == "json",
                                             options.errors, started))
        try:
            futures = {pool.submit(_work, task): number for number, task in pending.items()}
            broken = False
            while futures and not broken:
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                # Read as they come: a pipe left full would block the workers' next put.
                taken += _drain(started)
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
        lost = [number for number in taken + _drain(started) if number in pending]
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
    """The shard numbers the workers have said they started since the last call (all of
    them once the workers have ended)."""
    numbers = []
    while not started.empty():
        numbers.append(started.get())
    return numbers


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers at once (an interrupt, an error): their shards' temporary
    files are left for the next run's writer to remove."""
    terminate_processes(pool)
    pool.shutdown(wait=True, cancel_futures=True)
