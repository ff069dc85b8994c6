"""A decoding slot in its own process: continuous-batching engines and lockstep batches
decoded by a spawned process that holds its own Translator of the model files, for a
server whose event loop and other slots should not wait for the slot's Python.

The parent keeps everything else: the HTTP, the queue and the admissions. What crosses
the pipe is small: a joining sentence's token ids and ticket; after every step, the
sentences that ended (their hypotheses: token ids and scores); a piece's hypotheses to
finish (the guard's second searches, alignments, confidence) and a batch's job (token
ids and settings), each answered with Translations. The process steps its engines
without waiting to be asked (a round trip per step made a lone sentence 1.18x as slow),
answering requests between two steps; the slot's thread in the parent waits on the pipe
without holding the interpreter.

`SlotProcess` is the process, with the Translator's `new_engine`, `finish` and
`translate_job`; `RemoteEngine` speaks the Engine's interface
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
    one worker, threads in the process), engines by number, batches on request. Its
    engines step on their own while they have rows, each step reported back
    (`reports`); requests are answered between two steps, in order, one at a time (a
    lock). `close` ends it (also when this is collected)."""

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
        self._rows: dict[int, int] = {}  # each engine's rows, as its last message said
        self._reports: dict[int, list] = {}  # each engine's steps not yet taken
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
            self._send((kind, args, forgotten, torch.get_num_threads()))
            answer = None
            while answer is None:
                answer = self._receive()
        _, ok, value = answer
        if not ok:
            raise value
        return value

    def reports(self, number: int) -> list:
        """What engine `number`'s steps since the last look gave, in order: each the
        sentences that ended (or the error that ended the engine); waits for a step
        while the engine has rows and none came."""
        with self._lock:
            while not self._reports.get(number) and self._rows.get(number, 0):
                if self._receive() is not None:
                    raise RuntimeError("a slot process answered a request nobody made")
            return self._reports.pop(number, [])

    def rows(self, number: int) -> int:
        """Engine `number`'s rows, and at least one while steps wait to be taken."""
        return max(self._rows.get(number, 0), 1 if self._reports.get(number) else 0)

    def set_rows(self, number: int, rows: int) -> None:
        """Engine `number` has `rows` rows, as the answer just received says (a later
        step's report says it again)."""
        self._rows[number] = rows

    def discard(self, number: int, tickets: set[Hashable]) -> None:
        """Leave the sentences `tickets` out of engine `number`'s reports not yet taken."""
        with self._lock:
            for ended in self._reports.get(number, []):
                if isinstance(ended, list):
                    ended[:] = [(ticket, found) for ticket, found in ended
                                if ticket not in tickets]

    def new_engine(self, decode: DecodeConfig) -> "RemoteEngine":
        """A new continuous-batching engine in the process searching with `decode`."""
        number = next(self._numbers)
        self.call("new_engine", number, decode)
        return RemoteEngine(self, number, decode.beam)

    def translate_job(self, job: TranslationJob, workers: int, side_by_side: int
                      ) -> list[list[Translation]]:
        """Translator.translate_job(job, workers, side_by_side) in the process."""
        return self.call("translate_job", job, workers, side_by_side)

    def finish(self, job: TranslationJob, rows: list[int], found: list[list[Hypothesis]]
               ) -> list[list[Translation]]:
        """Translator.finish(job, rows, found) in the process: the guard's second searches
        decode there."""
        return self.call("finish", job, rows, found)

    def close(self) -> None:
        """End the process (it finishes the step or call it is at first)."""
        self._closing()

    def _send(self, message: tuple) -> None:
        try:
            self._connection.send(message)
        except OSError:
            raise _ended() from None

    def _receive(self) -> tuple | None:
        """The next message: an answer, returned; or a step's report, kept (None)."""
        try:
            message = self._connection.recv()
        except (EOFError, OSError):
            raise _ended() from None
        if message[0] == "answer":
            return message
        _, number, ended, rows = message
        self._rows[number] = rows
        self._reports.setdefault(number, []).append(ended)
        return None


