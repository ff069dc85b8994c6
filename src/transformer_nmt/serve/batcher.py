"""Batching across requests: every request's sentences wait in one queue
(serve/queue.py), and decoding slots translate them together, sentences of many requests
in one batch.

A batch is the oldest waiting sentence, then those of its settings closest to its length,
within the budget offline batches have too (transformer_nmt.decode.text.batches: the
Translator's batch size and a token budget). A request is cut into pieces by the same
rule, so that a long one goes to several slots. While nothing decodes a sentence goes at
once, so a lone client never waits; while slots are busy, the oldest waits at most
`max_wait_s` for company, and what arrives meanwhile joins it.

There are as many slots as the Translator has workers, each a thread on its share of
the cores (a lone one gets them all). Decoding never runs on the event loop, so the
server keeps answering while it decodes. A batch whose every request went away stops
between two steps of the PyTorch search (transformer_nmt.decode.search.withdrawal); a
CTranslate2 batch, one call, finishes unread. A sentence's translation does not depend on
what else was decoded beside it; a sampled one is seeded by its position in its own
request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from transformer_nmt.decode.device.policy import decodes_alone
from transformer_nmt.decode.search.withdrawal import Withdrawn, stop_when
from transformer_nmt.decode.text.batches import BatchBudget, length_batches
from transformer_nmt.decode.text.job import CallSettings, join_jobs
from transformer_nmt.decode.text.translator import Translation, TranslationRequest, Translator
from transformer_nmt.serve.queue import Piece, Queue
from transformer_nmt.serve.metrics import ServerMetrics

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Batcher", "QueueFull"]


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the caller should retry later."""


