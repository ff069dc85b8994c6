"""The server's queue (serve/queue.py): oldest first, a batch of the oldest piece's
settings closest to its length within the budget, withdrawn pieces dropped."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import replace

import pytest

from decode_fixtures import SHORT, sentences
from serve_fixtures import FAST
from transformer_nmt.decode.text.batches import BatchBudget
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.serve.queue import Piece, Queue


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    return Translator(load_for_inference(model_file), FAST)


def piece_of(translator: Translator, lines: list[str], decode=SHORT) -> Piece:
    job = translator.begin(lines, translator.settings(decode), list(range(len(lines))))
    # A concurrent future: the queue only asks whether its request went away.
    return Piece(job, sum(len(ids) for ids in job.ids), Future(), time.monotonic())


def test_the_queue_takes_a_batch_within_the_budget_oldest_first(translator):
    queue = Queue()
    pieces = [piece_of(translator, [line]) for line in sentences(4, seed=57)]
    queue.put(pieces)
    assert queue.oldest() is pieces[0]
    batch = queue.take_batch(BatchBudget(2))
    assert batch[0] is pieces[0] and len(batch) == 2
    assert queue.waiting(pieces[0].key) == [p for p in pieces if p not in batch]
    left = [p for p in pieces if p not in batch]
    left[-1].future.cancel()
    assert queue.drop_withdrawn() == [left[-1]]
    assert queue.take_all() == left[:-1] and not queue and queue.take_batch(BatchBudget(2)) == []


def test_a_batch_holds_only_the_oldest_pieces_settings_closest_to_its_length(translator):
    queue = Queue()
    short, long, other, middle = (piece_of(translator, ["a dog"]),
                                  piece_of(translator, [" ".join(sentences(3, seed=1))]),
                                  piece_of(translator, ["a cat"], replace(SHORT, beam=1)),
                                  piece_of(translator, ["a dog runs in the garden"]))
    queue.put([short, long, other, middle])
    assert queue.take_batch(BatchBudget(2)) == [short, middle]
    assert queue.waiting(short.key) == [long] and queue.waiting(other.key) == [other]
