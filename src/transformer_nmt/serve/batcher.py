"""Batching across requests: every request's sentences wait in one queue, and decoding
slots translate them together, sentences of many requests at once.

Most searches (beam search and greedy, transformer_nmt.decode.engine's `serves`) are
batched continuously: a slot's driver (serve/driver.py) keeps its engines full, a
sentence joins at the next step after it arrives and leaves as soon as it ends, so that
no row decodes empty while work waits and a short sentence never waits for a long one.
A second slot's driver starts when the first has no room for what waits.

The other searches (sampling, forced prefixes, terminology constraints, no-repeat
n-grams) run in batches, as the lockstep searches need: the oldest waiting sentence, then
those closest to its length, up to the Translator's batch size and a token budget; when
a slot is free and the queue is short, a sentence waits at most `max_wait_s` for company.

There are as many slots as the Translator has workers, each a thread on its share of
the cores (a lone one gets them all). Decoding never runs on the event loop, so the
server keeps answering while it decodes. A sentence's translation does not depend on
what else was decoded beside it; a sampled one is seeded by its position in its own
request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from transformer_nmt.decode.threads import decoding_threads
from transformer_nmt.decode.translator import Translation, TranslationRequest, Translator
from transformer_nmt.serve.driver import Driver, Piece, Queue, SearchKey
from transformer_nmt.serve.metrics import ServerMetrics

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Batcher", "QueueFull", "SearchKey"]


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
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_sentences = translator.options.batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.slots = translator.options.workers
        self.queued_sentences = 0
        self._queue = Queue()
        self._wakeup = asyncio.Event()
        # One thread per slot, kept for the server's life, and one for work beside the
        # decoding (attention maps).
        self._slot_threads = [ThreadPoolExecutor(1, thread_name_prefix=f"nmt-slot{slot}")
                              for slot in range(self.slots)]
        self._side_thread = ThreadPoolExecutor(1, thread_name_prefix="nmt-side")
        self._free_slots = list(range(self.slots))
        self._drivers: dict[int, Driver] = {}
        self._deep = False
        """Whether the queue was deep when the loop last looked (see _deep_queue)."""
        self._decoding: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None

    @property
    def _pending(self):
        return self._queue.pieces

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
        with self._queue.lock:
            pieces = list(self._pending)
            self._pending.clear()
        for piece in pieces:
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
        for thread in self._slot_threads + [self._side_thread]:
            thread.shutdown(wait=True)

    async def translate(self, lines: list[str | TranslationRequest], tokens: list[int],
                        key: SearchKey) -> list[list[Translation]]:
        """The translations of `lines` (with `tokens` source tokens each; a line may carry
        terminology constraints), in order.
        QueueFull if the queue cannot take them; cancelling the call withdraws those
        not yet decoded."""
        if not lines:
            return []
        if self.queued_sentences + len(lines) > self.max_queue:
            raise QueueFull(f"{self.queued_sentences} sentences are waiting (max_queue "
                            f"{self.max_queue})")
        loop = asyncio.get_running_loop()
        pieces = []
        for start, end in _spans(tokens, self.max_batch_tokens, self.max_batch_sentences):
            piece = Piece(key, lines[start:end], start, sum(tokens[start:end]),
                          loop.create_future(), time.monotonic())
            job = self.translator.begin(piece.lines, key.decode, alignments=key.alignments,
                                        numbers=list(range(start, end)))
            if self.translator.continuous(job):
                piece.job = job
            pieces.append(piece)
        with self._queue.lock:
            self._pending.extend(pieces)
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
        return [translations for result in results for translations in result]

    async def run_in_decoder(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a thread beside the decoding slots: work that uses the
        model (attention maps) off the event loop, without waiting for the slots."""
        return await asyncio.get_running_loop().run_in_executor(self._side_thread,
                                                                function, *args)

    async def _loop(self) -> None:
        while True:
            self._drop_withdrawn()
            if self._free_slots and self._driver_wanted():
                self._start_driver()
                continue
            lockstep = self._oldest_lockstep()
            if not self._free_slots or lockstep is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_company(lockstep)
            batch = self._take_batch(lockstep.key)
            if batch:
                slot = self._free_slots.pop(0)  # the lead slot whenever it is free
                self._run_in_slot(slot, self._decode(batch, slot))

    @property
    def _deep_queue(self) -> int:
        """Waiting sentences at which the queue goes to batches rather than the engines:
        twice what all slots decode at once. With that many waiting, batches of similar
        length are as full as the engines and pad less, so they answer more sentences in
        less memory; below it the engines answer sooner and more (bench/RESULTS.md has
        the figures at 8 and 128 clients)."""
        return 2 * self.slots * self.max_batch_sentences

    def _batching_everything(self) -> bool:
        return self._queue.deep(self._deep_queue)

    def _driver_wanted(self) -> bool:
        """Whether a slot should start a driver: engine pieces wait (not so many that
        batches serve them better), and no driver runs or every one that runs is full."""
        if not self._queue.waiting_continuous() or self._batching_everything():
            return False
        return all(driver.full for driver in self._drivers.values())

    def _start_driver(self) -> None:
        slot = self._free_slots.pop(0)
        driver = Driver(self.translator, self._queue, asyncio.get_running_loop(),
                        max_sentences=self.max_batch_sentences, threads=self._threads,
                        delivered=self._delivered, wake=self._wakeup.set,
                        observe_step=self.metrics.observe_step,
                        deep_queue=self._deep_queue)
        self._drivers[slot] = driver

        async def drive() -> None:
            try:
                await asyncio.get_running_loop().run_in_executor(self._slot_threads[slot],
                                                                 driver.run)
            finally:
                del self._drivers[slot]

        self._run_in_slot(slot, drive())

    def _threads(self) -> int:
        """Torch threads for a step or batch: the cores shared by the busy slots, this
        batcher's and the other models'."""
        return decoding_threads(max(self.busy_slots + self.busy_elsewhere(self), 1),
                                self.translator.options.device)

    def _run_in_slot(self, slot: int, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._decoding.add(task)
        task.add_done_callback(lambda task, slot=slot: self._slot_freed(task, slot))

    def _slot_freed(self, task: asyncio.Task, slot: int) -> None:
        self._decoding.discard(task)
        self._free_slots = sorted(self._free_slots + [slot])
        self._wakeup.set()

    def _delivered(self, piece: Piece, result: list | BaseException | None,
                   seconds: float) -> None:
        """A driver's piece is done: its request gets the translations or the error."""
        self._dequeued(len(piece.lines))
        if result is None or piece.future.done():
            return
        if isinstance(result, BaseException):
            piece.future.set_exception(result)
            return
        self.metrics.observe_tokens(piece.tokens, sum(len(found[0].tokens) for found in result),
                                    seconds)
        piece.future.set_result(result)

    def _drop_withdrawn(self) -> None:
        """Pieces whose request went away leave the queue."""
        with self._queue.lock:
            gone = [piece for piece in self._pending if piece.future.done()]
            for piece in gone:
                self._pending.remove(piece)
        for piece in gone:
            self._dequeued(len(piece.lines))

    def _in_batches(self, piece: Piece) -> bool:
        """Whether `piece` goes to a batch: the engine cannot search it, or the queue
        is deep (then every piece does)."""
        return piece.job is None or self._deep

    def _oldest_lockstep(self) -> Piece | None:
        self._deep = self._batching_everything()
        with self._queue.lock:
            return next((piece for piece in self._pending if self._in_batches(piece)), None)

    async def _wait_for_company(self, oldest: Piece) -> None:
        """Until the oldest sentence's key fills a batch, it has waited max_wait_s, or its
        request went away (then the next oldest leads)."""
        while not oldest.future.done():
            left = oldest.arrived + self.max_wait_s - time.monotonic()
            with self._queue.lock:
                same = [piece for piece in self._pending
                        if piece.key == oldest.key and self._in_batches(piece)]
            if left <= 0 or sum(piece.tokens for piece in same) >= self.max_batch_tokens or \
                    sum(len(piece.lines) for piece in same) >= self.max_batch_sentences:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except asyncio.TimeoutError:  # not the built-in TimeoutError before 3.11
                return

    def _take_batch(self, key: SearchKey) -> list[Piece]:
        """The oldest lockstep piece with `key`, then those closest to its length, within
        the batch size and token budget, out of the queue."""
        self._drop_withdrawn()
        with self._queue.lock:
            candidates = [piece for piece in self._pending
                          if piece.key == key and self._in_batches(piece)]
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
        self.metrics.queue.dec(sentences)

    async def _decode(self, batch: list[Piece], slot: int) -> None:
        lines = [line for piece in batch for line in piece.lines]
        key = batch[0].key
        # A batch decoding alone in the lead slot gets every core; batches side by side
        # share them.
        alone = slot == 0 and len(self._free_slots) == self.slots - 1 and not self._pending \
            and not self.busy_elsewhere(self)
        translate = functools.partial(
            self.translator.translate_batch, lines, key.decode, alignments=key.alignments,
            numbers=[piece.first + i for piece in batch for i in range(len(piece.lines))],
            alone=alone)
        started = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._slot_threads[slot], translate)
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