class Batcher:
    """Translates sentences of concurrent requests in shared batches, in slot threads."""

    def __init__(self, translator: Translator, metrics: ServerMetrics, *,
                 max_batch_tokens: int, max_wait_s: float, max_queue: int,
                 busy_elsewhere: Callable[[Batcher], int] | None = None) -> None:
        self.translator = translator
        # Slots at work in other models' batchers of the same server, which share the
        # cores with this one's.
        self.busy_elsewhere = busy_elsewhere or (lambda batcher: 0)
        self.metrics = metrics
        self.max_batch_sentences = translator.options.batch_size
        self.budget = BatchBudget(self.max_batch_sentences, max_batch_tokens)
        """What one batch, and one piece of a request, may hold."""
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.slots = translator.options.workers
        self.queued_sentences = 0
        self.queue = Queue()
        self._wakeup = asyncio.Event()
        # One thread per slot, kept for the server's life, and one for work beside the
        # decoding (attention maps).
        self._slot_threads = [ThreadPoolExecutor(1, thread_name_prefix=f"nmt-slot{slot}")
                              for slot in range(self.slots)]
        self._side_thread = ThreadPoolExecutor(1, thread_name_prefix="nmt-side")
        self._free_slots = list(range(self.slots))
        self._decoding: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start forming and decoding batches on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._task.add_done_callback(self._loop_ended)

    @property
    def busy_slots(self) -> int:
        """Slots decoding now."""
        return self.slots - len(self._free_slots)

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
        for piece in self.queue.take_all():
            self._dequeued(piece.size)
            if not piece.future.done():
                piece.future.set_exception(error)

    async def stop(self) -> None:
        """Finish every queued sentence, then stop."""
        while self.queue or len(self._free_slots) < self.slots:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for thread in self._slot_threads + [self._side_thread]:
            thread.shutdown(wait=True)

    async def translate(self, lines: list[str | TranslationRequest], tokens: list[int],
                        key: CallSettings) -> list[list[Translation]]:
        """The translations of `lines` (with `tokens` source tokens each; a line may carry
        terminology constraints), in order.
        QueueFull if the queue cannot take them; cancelling the call withdraws those
        not yet decoded."""
        if not lines:
            return []
        if self.queued_sentences + len(lines) > self.max_queue:
            raise QueueFull(f"{self.queued_sentences} sentences are waiting (max_queue "
                            f"{self.max_queue})")
        pieces = self._pieces(lines, tokens, key)
        self.queue.put(pieces)
        self.queued_sentences += len(lines)
        self.metrics.queue.inc(len(lines))  # a server's models share the gauge
        self._wakeup.set()
        try:
            results = await asyncio.gather(*(piece.future for piece in pieces))
        except BaseException:
            for piece in pieces:
                piece.future.cancel()
            # The loop drops them now, not when a slot next frees: until then they count
            # against max_queue and others are refused.
            self._wakeup.set()
            raise
        found = {number: translations for piece, result in zip(pieces, results)
                 for number, translations in zip(piece.job.numbers, result)}
        return [found[number] for number in range(len(lines))]

    def _pieces(self, lines: list[str | TranslationRequest], tokens: list[int],
                key: CallSettings) -> list[Piece]:
        """`lines` cut by length into pieces within the budget, each begun (its job) once,
        here, for whichever search decodes it."""
        loop = asyncio.get_running_loop()
        pieces = []
        for rows in length_batches(tokens, range(len(lines)), self.budget):
            job = self.translator.begin([lines[row] for row in rows], key, rows)
            pieces.append(Piece(job, sum(tokens[row] for row in rows), loop.create_future(),
                                time.monotonic()))
        return pieces

    async def run_in_decoder(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a thread beside the decoding slots: work that uses the
        model (attention maps) off the event loop, without waiting for the slots."""
        return await asyncio.get_running_loop().run_in_executor(self._side_thread,
                                                                function, *args)

    async def _loop(self) -> None:
        while True:
            self._drop_withdrawn()
            oldest = self.queue.oldest()
            if not self._free_slots or oldest is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_company(oldest)
            self._drop_withdrawn()
            batch = self.queue.take_batch(self.budget)
            if batch:
                slot = self._free_slots.pop(0)  # the lead slot whenever it is free
                self._run_in_slot(slot, self._decode(batch, slot))

    def _run_in_slot(self, slot: int, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._decoding.add(task)
        task.add_done_callback(lambda task, slot=slot: self._slot_freed(task, slot))

    def _slot_freed(self, task: asyncio.Task, slot: int) -> None:
        self._decoding.discard(task)
        self._free_slots = sorted(self._free_slots + [slot])
        self._wakeup.set()

    def _drop_withdrawn(self) -> None:
        """Pieces whose request went away leave the queue."""
        for piece in self.queue.drop_withdrawn():
            self._dequeued(piece.size)

    async def _wait_for_company(self, oldest: Piece) -> None:
        """Until the oldest sentence's settings fill a batch, it has waited max_wait_s, or
        its request went away (then the next oldest leads). While nothing decodes, here
        or in another model's slots, it goes at once: a lone client never waits, and under
        load the slots' work is what company gathers in."""
        if not self.busy_slots and not self.busy_elsewhere(self):
            return
        while not oldest.future.done():
            left = oldest.arrived + self.max_wait_s - time.monotonic()
            same = self.queue.waiting(oldest.key)
            sentences = sum(piece.size for piece in same)
            # Full: one more sentence of the longest's length would not fit.
            if left <= 0 or not self.budget.admits(
                    sentences + 1, max(piece.longest for piece in same)):
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except asyncio.TimeoutError:  # not the built-in TimeoutError before 3.11
                return

    def _dequeued(self, sentences: int) -> None:
        self.queued_sentences -= sentences
        self.metrics.queue.dec(sentences)

    async def _decode(self, batch: list[Piece], slot: int) -> None:
        job, starts = join_jobs([piece.job for piece in batch])
        alone = decodes_alone(slot, self.busy_slots, bool(self.queue), self.busy_elsewhere(self))

        def decode() -> list[list[Translation]]:
            # Read from the slot's thread: a future's state is a plain attribute.
            with stop_when(lambda: all(piece.future.done() for piece in batch)):
                # A batch decoding alone gets every core; batches side by side share them.
                return self.translator.translate_job(job, 1, 1 if alone else self.slots)

        started = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._slot_threads[slot], decode)
        except Withdrawn:
            logger.info("a batch of %d sentences stopped: every request went away",
                        len(job.ids))
            return
        except Exception as error:  # noqa: BLE001 (each waiting request gets the error)
            logger.exception("decoding a batch of %d sentences failed", len(job.ids))
            for piece in batch:
                if not piece.future.done():
                    piece.future.set_exception(error)
            return
        finally:
            self._dequeued(len(job.ids))
        seconds = time.perf_counter() - started
        self.metrics.observe_batch(len(job.ids), sum(piece.tokens for piece in batch),
                                   sum(len(found[0].tokens) for found in results), seconds)
        for piece, start in zip(batch, starts):
            if not piece.future.done():
                piece.future.set_result(results[start:start + piece.size])
