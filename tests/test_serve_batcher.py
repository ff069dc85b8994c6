"""Batching across requests (serve/batcher.py): shared batches, the same translations as
alone, a bounded queue, withdrawn requests, errors delivered."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import replace

import pytest

from decode_fixtures import SHORT, sentences
from serve_fixtures import FAST, tokens_of, with_batcher
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search import beam
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.decode.text.job import CallSettings
from transformer_nmt.serve.batcher import QueueFull
from transformer_nmt.serve.metrics import ServerMetrics


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    return Translator(load_for_inference(model_file), FAST)


def sample(metrics: ServerMetrics, name: str) -> float:
    return metrics.registry.get_sample_value(name) or 0.0


@pytest.mark.parametrize("beam", [1, 2])
def test_a_sentence_translates_the_same_alone_and_among_other_requests(translator, beam):
    lines = sentences(12, seed=11)
    key = CallSettings(replace(SHORT, beam=beam), alignments=False)

    async def alone(batcher):
        return [await batcher.translate([line], tokens_of(translator, [line]), key)
                for line in lines]

    async def together(batcher):
        return await asyncio.gather(*(batcher.translate([line], tokens_of(translator, [line]),
                                                        key) for line in lines))

    alone_results, _ = asyncio.run(with_batcher(translator, alone))
    load_results, metrics = asyncio.run(with_batcher(translator, together))
    first = lambda results: [(r[0][0].text, r[0][0].tokens) for r in results]  # noqa: E731
    assert first(load_results) == first(alone_results)
    # The twelve requests shared the engine's steps: more than one sentence per step.
    steps = sample(metrics, "nmt_batch_sentences_count")
    assert sample(metrics, "nmt_batch_sentences_sum") > 2 * steps


def test_a_requests_samples_do_not_depend_on_the_requests_sharing_its_batch(translator):
    # Each sentence is seeded by its position in its own request, not in the batch.
    request, others = sentences(3, seed=19), sentences(5, seed=20)
    key = CallSettings(DecodeConfig(sampling=True, nbest=2, max_len_b=6, seed=5), alignments=False)

    def texts(found):
        return [[translation.text for translation in translations] for translations in found]

    async def alone(batcher):
        return await batcher.translate(request, tokens_of(translator, request), key)

    async def mixed(batcher):
        # Other requests queue first, so the request's sentences sit later in the batch.
        return await asyncio.gather(
            batcher.translate(others[:2], tokens_of(translator, others[:2]), key),
            batcher.translate(others[2:], tokens_of(translator, others[2:]), key),
            batcher.translate(request, tokens_of(translator, request), key))

    alone_found, _ = asyncio.run(with_batcher(translator, alone))
    (*_, mixed_found), metrics = asyncio.run(with_batcher(translator, mixed, max_wait_s=0.5))
    assert sample(metrics, "nmt_batch_sentences_count") == 1  # one batch of eight
    assert texts(mixed_found) == texts(alone_found)
    assert len({tuple(samples) for samples in texts(alone_found)}) > 1  # not one seed for all


def test_requests_with_other_settings_are_never_mixed_into_one_batch(translator):
    lines = sentences(4, seed=12)
    greedy = CallSettings(replace(SHORT, beam=1), alignments=False)
    beam = CallSettings(replace(SHORT, beam=2, nbest=2), alignments=False)

    async def body(batcher):
        return await asyncio.gather(
            batcher.translate(lines, tokens_of(translator, lines), greedy),
            batcher.translate(lines, tokens_of(translator, lines), beam))

    (greedy_found, beam_found), metrics = asyncio.run(with_batcher(translator, body))
    assert all(len(found) == 1 for found in greedy_found)
    assert all(len(found) == 2 for found in beam_found)
    assert [found[0].text for found in greedy_found] == \
        [found[0].text for found in translator.translate_batch(lines, greedy.decode)]
    assert [[t.text for t in found] for found in beam_found] == \
        [[t.text for t in found] for found in translator.translate_batch(lines, beam.decode)]


def test_a_full_queue_refuses_new_sentences(translator):
    lines = sentences(3, seed=13)
    key = CallSettings(SHORT, alignments=False)

    async def body(batcher):
        with pytest.raises(QueueFull, match="max_queue 2"):
            await batcher.translate(lines, tokens_of(translator, lines), key)
        return await batcher.translate(lines[:2], tokens_of(translator, lines[:2]), key)

    found, _ = asyncio.run(with_batcher(translator, body, max_queue=2))
    assert len(found) == 2


def test_a_withdrawn_request_is_not_decoded(translator):
    withdrawn, kept = sentences(5, seed=14), sentences(1, seed=15)
    key = CallSettings(SHORT, alignments=False)

    async def body(batcher):
        task = asyncio.ensure_future(
            batcher.translate(withdrawn, tokens_of(translator, withdrawn), key))
        await asyncio.sleep(0.01)  # queued, waiting for company
        task.cancel()
        return await batcher.translate(kept, tokens_of(translator, kept), key)

    # Another model's slot is busy: a sentence then waits for company.
    found, metrics = asyncio.run(with_batcher(translator, body, max_wait_s=0.5,
                                              busy_elsewhere=lambda batcher: 1))
    assert len(found) == 1
    assert sample(metrics, "nmt_source_tokens_total") == sum(tokens_of(translator, kept))
    assert sample(metrics, "nmt_queue_sentences") == 0


async def until(condition, seconds: float = 30) -> None:
    """Poll `condition()` on the event loop until it holds; AssertionError after `seconds`
    (generous: what it waits for happens at once)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


