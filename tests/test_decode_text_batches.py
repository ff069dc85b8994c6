"""The streaming driver's workers (decode/text/batches.py): an interrupt in the calling thread
ends `run_in_order` only once every worker has finished its batch, so that no thread is
still inside torch when the interpreter exits (a C++ abort: "terminate called ...")."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from signal_fixtures import default_sigint
from transformer_nmt.decode.text.batches import BatchBudget, length_batches, run_in_order


@pytest.mark.sigint
def test_an_interrupt_waits_for_the_running_batches_and_cancels_the_others():
    started, finished = [], []
    running = threading.Barrier(3)

    def work(batch: list[int]) -> list[int]:
        started.append(batch[0])
        if len(started) <= 2:
            running.wait()
        time.sleep(0.3)
        finished.append(batch[0])
        return batch

    def ctrl_c_once_both_run() -> None:
        running.wait()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # Ctrl-C

    threads_before = threading.active_count()
    threading.Thread(target=ctrl_c_once_both_run).start()
    with default_sigint(), pytest.raises(KeyboardInterrupt):
        run_in_order([[i] for i in range(8)], work, workers=2)
    assert sorted(finished) == sorted(started) and len(started) < 8
    # The signalling thread and the workers return (within moments, even on a busy
    # machine: a fixed 50 ms once failed in a full run of the suite).
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == threads_before


@pytest.mark.sigint
def test_an_interrupt_while_the_workers_start_still_waits_for_every_one_of_them():
    """A Ctrl-C that lands while the pool is starting its second thread (here: sent by
    that thread's first batch) must not leave the thread unwaited-for; before the fix,
    about half of such interrupts did."""
    unfinished = 0
    for _ in range(40):
        started, finished = [], []

        def work(batch: list[int]) -> list[int]:
            started.append(batch[0])
            if batch[0] == 1:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(0.01)
            finished.append(batch[0])
            return batch

        with default_sigint(), pytest.raises(KeyboardInterrupt):
            run_in_order([[i] for i in range(8)], work, workers=2)
        unfinished += sorted(finished) != sorted(started)
    assert unfinished == 0


def test_length_batches_go_longest_first_within_the_sentence_and_token_budgets():
    lengths = [2, 5, 3, 5, 1]
    assert length_batches(lengths, range(5), BatchBudget(2)) == [[1, 3], [2, 0], [4]]
    # 2 sentences of 5 tokens and EOS are 12 tokens: over 10, so each goes alone.
    assert length_batches(lengths, range(5), BatchBudget(4, tokens=10)) == \
        [[1], [3], [2, 0], [4]]
    assert length_batches([50, 1], [0, 1], BatchBudget(4, tokens=8)) == [[0], [1]]
    assert length_batches(lengths, [4, 0], BatchBudget(8)) == [[0, 4]]


def test_run_in_order_gives_each_result_under_its_index():
    assert run_in_order([[2, 0], [1]], lambda batch: [i * 10 for i in batch]) == \
        {2: 20, 0: 0, 1: 10}
    assert run_in_order([[2, 0], [1]], lambda batch: [-i for i in batch], workers=2) == \
        {2: -2, 0: 0, 1: -1}
