"""A decoding slot in its own process: continuous-batching engines and lockstep batches
decoded by a spawned process that holds its own Translator of the model files, for a
server whose event loop and other slots should not wait for the slot's Python.

The parent keeps everything else: the HTTP, the queue and the admissions. What crosses
the pipe is small: a joining sentence's token ids and ticket, one message per step
answered with the sentences that ended (their hypotheses: token ids and scores), a
piece's hypotheses to finish (the guard's second searches, alignments, confidence) and a
batch's job (token ids and settings), each answered with Translations. The slot's thread in the parent waits on the pipe without
holding the interpreter.

`SlotProcess` is the process; `RemoteEngine` speaks the Engine's interface
(transformer_nmt.decode.continuous.engine) through it, so that a driver cannot tell the
two apart.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import weakref
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.base import Hypothesis
from transformer_nmt.decode.text.job import Translation, TranslationJob
from transformer_nmt.decode.text.options import TranslatorOptions
from transformer_nmt.decode.text.processes import enter_worker_process
from transformer_nmt.errors import UserError

Make = Callable[[tuple[str, ...], TranslatorOptions], Any]
"""How the process makes its Translator of model files (Translator.from_files)."""


class SlotProcess:
    """One spawned process decoding for one slot: make(`paths`, `options`) (options with
    one worker, threads in the process), engines by number, batches on request. Calls
    are answered in order, one at a time (a lock); `close` ends it (also when this is
    collected)."""

    def __init__(self, make: Make, paths: Sequence[str | Path], options: TranslatorOptions,
                 cores: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        options = replace(options, workers=1, worker_processes=False)
        self._process = context.Process(
            target=_slot_main, name="nmt-slot",
            args=(child, make, tuple(str(path) for path in paths), options, cores), daemon=True)
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self.forgotten: list[int] = []
        """Engines no longer used, forgotten by the process with the next call."""
        self._closing = weakref.finalize(self, _end, self._connection, self._process)

    def call(self, kind: str, *args: Any) -> Any:
        """The process's answer to one request, worked out on as many threads as the
        calling thread's torch has (its share of the cores); its error raised here
        (UserError if the process is gone)."""
        with self._lock:
            forgotten = []
            while self.forgotten:  # pop, not a copy and clear: a finalizer may append
                forgotten.append(self.forgotten.pop())
            try:
                self._connection.send((kind, args, forgotten, torch.get_num_threads()))
                ok, value = self._connection.recv()
            except (EOFError, OSError):
                raise UserError("a decoding slot's process ended (out of memory? its error, "
                                "if any, is above); start the server again, with "
                                "--no-worker-processes to decode in threads") from None
        if not ok:
            raise value
        return value

    def engine(self, decode: DecodeConfig) -> "RemoteEngine":
        """A new continuous-batching engine in the process searching with `decode`."""
        number = next(self._numbers)
        self.call("new_engine", number, decode)
        return RemoteEngine(self, number, decode.beam)

    def translate_job(self, job: TranslationJob, side_by_side: int) -> list[list[Translation]]:
        """Translator.translate_job(job, 1, side_by_side) in the process."""
        return self.call("translate_job", job, side_by_side)

    def finish(self, job: TranslationJob, rows: list[int], found: list[list[Hypothesis]]
               ) -> list[list[Translation]]:
        """Translator.finish(job, rows, found) in the process: the guard's second searches
        decode there."""
        return self.call("finish", job, rows, found)

    def close(self) -> None:
        """End the process (it finishes the call it is answering first)."""
        self._closing()


class RemoteEngine:
    """An Engine that lives in a SlotProcess: the same `rows`, `k`, `add`, `step` and
    `drop`, each on as many threads as the calling thread's torch has then (the driver's
    share of the cores)."""

    def __init__(self, process: SlotProcess, number: int, k: int) -> None:
        self.process, self.number, self.k = process, number, k
        self.rows = 0
        """Rows decoded at the next step: beam per sentence present."""
        # A list's append, not a call: a finalizer may run inside a call of this thread.
        weakref.finalize(self, process.forgotten.append, number)

    def add(self, src: Tensor, tickets: list[Hashable]) -> None:
        """Sentences src (new, src_len) join at the next step, named by their tickets."""
        # As lists of ids: a tensor would cross as a shared file descriptor, a detour of
        # several system calls for a few hundred bytes.
        self.rows = self.process.call("add", self.number, src.tolist(), tickets)

    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Advance every row by one token; the sentences that ended, with their
        hypotheses."""
        if not self.rows:
            return []
        ended, self.rows = self.process.call("step", self.number)
        return ended

    def drop(self, tickets: set[Hashable]) -> None:
        """The sentences with these tickets leave without a result."""
        self.rows = self.process.call("drop", self.number, tickets)


def _end(connection: Connection, process: multiprocessing.Process) -> None:
    try:
        connection.send(("close", (), [], 1))
    except OSError:
        pass
    process.join(timeout=10)
    if process.is_alive():
        process.terminate()
    connection.close()


def _slot_main(connection: Connection, make: Make, paths: tuple[str, ...],
               options: TranslatorOptions, cores: int) -> None:
    """The process: answer every request until told to close or the parent goes."""
    enter_worker_process(cores)
    try:
        translator, failure = make(paths, options), None
    except UserError as error:
        translator, failure = None, error  # each request's answer: the user's one line
    engines: dict[int, Any] = {}
    while True:
        try:
            kind, args, forgotten, threads = connection.recv()
        except (EOFError, OSError):
            return
        if kind == "close":
            return
        for number in forgotten:
            engines.pop(number, None)
        if torch.get_num_threads() != threads:
            # Changed only when the share changes: every thread beyond the cores' share
            # stalls the parallel regions of the slots beside this one.
            torch.set_num_threads(threads)
        try:
            if failure is not None:
                raise failure
            answer = (True, _answer(translator, engines, kind, args))
        except Exception as error:  # noqa: BLE001 - sent to the caller, raised there
            answer = (False, error)
        try:
            connection.send(answer)
        except Exception as error:  # noqa: BLE001 - an error that does not pickle
            connection.send((False, RuntimeError(f"{type(error).__name__}: {error}")))


def _answer(translator: Any, engines: dict[int, Any], kind: str, args: tuple) -> Any:
    """What request `kind` with `args` returns, done in this process."""
    if kind == "new_engine":
        number, decode = args
        engines[number] = translator.new_engine(decode)
        return None
    if kind == "translate_job":
        job, side_by_side = args
        return translator.translate_job(job, 1, side_by_side)
    if kind == "finish":
        return translator.finish(*args)
    engine = engines[args[0]]
    if kind == "add":
        engine.add(torch.tensor(args[1], device=translator.options.device), args[2])
    elif kind == "step":
        return engine.step(), engine.rows
    elif kind == "drop":
        engine.drop(args[1])
    else:
        raise ValueError(f"unknown request {kind!r}")
    return engine.rows