def test_a_withdrawn_request_leaves_the_queue_without_waiting_for_company(translator):
    lines = sentences(3, seed=17)
    key = CallSettings(SHORT, alignments=False)

    async def body(batcher):
        task = asyncio.ensure_future(
            batcher.translate(lines, tokens_of(translator, lines), key))
        await until(lambda: batcher.queued_sentences == len(lines))
        task.cancel()
        await until(lambda: batcher.queued_sentences == 0)

    # Another model's slot is busy: the sentences wait for company.
    _, metrics = asyncio.run(with_batcher(translator, body, max_wait_s=60,
                                          busy_elsewhere=lambda batcher: 1))
    assert sample(metrics, "nmt_source_tokens_total") == 0


# A search fails in the batch's finishing (guard, confidence) or in the search itself.
@pytest.mark.parametrize("settings, failing", [
    (SHORT, "finish"), (replace(SHORT, no_repeat_ngram=2), "translate_job")],
    ids=["finish", "search"])
def test_a_failing_search_gives_its_requests_the_error_and_the_next_one_works(
        translator, monkeypatch, settings, failing):
    key = CallSettings(settings, alignments=False)
    lines = sentences(2, seed=16)

    async def body(batcher):
        with monkeypatch.context() as patch:
            patch.setattr(batcher.translator, failing, lambda *args, **kwargs: 1 / 0)
            with pytest.raises(ZeroDivisionError):
                await batcher.translate(lines, tokens_of(translator, lines), key)
        return await batcher.translate(lines, tokens_of(translator, lines), key)

    found, _ = asyncio.run(with_batcher(translator, body))
    assert len(found) == 2


def test_a_request_is_cut_into_pieces_by_the_offline_batches_rule(translator):
    """Longest first within the batch size and the token budget (padding and EOS
    counted), as transformer_nmt.decode.text.batches cuts offline batches."""
    lines = sentences(5, seed=18)
    tokens = tokens_of(translator, lines)
    longest = max(tokens)

    async def body(batcher):
        pieces = batcher._pieces(lines, tokens, CallSettings(SHORT))
        for piece in pieces:
            piece.future.cancel()
        return pieces

    budget = {"max_batch_tokens": 2 * (longest + 1)}
    pieces, _ = asyncio.run(with_batcher(translator, body, **budget))
    numbers = [piece.job.numbers for piece in pieces]
    assert sorted(number for piece in numbers for number in piece) == list(range(5))
    assert all(len(piece) <= 2 for piece in numbers)
    assert tokens[numbers[0][0]] == longest


