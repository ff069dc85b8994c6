"""One decoding slot's continuous batching: the loop that keeps its engines full.

A driver runs in a slot's thread while it has work; what it needs of the batcher that runs
it is one object (`Host`). Between two steps it takes waiting pieces (sentences of one
request, each with its job: transformer_nmt.decode.text.job) from the batcher's queue, as
many as its engines have room for, encodes them and lets them join (one engine per search
settings, transformer_nmt.decode.continuous.engine); then every engine with rows advances
one step, and each piece whose last sentence ended is finished (guard, confidence) and
handed back to its request. A sentence that arrives while others decode joins at the next
step, rather than waiting for a batch to end. The driver returns when its engines are empty
and nothing waits that it can take; the batcher starts it again when work comes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.text.batches import BatchBudget
from transformer_nmt.decode.continuous.engine import Engine
from transformer_nmt.decode.text.job import CallSettings, Translation, TranslationJob, join_jobs
from transformer_nmt.decode.search.base import Hypothesis
from transformer_nmt.decode.device.threads import torch_threads
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.memory import release_free_memory

logger = logging.getLogger(__name__)

SUSPECT_STEPS = 8
"""Steps a complete piece that the guard will decode again waits for others like it."""
RELEASE_EVERY = 16
"""Steps between two hand-backs of freed memory to the operating system: sentences join
and leave every few steps, each time with caches of new shapes, and glibc kept the
freed blocks: a busy server's memory grew several times past what batches need."""




@dataclass(eq=False)
class Piece:
    """Sentences of one request, all decoded by one slot."""

    job: TranslationJob
    """Its lines' settings, token ids, prefixes and constraints, and their numbers: each
    line's position in its request, which seeds its samples."""
    tokens: int
    """Its source tokens."""
    future: asyncio.Future
    arrived: float
    continuous: bool
    """Whether the engine can search it (else the lockstep searches do, in a batch of
    pieces)."""
    found: dict[int, list[Hypothesis]] = field(default_factory=dict)
    """The hypotheses of its lines that have ended, by line."""

    @property
    def key(self) -> CallSettings:
        """Its settings: pieces with equal ones share batches and engines."""
        return self.job.settings

    @property
    def size(self) -> int:
        """Its lines."""
        return len(self.job.ids)

    @property
    def longest(self) -> int:
        """Source tokens of its longest line."""
        return max(len(ids) for ids in self.job.ids)


class Queue:
    """The pieces waiting, oldest first, shared by the event loop and the drivers; every
    look and change under its lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pieces: deque[Piece] = deque()

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._pieces)

    def put(self, pieces: list[Piece]) -> None:
        """`pieces` wait, after those already waiting."""
        with self._lock:
            self._pieces.extend(pieces)

    def take_all(self) -> list[Piece]:
        """Out of the queue: every piece."""
        with self._lock:
            pieces = list(self._pieces)
            self._pieces.clear()
        return pieces

    def drop_withdrawn(self) -> list[Piece]:
        """Out of the queue: the pieces whose request went away."""
        with self._lock:
            gone = [piece for piece in self._pieces if piece.future.done()]
            for piece in gone:
                self._pieces.remove(piece)
        return gone

    def oldest(self, wanted: Callable[[Piece], bool]) -> Piece | None:
        """The oldest waiting piece that is `wanted`."""
        with self._lock:
            return next((piece for piece in self._pieces if wanted(piece)), None)

    def waiting(self, wanted: Callable[[Piece], bool]) -> list[Piece]:
        """The waiting pieces that are `wanted`, oldest first (left in the queue)."""
        with self._lock:
            return [piece for piece in self._pieces if wanted(piece)]

    def take_batch(self, wanted: Callable[[Piece], bool], budget: BatchBudget) -> list[Piece]:
        """Out of the queue: the oldest `wanted` piece, then the wanted pieces of its
        settings closest to its length, within `budget` (transformer_nmt.decode.text.batches,
        the rule offline batches follow)."""
        with self._lock:
            candidates = [piece for piece in self._pieces if wanted(piece)]
            if not candidates:
                return []
            oldest = candidates[0]
            width = oldest.tokens / oldest.size
            batch, sentences, longest = [oldest], oldest.size, oldest.longest
            for piece in sorted((piece for piece in candidates[1:] if piece.key == oldest.key),
                                key=lambda piece: abs(piece.tokens / piece.size - width)):
                if budget.admits(sentences + piece.size, max(longest, piece.longest)):
                    batch.append(piece)
                    sentences, longest = sentences + piece.size, max(longest, piece.longest)
            for piece in batch:
                self._pieces.remove(piece)
        return batch

    def take_continuous(self, fits: Callable[[Piece], bool]) -> list[Piece]:
        """Out of the queue: the engine's pieces, oldest first, as long as each `fits`
        (withdrawn ones skipped; the batcher drops them)."""
        taken = []
        with self._lock:
            for piece in list(self._pieces):
                if not piece.continuous or piece.future.done():
                    continue
                if not fits(piece):
                    break
                self._pieces.remove(piece)
                taken.append(piece)
        return taken

    def continuous_sentences(self) -> int:
        """Sentences of the engine's pieces waiting."""
        with self._lock:
            return sum(piece.size for piece in self._pieces
                       if piece.continuous and not piece.future.done())