def _ended() -> UserError:
    return UserError("a decoding slot's process ended (out of memory? its error, if any, is "
                     "above); start the server again, with --no-worker-processes to decode "
                     "in threads")


class RemoteEngine:
    """An Engine that lives in a SlotProcess: the same `rows`, `k`, `add`, `step` and
    `drop`, on as many threads as the calling thread's torch has (the driver's share of
    the cores). The process steps it while it has rows, without waiting to be asked:
    `step` takes the steps done since the last call, or waits for one."""

    def __init__(self, process: SlotProcess, number: int, k: int) -> None:
        self.process, self.number, self.k = process, number, k
        # A list's append, not a call: a finalizer may run inside a call of this thread.
        weakref.finalize(self, process.forgotten.append, number)

    @property
    def rows(self) -> int:
        """Rows of the sentences present (beam per sentence), or at least one while
        steps done are not yet taken."""
        return self.process.rows(self.number)

    def add(self, src: Tensor, tickets: list[Hashable]) -> None:
        """Sentences src (new, src_len) join at the next step, named by their tickets."""
        # As lists of ids: a tensor would cross as a shared file descriptor, a detour of
        # several system calls for a few hundred bytes.
        self.process.set_rows(self.number,
                              self.process.call("add", self.number, src.tolist(), tickets))

    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """The sentences that ended at the steps done since the last call (at least one
        step while there are rows), with their hypotheses."""
        ended = []
        for report in self.process.reports(self.number):
            if isinstance(report, BaseException):
                raise report
            ended += report
        return ended

    def drop(self, tickets: set[Hashable]) -> None:
        """The sentences with these tickets leave without a result."""
        self.process.set_rows(self.number, self.process.call("drop", self.number, tickets))
        self.process.discard(self.number, tickets)


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
    """The process: step every engine with rows, report each step, and answer the
    requests waiting between two steps, until told to close or the parent goes."""
    enter_worker_process(cores)
    try:
        translator, failure = make(paths, options), None
    except UserError as error:
        translator, failure = None, error  # each request's answer: the user's one line
    engines: dict[int, Any] = {}
    while True:
        stepping = [number for number, engine in engines.items() if engine.rows]
        try:
            if stepping and not connection.poll():
                for number in stepping:
                    connection.send(("report", number, *_step(engines, number)))
                continue
        except OSError:  # the server has gone
            return
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
            answer = ("answer", True, _answer(translator, engines, kind, args))
        except Exception as error:  # noqa: BLE001 - sent to the caller, raised there
            answer = ("answer", False, error)
        try:
            connection.send(answer)
        except OSError:  # the server has gone
            return
        except Exception as error:  # noqa: BLE001 - an error that does not pickle
            connection.send(("answer", False, RuntimeError(f"{type(error).__name__}: {error}")))


def _step(engines: dict[int, Any], number: int) -> tuple[list | Exception, int]:
    """One step of engine `number`: (the sentences that ended, its rows after), or (the
    error, 0) for an engine that failed, which is forgotten."""
    try:
        return engines[number].step(), engines[number].rows
    except Exception as error:  # noqa: BLE001 - its driver raises it
        del engines[number]
        return error, 0


def _answer(translator: Any, engines: dict[int, Any], kind: str, args: tuple) -> Any:
    """What request `kind` with `args` returns, done in this process."""
    if kind == "new_engine":
        number, decode = args
        engines[number] = translator.new_engine(decode)
        return None
    if kind == "translate_job":
        return translator.translate_job(*args)
    if kind == "finish":
        return translator.finish(*args)
    engine = engines[args[0]]
    if kind == "add":
        engine.add(torch.tensor(args[1], device=translator.options.device), args[2])
    elif kind == "drop":
        engine.drop(args[1])
    else:
        raise ValueError(f"unknown request {kind!r}")
    return engine.rows
