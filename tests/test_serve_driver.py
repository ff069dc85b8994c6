"""One slot's continuous batching (serve/driver.py), with a small model and a stand-in for
the batcher: pieces join the engine, also between steps, finish with the translations
they get alone, and leave when their request withdraws them; the queue's own methods."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future

import pytest

from decode_fixtures import SHORT, sentences
from serve_fixtures import FAST
from transformer_nmt.decode.text.batches import BatchBudget
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.serve.driver import Driver, Piece, Queue


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    return Translator(load_for_inference(model_file), FAST)


class Host:
    """What the batcher gives a driver, recording what the driver hands back."""

    def __init__(self, translator: Translator, max_sentences: int = 4) -> None:
        self.translator, self.queue = translator, Queue()
        self.max_batch_sentences = max_sentences
        self.results: dict[int, list | BaseException | None] = {}
        self.steps: list[int] = []
        self.on_step = lambda step: None
        self.woken = 0

    def threads(self) -> int:
        return 1


    def deep(self) -> bool:
        return False

    def observe_step(self, sentences: int) -> None:
        self.steps.append(sentences)
        self.on_step(len(self.steps))

    def delivered(self, piece, result, seconds) -> None:
        self.results[id(piece)] = result

    def wake(self) -> None:
        self.woken += 1


def piece_of(translator: Translator, lines: list[str], first: int = 0) -> Piece:
    job = translator.begin(lines, translator.settings(SHORT),
                           list(range(first, first + len(lines))))
    # A concurrent future: the driver only asks whether its request went away.
    return Piece(job, sum(len(ids) for ids in job.ids), Future(), time.monotonic(),
                 translator.continuous(job))


def drive(host: Host) -> None:
    """Run a driver until it returns, then the event loop's calls it scheduled."""
    loop = asyncio.new_event_loop()
    try:
        Driver(host, loop).run()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


def texts(result) -> list[str]:
    return [found[0].text for found in result]


def alone(translator: Translator, lines: list[str]) -> list[str]:
    return [translator.translate_batch([line], SHORT)[0][0].text for line in lines]


def test_pieces_join_finish_and_get_their_translations_alone(translator):
    host = Host(translator)
    first, second = sentences(3, seed=50), sentences(2, seed=51)
    pieces = [piece_of(translator, first), piece_of(translator, second)]
    host.queue.put(pieces)
    drive(host)
    assert texts(host.results[id(pieces[0])]) == alone(translator, first)
    assert texts(host.results[id(pieces[1])]) == alone(translator, second)
    assert not host.queue and max(host.steps) == 5  # both pieces in one engine


def test_a_piece_that_arrives_between_steps_joins_the_running_engine(translator):
    host = Host(translator, max_sentences=8)
    early, late = sentences(2, seed=52), sentences(2, seed=53)
    waiting = piece_of(translator, late)
    host.on_step = lambda step: host.queue.put([waiting]) if step == 1 else None
    host.queue.put([piece_of(translator, early)])
    drive(host)
    assert texts(host.results[id(waiting)]) == alone(translator, late)
    assert max(host.steps) > 2  # the late sentences decoded beside the early ones


def test_a_withdrawn_piece_leaves_and_the_others_finish(translator):
    host = Host(translator)
    kept, withdrawn = sentences(2, seed=54), sentences(2, seed=55)
    pieces = [piece_of(translator, kept), piece_of(translator, withdrawn)]
    host.on_step = lambda step: pieces[1].future.cancel() if step == 1 else None
    host.queue.put(pieces)
    drive(host)
    assert host.results[id(pieces[1])] is None
    assert texts(host.results[id(pieces[0])]) == alone(translator, kept)
    assert host.steps[-1] <= 2  # the withdrawn sentences left the engine


def test_a_full_driver_wakes_the_batcher_for_what_it_has_no_room_for(translator):
    host = Host(translator, max_sentences=2)
    pieces = [piece_of(translator, sentences(2, seed=56 + i)) for i in range(2)]
    host.on_step = lambda step: host.queue.put(pieces[1:]) if step == 1 else None
    host.queue.put(pieces[:1])
    drive(host)
    assert host.woken >= 1 and all(texts(host.results[id(piece)]) for piece in pieces)


def test_the_queue_takes_a_lockstep_batch_within_the_budget_oldest_first(translator):
    queue = Queue()
    pieces = [piece_of(translator, [line]) for line in sentences(4, seed=57)]
    queue.put(pieces)
    batch = queue.take_batch(lambda piece: True, BatchBudget(2))
    assert batch[0] is pieces[0] and len(batch) == 2
    assert queue.waiting(lambda piece: True) == [p for p in pieces if p not in batch]
    pieces[3].future.cancel()
    assert queue.drop_withdrawn() == [pieces[3]] or pieces[3] in batch
    assert queue.take_all() and not queue
