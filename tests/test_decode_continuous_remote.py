"""A decoding slot in its own process (decode/continuous/remote.py): its engine gives the
hypotheses the engine gives in this process, sentences joining and leaving between steps;
the server's batcher with slot processes translates as with threads, continuously and in
batches (tests/test_serve_server.py's SIGTERM test serves through one); a process that
cannot load the model or that dies is one clear error."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from decode_fixtures import SHORT, sentences
from serve_fixtures import FAST
from transformer_nmt.decode.continuous.remote import SlotProcess
from transformer_nmt.decode.device import threads
from transformer_nmt.decode.device.threads import torch_threads
from transformer_nmt.decode.text.job import CallSettings
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.errors import UserError
from transformer_nmt.serve.batcher import Batcher
from transformer_nmt.serve.metrics import ServerMetrics


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    return Translator.from_files([model_file], FAST)


def _run(engine, translator, schedule, drop=()):
    """Sentences of `schedule` (call → lines) joining `engine` at those calls of its
    `step`, `drop` leaving as soon as they joined; what each line ended with, by line
    (tokens, score to 5 places: fp32's last bits depend on the rows decoded beside, and
    a process steps at its own pace)."""
    found, call = {}, 0
    while call in schedule or engine.rows or call <= max(schedule):
        if call in schedule:
            lines = schedule[call]
            ids = [translator.source_ids([line], SHORT, [0])[0] for line in lines]
            engine.add(translator.source_tensor(ids), lines)
            engine.drop(set(drop) & set(lines))
        found.update((line, [(h.tokens, round(h.score, 5)) for h in hyps])
                     for line, hyps in engine.step())
        call += 1
    return found


def test_a_slot_process_engine_gives_the_hypotheses_of_one_here_and_a_dead_one_is_one_line(
        translator, model_file, monkeypatch):
    schedule = {0: sentences(3, seed=5), 1: sentences(2, seed=6), 4: sentences(2, seed=7)}
    dropped = schedule[0][1]
    process = SlotProcess(Translator.from_files, [str(model_file)], FAST, 1)
    try:
        with torch_threads(1):  # the process then steps on one thread too
            remote = _run(process.new_engine(SHORT), translator, schedule, [dropped])
            assert remote == _run(translator.new_engine(SHORT), translator, schedule, [dropped])
        assert dropped not in remote and len(remote) == 6
        # A job of lines, as a batch of the server's deep queue goes to the process: here
        # on one core too, as the process.
        monkeypatch.setattr(threads, "_PROCESS_THREADS", 1)
        job = translator.begin(sentences(3, seed=8), translator.settings(SHORT))
        assert process.translate_job(job, 1, 1) == translator.translate_job(job, 1, 1)
        # A piece's hypotheses finished there (the guard may search again) as here.
        engine, rows = translator.new_engine(SHORT), list(range(3))
        engine.add(translator.source_tensor(job.ids), rows)
        found = {}
        with torch_threads(1):
            while engine.rows:
                found.update(engine.step())
            here = translator.finish(job, rows, [found[row] for row in rows])
            assert process.finish(job, rows, [found[row] for row in rows]) == here
        process._process.kill()
        process._process.join()
        with pytest.raises(UserError, match="a decoding slot's process ended"):
            process.new_engine(SHORT)
    finally:
        process.close()


def test_a_slot_process_that_cannot_load_the_model_says_why_at_each_call(tmp_path):
    process = SlotProcess(Translator.from_files, [str(tmp_path / "gone.pt")], FAST, 1)
    try:
        for _ in range(2):
            with pytest.raises(UserError, match="gone.pt"):
                process.new_engine(SHORT)
    finally:
        process.close()


def test_slots_as_processes_translate_as_threads_do_continuously_and_in_batches(model_file):
    options = replace(FAST, workers=2, batch_size=2, worker_processes=None)
    lines = sentences(12, seed=17)
    key = CallSettings(SHORT, alignments=False)

    async def together(batcher):
        return await asyncio.gather(*(batcher.translate(
            [line], [len(batcher.translator.vocab.encode(line))], key) for line in lines))

    async def run(translator):
        batcher = Batcher(translator, ServerMetrics(), max_batch_tokens=4096, max_wait_s=0.05,
                          max_queue=1000)
        batcher.start()
        try:
            # The default (None) takes processes for a small model.
            assert (batcher._processes is not None) == \
                (translator.options.worker_processes is not False)
            return [found[0][0].text for found in await together(batcher)]
        finally:
            await batcher.stop()

    in_threads = asyncio.run(run(Translator.from_files([model_file],
                                                       replace(options, worker_processes=False))))
    # Twelve sentences at once in two slots of two: the queue is deep, and part of it goes
    # to batches; the rest to the engines.
    assert asyncio.run(run(Translator.from_files([model_file], options))) == in_threads

