"""Batching across requests: every request's sentences wait in one queue, and decoding
slots translate them in batches that mix requests.

A batch holds sentences searched with the same settings (beam, alpha, n-best,
alignments): the oldest waiting one, then those closest to its length (less padding,
and no short sentence waiting for a long one), up to the Translator's batch size and a
token budget. There are as many slots as the Translator has workers, each a thread on its
share of the cores (a lone batch gets them all); a slot takes the next batch as soon as
its last one is done, so new requests never wait for a whole round of batches. When a
slot is free and the queue is short, a sentence waits at most `max_wait_s` for company.
Decoding never runs on the event loop, so the server keeps answering while it decodes.
The Translator pads each batch, so a sentence's translation does not depend on what else
was in its batch; a sampled one is seeded by its position in its own request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.translator import Translation, TranslationRequest, Translator
from transformer_nmt.serve.metrics import ServerMetrics

logger = logging.getLogger(__name__)
T = TypeVar("T")


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the caller should retry later."""


@dataclass(frozen=True)
class SearchKey:
    """The settings a batch's sentences share."""

    decode: DecodeConfig
    alignments: bool


@dataclass
class _Piece:
    """Consecutive sentences of one request, all within one batch."""

    key: SearchKey
    lines: list[str | TranslationRequest]
    first: int
    """The position of its first line in its request: positions seed the samples."""
    tokens: int
    future: asyncio.Future
    arrived: float


