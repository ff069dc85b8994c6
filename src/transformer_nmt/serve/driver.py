"""One decoding slot's continuous batching: the loop that keeps its engines full.

A driver runs in a slot's thread while it has work. Between two steps it takes waiting
pieces (consecutive sentences of one request) from the batcher's queue, as many as its
engines have room for, encodes them and lets them join (one engine per search settings,
transformer_nmt.decode.engine); then every engine with rows advances one step, and each
piece whose last sentence ended is finished (guard, confidence) and handed back to its
request. A sentence that arrives while others decode joins at the next step, rather than
waiting for a batch to end. The driver returns when its engines are empty and nothing
waits that it can take; the batcher starts it again when work comes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.engine import Engine
from transformer_nmt.decode.job import TranslationJob
from transformer_nmt.decode.search_base import Hypothesis
from transformer_nmt.decode.threads import torch_threads
from transformer_nmt.decode.translator import Translator
from transformer_nmt.memory import release_free_memory

logger = logging.getLogger(__name__)

SUSPECT_STEPS = 8
"""Steps a complete piece that the guard will decode again waits for others like it."""
RELEASE_EVERY = 16
"""Steps between two hand-backs of freed memory to the operating system: sentences join
and leave every few steps, each time with caches of new shapes, and glibc kept the
freed blocks: a busy server's memory grew several times past what batches need."""


@dataclass(frozen=True)
class SearchKey:
    """The settings a batch's sentences share."""

    decode: DecodeConfig
    alignments: bool


@dataclass(eq=False)
class Piece:
    """Consecutive sentences of one request, all decoded by one slot."""

    key: SearchKey
    lines: list
    """Its lines (text, or a TranslationRequest)."""
    first: int
    """The position of its first line in its request: positions seed the samples."""
    tokens: int
    future: asyncio.Future
    arrived: float
    job: TranslationJob | None = None
    """Its lines' token ids and translations, when the engine searches them (else None:
    the lockstep searches do, in a batch of pieces)."""
    found: dict[int, list[Hypothesis]] = field(default_factory=dict)
    """The hypotheses of its lines that have ended, by line."""


class Queue:
    """The pieces waiting, oldest first, shared by the event loop and the drivers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pieces: deque[Piece] = deque()

    def take_continuous(self, fits: Callable[[Piece], bool]) -> list[Piece]:
        """Out of the queue: the engine's pieces, oldest first, as long as each `fits`
        (withdrawn ones skipped; the batcher drops them)."""
        taken = []
        with self.lock:
            for piece in list(self.pieces):
                if piece.job is None or piece.future.done():
                    continue
                if not fits(piece):
                    break
                self.pieces.remove(piece)
                taken.append(piece)
        return taken

    def waiting_continuous(self) -> bool:
        """Whether a piece for the engine waits."""
        return self.continuous_sentences() > 0

    def continuous_sentences(self) -> int:
        """Sentences of the engine's pieces waiting."""
        with self.lock:
            return sum(len(piece.lines) for piece in self.pieces
                       if piece.job is not None and not piece.future.done())

    def deep(self, sentences: int) -> bool:
        """Whether at least `sentences` of the engine's sentences wait: then batches
        sorted by length serve them better than the engines (see the batcher)."""
        return self.continuous_sentences() >= sentences


