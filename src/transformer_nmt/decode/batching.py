"""The driver that translating and scoring share: read items ahead in buffers, sort each
buffer's sentences by length into batches (little padding, so little wasted compute), run
the batches, and give the results back in the items' order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

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


def length_batches(ids: list[list[int]], indices: Iterable[int], batch_size: int,
                   max_tokens: int | None) -> list[list[int]]:
    """`indices` into `ids` sorted longest first, cut into consecutive batches of at most
    batch_size sentences and, when max_tokens is given, at most max_tokens tokens
    (padding and EOS included)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(indices, key=lambda i: -len(ids[i])):
        width = len(ids[batch[0]]) + 1 if batch else len(ids[index]) + 1
        too_many_tokens = max_tokens is not None and (len(batch) + 1) * width > max_tokens
        if batch and (len(batch) == batch_size or too_many_tokens):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


def run_in_order(batches: list[list[int]], work: Callable[[list[int]], list[R]],
                 results: list[R], workers: int = 1) -> None:
    """`work(batch)` for every batch, its i-th result stored at results[batch[i]]; with
    workers > 1 and several batches, that many batches at once, each in its own thread
    (tensor operations release the GIL, so the threads compute in parallel)."""
    if workers == 1 or len(batches) == 1:
        # In the calling thread: no pool to start for one batch at a time.
        found: Iterable[list[R]] = map(work, batches)
        _store(batches, found, results)
        return
    pool = ThreadPoolExecutor(workers)
    try:
        # The pool starts a worker thread inside submit() and records it only once it has
        # started: a Ctrl-C in between left that thread out of the shutdown's wait, still
        # inside torch when the interpreter exited. Signals wait until every thread is
        # recorded.
        with stop_signals_held():
            futures = [pool.submit(work, batch) for batch in batches]
        _store(batches, (future.result() for future in futures), results)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _store(batches: list[list[int]], found: Iterable[list[R]], results: list[R]) -> None:
    for batch, batch_results in zip(batches, found):
        for index, result in zip(batch, batch_results):
            results[index] = result