class Batcher:
    """Translates sentences of concurrent requests in shared batches, in one thread."""

    def __init__(self, translator: Translator, metrics: ServerMetrics, *,
                 max_batch_tokens: int, max_wait_s: float, max_queue: int) -> None:
        self.translator = translator
        self.metrics = metrics
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_sentences = translator.options.batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.slots = translator.options.workers
        self.queued_sentences = 0
        self._pending: deque[_Piece] = deque()
        self._wakeup = asyncio.Event()
        # One thread per slot, kept for the server's life. Only the lead slot (0) ever
        # decodes on more than one thread: OpenMP spins its idle workers only while no
        # more threads run parallel regions than there are cores.
        self._slot_threads = [ThreadPoolExecutor(1, thread_name_prefix=f"nmt-slot{slot}")
                              for slot in range(self.slots)]
        self._free_slots = list(range(self.slots))
        self._decoding: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start forming and decoding batches on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._task.add_done_callback(self._loop_ended)

    @property
    def alive(self) -> bool:
        """Whether batches are being formed: started and the loop has not died."""
        return self._task is not None and not self._task.done()

    def _loop_ended(self, task: asyncio.Task) -> None:
        """A loop that failed is logged with its traceback, and the sentences waiting
        get its error rather than waiting for a batch that never comes."""
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        logger.error("the batcher's loop failed; no more batches will be decoded",
                     exc_info=error)
        while self._pending:
            piece = self._pending.popleft()
            self._dequeued(len(piece.lines))
            if not piece.future.done():
                piece.future.set_exception(error)

    async def stop(self) -> None:
        """Finish every queued sentence, then stop."""
        while self._pending or len(self._free_slots) < self.slots:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for thread in self._slot_threads:
            thread.shutdown(wait=True)

    async def translate(self, lines: list[str | TranslationRequest], tokens: list[int],
                        key: SearchKey) -> list[list[Translation]]:
        """The translations of `lines` (with `tokens` source tokens each; a line may carry
        terminology constraints), in order.
        QueueFull if the queue cannot take them; cancelling the call withdraws those
        not yet being decoded."""
        if not lines:
            return []
        if self.queued_sentences + len(lines) > self.max_queue:
            raise QueueFull(f"{self.queued_sentences} sentences are waiting (max_queue "
                            f"{self.max_queue})")
        loop = asyncio.get_running_loop()
        pieces = []
        for start, end in _spans(tokens, self.max_batch_tokens, self.max_batch_sentences):
            piece = _Piece(key, lines[start:end], start, sum(tokens[start:end]),
                           loop.create_future(), time.monotonic())
            pieces.append(piece)
            self._pending.append(piece)
        self.queued_sentences += len(lines)
        self.metrics.queue.set(self.queued_sentences)
        self._wakeup.set()
        try:
            results = await asyncio.gather(*(piece.future for piece in pieces))
        except BaseException:
            for piece in pieces:
                piece.future.cancel()
            raise
        return [translations for result in results for translations in result]

    async def run_in_decoder(self, function: Callable[..., T], *args: Any,
                             slot: int = 0) -> T:
        """`function(*args)` in a decoding slot's thread (the lead slot unless told),
        between its batches: work that uses the model (attention maps) runs off the
        event loop and never beside that slot's batches."""
        return await asyncio.get_running_loop().run_in_executor(self._slot_threads[slot],
                                                                function, *args)

    async def _loop(self) -> None:
        while True:
            if not self._pending or not self._free_slots:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_company(self._pending[0])
            batch = self._take_batch(self._pending[0].key) if self._pending else []
            if batch:
                slot = self._free_slots.pop(0)  # the lead slot whenever it is free
                task = asyncio.get_running_loop().create_task(self._decode(batch, slot))
                self._decoding.add(task)
                task.add_done_callback(lambda task, slot=slot: self._slot_freed(task, slot))

    def _slot_freed(self, task: asyncio.Task, slot: int) -> None:
        self._decoding.discard(task)
        self._free_slots = sorted(self._free_slots + [slot])
        self._wakeup.set()

    async def _wait_for_company(self, oldest: _Piece) -> None:
        """Until the oldest sentence's key fills a batch or it has waited max_wait_s."""
        while True:
            left = oldest.arrived + self.max_wait_s - time.monotonic()
            same = [piece for piece in self._pending if piece.key == oldest.key]
            if left <= 0 or sum(piece.tokens for piece in same) >= self.max_batch_tokens or \
                    sum(len(piece.lines) for piece in same) >= self.max_batch_sentences:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except asyncio.TimeoutError:  # not the built-in TimeoutError before 3.11
                return

    def _take_batch(self, key: SearchKey) -> list[_Piece]:
        """The oldest piece with `key`, then those closest to its length, within the
        batch size and token budget, out of the queue; pieces whose request went away
        are dropped."""
        for piece in [piece for piece in self._pending if piece.future.done()]:
            self._pending.remove(piece)
            self._dequeued(len(piece.lines))
        candidates = [piece for piece in self._pending if piece.key == key]
        if not candidates:
            return []
        oldest = candidates[0]
        width = oldest.tokens / len(oldest.lines)
        batch, tokens, sentences = [oldest], oldest.tokens, len(oldest.lines)
        for piece in sorted(candidates[1:],
                            key=lambda piece: abs(piece.tokens / len(piece.lines) - width)):
            if tokens + piece.tokens > self.max_batch_tokens or \
                    sentences + len(piece.lines) > self.max_batch_sentences:
                continue
            batch.append(piece)
            tokens += piece.tokens
            sentences += len(piece.lines)
        for piece in batch:
            self._pending.remove(piece)
        return batch

    def _dequeued(self, sentences: int) -> None:
        self.queued_sentences -= sentences
        self.metrics.queue.set(self.queued_sentences)

    async def _decode(self, batch: list[_Piece], slot: int) -> None:
        lines = [line for piece in batch for line in piece.lines]
        key = batch[0].key
        # A batch decoding alone in the lead slot gets every core; batches side by side
        # share them.
        alone = slot == 0 and len(self._free_slots) == self.slots - 1 and not self._pending
        translate = functools.partial(
            self.translator.translate_batch, lines, key.decode, alignments=key.alignments,
            numbers=[piece.first + i for piece in batch for i in range(len(piece.lines))],
            alone=alone)
        started = time.perf_counter()
        try:
            results = await self.run_in_decoder(translate, slot=slot)
        except Exception as error:  # noqa: BLE001 (each waiting request gets the error)
            logger.exception("decoding a batch of %d sentences failed", len(lines))
            for piece in batch:
                if not piece.future.done():
                    piece.future.set_exception(error)
            return
        finally:
            self._dequeued(len(lines))
        seconds = time.perf_counter() - started
        self.metrics.observe_batch(len(lines), sum(piece.tokens for piece in batch),
                                   sum(len(found[0].tokens) for found in results), seconds)
        offset = 0
        for piece in batch:
            if not piece.future.done():
                piece.future.set_result(results[offset: offset + len(piece.lines)])
            offset += len(piece.lines)


def _spans(tokens: list[int], token_budget: int, sentence_budget: int) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive sentences, each within `token_budget` tokens (a
    longer sentence alone) and `sentence_budget` sentences: a long request's pieces can
    then go to several slots."""
    spans = []
    start, total = 0, 0
    for index, count in enumerate(tokens):
        if index > start and (total + count > token_budget or index - start == sentence_budget):
            spans.append((start, index))
            start, total = index, 0
        total += count
    spans.append((start, len(tokens)))
    return spans