class Decoder(Protocol):
    """Where a slot's engines live and its pieces are finished: the Translator, or the
    slot's process (transformer_nmt.decode.continuous.remote.SlotProcess)."""

    def new_engine(self, decode: DecodeConfig) -> Engine:
        """A continuous-batching engine searching with `decode`."""

    def finish(self, job: TranslationJob, rows: list[int], found: list[list[Hypothesis]]
               ) -> list[list[Translation]]:
        """Translator.finish: the guard's second searches, alignments, confidence."""


class Host(Protocol):
    """What a driver needs of the batcher that runs it."""

    translator: Translator
    queue: Queue
    max_batch_sentences: int
    """Most sentences of one engine."""

    def threads(self) -> int:
        """The torch threads for the next step: its share of the cores."""

    def deep(self) -> bool:
        """Whether the queue is deep: the batcher then decodes it in batches, and drivers
        take no more."""

    def observe_step(self, sentences: int) -> None:
        """A step of `sentences` sentences was decoded (in the driver's thread)."""

    def delivered(self, piece: Piece, result: list | BaseException | None,
                  seconds: float) -> None:
        """`piece` is done: its translations, an error, or None for a withdrawn piece,
        `seconds` after it joined (on the event loop)."""

    def wake(self) -> None:
        """Pieces wait that this driver has no room for (on the event loop)."""


class Driver:
    """The engines of one decoding slot, and the pieces they are decoding."""

    def __init__(self, host: Host, loop: asyncio.AbstractEventLoop,
                 decoder: Decoder | None = None) -> None:
        """A driver taking pieces from host.queue, decoding them with the engines of
        `decoder` (None: host.translator; else the slot's process), and handing them
        back to `host` through `loop`."""
        self.host, self.loop = host, loop
        self.translator, self.queue = host.translator, host.queue
        self.decoder = host.translator if decoder is None else decoder
        self.max_sentences = host.max_batch_sentences
        self.engines: dict[CallSettings, Engine] = {}
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
                # Admissions (the encoder) and finishing (the guard's second searches) on
                # the slot's share of the cores too, as the steps: a slot's threads beyond
                # its share stall the parallel regions of the slots beside it.
                with torch_threads(self.host.threads()):
                    self._admit()
                if not self.pieces:
                    release_free_memory()
                    return
                with torch_threads(self.host.threads()):
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

    def _sentences(self, key: CallSettings) -> int:
        engine = self.engines.get(key)
        return 0 if engine is None else engine.rows // engine.k

    def _fits(self, piece: Piece) -> bool:
        present = self._sentences(piece.key)
        return present == 0 or present + len(piece.job.searched) <= self.max_sentences

    def _admit(self) -> None:
        """Waiting pieces join their engines while there is room (none while the queue
        is deep: the batcher then decodes it in batches)."""
        taken = [] if self.host.deep() else self.queue.take_continuous(self._fits)
        joining: dict[CallSettings, list[tuple[Piece, int]]] = {}
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
                engine = self.engines[key] = self.decoder.new_engine(key.decode)
            engine.add(self.translator.source_tensor([piece.job.ids[line]
                                                      for piece, line in lines]),
                       [(id(piece), line) for piece, line in lines])
        full = self.queue.continuous_sentences() > 0
        if full and not self.full:
            self.loop.call_soon_threadsafe(self.host.wake)
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
                self.host.observe_step(engine.rows // engine.k)
                for (piece_id, line), hypotheses in engine.step():
                    by_id[piece_id].found[line] = hypotheses
        self._finish_complete()

    def _finish_complete(self) -> None:
        """Pieces whose every line has ended are finished and handed back; those the
        guard will decode again wait for company (`_ready`)."""
        complete = [p for p in self.pieces if len(p.found) == len(p.job.searched)]
        by_key: dict[CallSettings, list[Piece]] = {}
        for piece in self._ready(complete):
            by_key.setdefault(piece.key, []).append(piece)
        for pieces in by_key.values():
            # Finished together: the guard's second searches run once for all of them.
            job, starts = join_jobs([piece.job for piece in pieces])
            rows = [start + line for piece, start in zip(pieces, starts)
                    for line in piece.job.searched]
            found = [piece.found[line] for piece in pieces for line in piece.job.searched]
            results = job.in_order(dict(zip(rows, self.decoder.finish(job, rows, found))))
            for piece, start in zip(pieces, starts):
                self._deliver(piece, results[start:start + piece.size])

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
        self.loop.call_soon_threadsafe(self.host.delivered, piece, result, seconds)
