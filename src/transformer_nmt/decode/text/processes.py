"""Batches translated by worker processes rather than threads: each process has its own
Translator of the same model files and its share of the cores; a batch goes out as its
lines' token ids and settings and comes back as their Translations.

Threads of one process share one interpreter, and on a small model a decoding step is
mostly Python around small products: two threads then wait for each other, where two
processes do not (bench/RESULTS.md, "Worker processes"). Processes are spawned, not
forked (OpenMP is not safe across a fork once used), and each loads and prepares the
model itself: the matrices packed for oneDNN are opaque to torch's shared memory, so
every process holds its own prepared copy.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from transformer_nmt.decode.device.threads import use_cores
from transformer_nmt.decode.text.job import Translation, TranslationJob
from transformer_nmt.decode.text.options import TranslatorOptions
from transformer_nmt.errors import UserError


class RowTranslator(Protocol):
    """What a worker process translates with (a Translator)."""

    def translate_rows(self, job: TranslationJob, rows: list[int]) -> list[list[Translation]]:
        """The translations of lines `rows` of `job`, searched as one batch."""


Make = Callable[[tuple[str, ...], TranslatorOptions], RowTranslator]
"""How a worker process makes its translator of model files (Translator.from_files)."""

_WORKER: dict[str, Any] = {}
"""A worker process's translator, made by `_start_worker`."""


PARENT_POLL_S = 1.0
"""How often a worker process looks whether its parent still lives."""


def enter_worker_process(cores: int) -> None:
    """Begin a worker process of a pool that decodes on `cores` cores: Ctrl-C, which
    reaches the whole process group, is left to the parent, which stops the workers; and
    the worker ends with its parent (`end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    use_cores(cores)


def end_with_parent() -> None:
    """End this process within about PARENT_POLL_S of its parent's death, however the
    parent died (SIGKILL, the OOM killer), rather than live on re-parented, holding a
    model in memory. A daemon thread watches the parent's PID: Linux's parent-death
    signal would fire when the parent's thread that spawned this process ends, which for
    a pool may be any thread, not the process."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # nothing to clean up that the parent still waits for

    threading.Thread(target=watch, name="nmt-parent-watch", daemon=True).start()


def terminate_processes(pool: ProcessPoolExecutor) -> None:
    """End `pool`'s worker processes now (an interrupt, an error), whatever they do."""
    for process in list((pool._processes or {}).values()):  # no public handle on them
        process.terminate()


def _start_worker(make: Make, paths: tuple[str, ...], options: TranslatorOptions,
                  cores: int) -> None:
    enter_worker_process(cores)
    try:
        _WORKER["translator"] = make(paths, options)
    except UserError as error:
        # Raised again by each batch, in the parent: the user's one line, not a traceback.
        _WORKER["error"] = error


def _translate(part: TranslationJob) -> list[list[Translation]]:
    if "error" in _WORKER:
        raise _WORKER["error"]
    translator: RowTranslator = _WORKER["translator"]
    return translator.translate_rows(part, list(range(len(part.ids))))


class WorkerProcesses:
    """`processes` spawned worker processes, each translating one batch at a time with
    make(`paths`, `options`) (a Translator of the model files; options resolved, their
    workers set to one) on `cores` threads. Started at once; `close` ends them (also
    when this is collected)."""

    def __init__(self, make: Make, paths: Sequence[str | Path], options: TranslatorOptions,
                 processes: int, cores: int) -> None:
        worker_options = replace(options, workers=1, worker_processes=False)
        self.processes = processes
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(make, tuple(str(path) for path in paths), worker_options, cores))
        self._closing = weakref.finalize(self, _shut_down, self._pool)

    def run(self, job: TranslationJob, batches: list[list[int]]
            ) -> dict[int, list[Translation]]:
        """Each line of `batches` (lines of `job`, one list per batch) mapped to its
        Translations; the batches are handed out in order, one per free process. An
        interrupt or error ends the processes (UserError if one of them died, or the
        processes' own, such as a model file they could not load)."""
        futures: list[Future] = [self._pool.submit(_translate, job.part(batch))
                                 for batch in batches]
        found: dict[int, list[Translation]] = {}
        try:
            for batch, future in zip(batches, futures):
                found.update(zip(batch, future.result()))
        except BrokenProcessPool:
            self.close(at_once=True)
            raise UserError("a decoding worker process ended before its batch was translated "
                            "(out of memory? its error, if any, is above); run the command "
                            "again with --no-worker-processes or fewer --workers") from None
        except BaseException:
            self.close(at_once=True)
            raise
        return found

    def close(self, at_once: bool = False) -> None:
        """End the processes: when their batches are done, or `at_once`."""
        if at_once:
            terminate_processes(self._pool)
        self._closing()


def _shut_down(pool: ProcessPoolExecutor) -> None:
    pool.shutdown(wait=True, cancel_futures=True)
