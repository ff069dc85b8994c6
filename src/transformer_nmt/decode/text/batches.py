"""The driver that translating and scoring share: read items ahead in buffers, sort each
buffer's sentences by length into batches (little padding, so little wasted compute), run
the batches, and give each item's result back by its index. The batches' budget
(`BatchBudget`) is also the server's (serve/batcher.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from transformer_nmt.interrupts import stop_signals_held

T = TypeVar("T")
R = TypeVar("R")


def buffers(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in consecutive lists of `size` (the last one possibly shorter)."""
    buffer: list[T] = []
    for item in items:
        buffer.append(item)
        if len(buffer) == size:
            yield buffer
            buffer = []
    if buffer:
        yield buffer


@dataclass(frozen=True)
class BatchBudget:
    """What one batch may hold: the one rule by which offline decoding, scoring and the
    server's queue cut sentences into batches."""

    sentences: int
    """Most sentences."""
    tokens: int | None = None
    """Most source tokens, padding and EOS included (None: no such limit)."""

    def admits(self, sentences: int, longest: int) -> bool:
        """Whether a batch of `sentences` sentences whose longest has `longest` tokens
        (EOS excluded) is within the budget."""
        return sentences <= self.sentences and (
            self.tokens is None or sentences * (longest + 1) <= self.tokens)


def length_batches(lengths: Sequence[int], indices: Iterable[int], budget: BatchBudget
                   ) -> list[list[int]]:
    """`indices` into `lengths` (each sentence's tokens) sorted longest first, cut into
    consecutive batches within `budget`; a sentence too long for the token budget goes
    alone."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(indices, key=lambda i: -lengths[i]):
        if batch and not budget.admits(len(batch) + 1, lengths[batch[0]]):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


def run_in_order(batches: list[list[int]], work: Callable[[list[int]], list[R]],
                 workers: int = 1) -> dict[int, R]:
    """`work(batch)` for every batch, its i-th result given back under batch[i]; with
    workers > 1 and several batches, that many batches at once, each in its own thread
    (tensor operations release the GIL, so the threads compute in parallel)."""
    if workers == 1 or len(batches) == 1:
        # In the calling thread: no pool to start for one batch at a time.
        return _by_index(batches, map(work, batches))
    pool = ThreadPoolExecutor(workers)
    try:
        # The pool starts a worker thread inside submit() and records it only once it has
        # started: a Ctrl-C in between left that thread out of the shutdown's wait, still
        # inside torch when the interpreter exited. Signals wait until every thread is
        # recorded.
        with stop_signals_held():
            futures = [pool.submit(work, batch) for batch in batches]
        return _by_index(batches, (future.result() for future in futures))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _by_index(batches: list[list[int]], found: Iterable[list[R]]) -> dict[int, R]:
    return {index: result for batch, batch_results in zip(batches, found)
            for index, result in zip(batch, batch_results)}