class Driver:
    """The engines of one decoding slot, and the pieces they are decoding."""

    def __init__(self, translator: Translator, queue: Queue, loop: asyncio.AbstractEventLoop,
                 *, max_sentences: int, threads: Callable[[], int],
                 delivered: Callable[[Piece, list | BaseException | None, float], None],
                 wake: Callable[[], None], observe_step: Callable[[int], None],
                 deep_queue: int) -> None:
        """max_sentences: per engine; threads: the torch threads for the next step (its
        share of the cores); delivered(piece, its translations, an error or None for a
        withdrawn piece, seconds since it joined) and wake() (pieces wait that this
        driver has no room for) are called on the event loop; observe_step(sentences)
        after each step, in the driver's thread. deep_queue: waiting sentences at which
        the driver stops taking more and the batcher decodes them in batches."""
        self.translator, self.queue, self.loop = translator, queue, loop
        self.max_sentences, self.threads = max_sentences, threads
        self.delivered, self.wake, self.observe_step = delivered, wake, observe_step
        self.deep_queue = deep_queue
        self.engines: dict[SearchKey, Engine] = {}
        self.pieces: list[Piece] = []
        self.joined: dict[int, float] = {}
        self.steps = 0
        self.suspect_since: dict[int, int] = {}
        """The step at which each complete piece waiting for the guard's search ended."""
        self.full = False
        """Whether the last admission left engine pieces waiting for room."""

    def run(self) -> None:
        """Admit, step and finish until the engines are empty and nothing waits."""
        try:
            while True:
                self._admit()
                if not self.pieces:
                    release_free_memory()
                    return
                with torch_threads(self.threads()):
                    self._step()
                self.steps += 1
                if self.steps % RELEASE_EVERY == 0:
                    release_free_memory()
        except Exception as error:  # noqa: BLE001 (each request in flight gets the error)
            logger.exception("continuous decoding failed for %d requests' pieces",
                             len(self.pieces))
            for piece in list(self.pieces):
                self._deliver(piece, error)
            self.engines = {}

    def _sentences(self, key: SearchKey) -> int:
        engine = self.engines.get(key)
        return 0 if engine is None else engine.rows // engine.k

    def _fits(self, piece: Piece) -> bool:
        present = self._sentences(piece.key)
        return present == 0 or present + len(piece.job.searched) <= self.max_sentences

    def _admit(self) -> None:
        """Waiting pieces join their engines while there is room (none while the queue
        is deep: the batcher then decodes it in batches)."""
        taken = [] if self.queue.deep(self.deep_queue) else self.queue.take_continuous(self._fits)
        joining: dict[SearchKey, list[tuple[Piece, int]]] = {}
        for piece in taken:
            self.joined[id(piece)] = time.perf_counter()
            self.pieces.append(piece)
            joining.setdefault(piece.key, []).extend(
                (piece, line) for line in piece.job.searched)
        # The pieces that arrived since the last step join together: one encoder pass.
        for key, lines in joining.items():
            if not lines:
                continue
            engine = self.engines.get(key)
            if engine is None:
                engine = self.engines[key] = self.translator.new_engine(key.decode)
            engine.add(self.translator.source_tensor([piece.job.ids[line]
                                                      for piece, line in lines]),
                       [(id(piece), line) for piece, line in lines])
        full = self.queue.waiting_continuous()
        if full and not self.full:
            self.loop.call_soon_threadsafe(self.wake)
        self.full = full
        self._finish_complete()

    def _step(self) -> None:
        """Every engine with rows advances a step; withdrawn pieces leave first."""
        withdrawn = [piece for piece in self.pieces if piece.future.done()]
        if withdrawn:
            gone = {(id(piece), line) for piece in withdrawn for line in piece.job.searched}
            for engine in self.engines.values():
                engine.drop(gone)
            for piece in withdrawn:
                self._deliver(piece, None)
        by_id = {id(piece): piece for piece in self.pieces}
        for engine in self.engines.values():
            if engine.rows:
                self.observe_step(engine.rows // engine.k)
                for (piece_id, line), hypotheses in engine.step():
                    by_id[piece_id].found[line] = hypotheses
        self._finish_complete()

    def _finish_complete(self) -> None:
        """Pieces whose every line has ended are finished and handed back; those the
        guard will decode again wait for company (`_ready`)."""
        complete = [p for p in self.pieces if len(p.found) == len(p.job.searched)]
        by_key: dict[SearchKey, list[Piece]] = {}
        for piece in self._ready(complete):
            by_key.setdefault(piece.key, []).append(piece)
        for pieces in by_key.values():
            # Finished together: the guard's second searches run once for all of them.
            job, rows, found = merged(pieces)
            self.translator.finish(job, rows, found)
            start = 0
            for piece in pieces:
                end = start + len(piece.lines)
                self._deliver(piece, job.results[start:end])
                start = end

    def _ready(self, complete: list[Piece]) -> list[Piece]:
        """The complete pieces to finish now: every sound one, and the suspect ones (the
        guard will search them again) once half a batch's sentences of them wait, the
        oldest has waited SUSPECT_STEPS steps, or nothing else is decoding. A second
        search of one or two sentences at a time pays a whole search's fixed costs for
        each, which made a weak model's server spend far more CPU per sentence than
        batches (bench/RESULTS.md, "Continuous batching in the server"); gathered, they
        search as one batch."""
        ready, suspects = [], []
        for piece in complete:
            if id(piece) not in self.suspect_since:
                rows = piece.job.searched
                if not self.translator.suspect(piece.job, rows, [piece.found[r] for r in rows]):
                    ready.append(piece)
                    continue
                self.suspect_since[id(piece)] = self.steps
            suspects.append(piece)
        waited = max((self.steps - self.suspect_since[id(p)] for p in suspects), default=0)
        lines = sum(len(piece.job.searched) for piece in suspects)
        idle = not any(engine.rows for engine in self.engines.values())
        if suspects and (idle or waited >= SUSPECT_STEPS or
                         lines >= max(self.max_sentences // 2, 1)):
            for piece in suspects:
                del self.suspect_since[id(piece)]
            ready += suspects
        return ready

    def _deliver(self, piece: Piece, result: list | BaseException | None) -> None:
        self.pieces.remove(piece)
        self.suspect_since.pop(id(piece), None)
        seconds = time.perf_counter() - self.joined.pop(id(piece))
        self.loop.call_soon_threadsafe(self.delivered, piece, result, seconds)


def merged(pieces: list[Piece]) -> tuple[TranslationJob, list[int], list[list[Hypothesis]]]:
    """One job of the lines of `pieces` (one search key, searched by the engine: no
    prefixes, no constraints), the rows of it that were searched, and what was found."""
    first = pieces[0].job
    job = TranslationJob(first.settings, [], None, None, [], [])
    rows, found = [], []
    for piece in pieces:
        offset = len(job.ids)
        job.ids += piece.job.ids
        job.numbers += piece.job.numbers
        job.results += piece.job.results
        rows += [offset + line for line in piece.job.searched]
        found += [piece.found[line] for line in piece.job.searched]
    return job, rows, found