def test_two_slots_decode_side_by_side_and_keep_every_request_in_order(model_file):
    two_slots = Translator(load_for_inference(model_file), replace(FAST, workers=2,
                                                                   batch_size=2))
    lines = sentences(9, seed=17)
    key = CallSettings(SHORT, alignments=False)
    alone = [next(two_slots.translate([line], SHORT)) for line in lines]

    async def body(batcher):
        assert batcher.slots == 2
        return await asyncio.gather(
            batcher.translate(lines, tokens_of(two_slots, lines), key),
            *(batcher.translate([line], tokens_of(two_slots, [line]), key) for line in lines))

    (document, *single), metrics = asyncio.run(with_batcher(two_slots, body))
    assert [found[0].text for found in document] == alone
    assert [found[0][0].text for found in single] == alone
    # Batches of at most two sentences: the nine-sentence request was cut into pieces.
    assert sample(metrics, "nmt_batch_sentences_count") >= 9


def test_requests_that_wait_share_batches_and_translate_the_same(model_file, monkeypatch):
    """Requests that arrive while a batch decodes wait for it and share the next batches,
    within the batch size, each sentence translated as alone."""
    small = Translator(load_for_inference(model_file), replace(FAST, batch_size=2))
    lines = sentences(12, seed=17)
    key = CallSettings(SHORT, alignments=False)
    expected = [small.translate_batch([line], SHORT)[0][0].text for line in lines]
    batches = []
    translate_job = small.translate_job

    def counted(job, *args, **kwargs):
        batches.append(len(job.ids))
        return translate_job(job, *args, **kwargs)

    monkeypatch.setattr(small, "translate_job", counted)

    async def body(batcher):
        return await asyncio.gather(*(batcher.translate([line], tokens_of(small, [line]), key)
                                      for line in lines))

    found, metrics = asyncio.run(with_batcher(small, body))
    assert [result[0][0].text for result in found] == expected
    assert sum(batches) == 12 and max(batches) == 2  # all of them, in batches of at most 2
    assert sample(metrics, "nmt_source_tokens_total") == sum(tokens_of(small, lines))


def test_a_batch_stops_between_two_steps_when_its_last_request_goes_away(translator,
                                                                        monkeypatch):
    """The client leaves while its batch decodes: the search stops at its next step
    rather than decoding to the end for nobody, and the slot takes the next batch."""
    key = CallSettings(replace(SHORT, max_len_a=0.0, max_len_b=40, min_len=40),
                       alignments=False)
    lines = sentences(2, seed=19)
    steps, started, released = [], threading.Event(), threading.Event()
    real_check = beam.stop_if_withdrawn

    def check():  # in the slot's thread, before each step
        steps.append(1)
        if len(steps) == 2:
            started.set()
            released.wait(30)
        real_check()

    monkeypatch.setattr(beam, "stop_if_withdrawn", check)

    async def body(batcher):
        task = asyncio.ensure_future(batcher.translate(lines, tokens_of(translator, lines),
                                                       key))
        await until(started.is_set)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # its futures are withdrawn now
        released.set()
        await until(lambda: batcher.busy_slots == 0)
        monkeypatch.setattr(beam, "stop_if_withdrawn", real_check)
        return await batcher.translate(lines, tokens_of(translator, lines), CallSettings(SHORT))

    found, metrics = asyncio.run(with_batcher(translator, body))
    assert len(steps) == 2  # min_len 40: it would have run 40 steps
    assert len(found) == 2 and sample(metrics, "nmt_batch_sentences_count") == 1
