"""The server's batches on CTranslate2 (serve/batcher.py with a Translator whose runtime is
CTranslate2): a lone sentence goes out at once, whatever --max-wait-ms; sentences of
several requests share batches and each gets its translation, in its request's order."""

from __future__ import annotations

import asyncio

import pytest

from serve_fixtures import tokens_of, with_batcher
from train_fixtures import reversal_pairs
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.text.job import CallSettings
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

LINES = [source for source, _ in reversal_pairs(12, seed=5, words=(2, 9))]
KEY = CallSettings(DecodeConfig(beam=2, guard=False), alignments=False)


@pytest.fixture(scope="module")
def translator(trained_model_file) -> Translator:
    translator = Translator.from_file(trained_model_file, TranslatorOptions(
        KEY.decode, engine="ctranslate2", precision="fp32", workers=2, batch_size=8))
    assert translator.ctranslate2 is not None
    return translator


def test_a_lone_sentence_goes_out_at_once_whatever_the_wait(translator):
    async def lone(batcher):
        # An hour's wait for company would time this out: nothing else decodes.
        return await asyncio.wait_for(
            batcher.translate(LINES[:1], tokens_of(translator, LINES[:1]), KEY), 60)

    (found,), _ = asyncio.run(with_batcher(translator, lone, max_wait_s=3600))
    assert found[0].text == next(translator.translate(LINES[:1], KEY.decode))


def test_requests_share_batches_and_keep_their_order(translator):
    requests = [LINES[i:i + 3] for i in range(0, len(LINES), 3)]

    async def together(batcher):
        return await asyncio.gather(*(batcher.translate(lines, tokens_of(translator, lines),
                                                        KEY) for lines in requests))

    found, metrics = asyncio.run(with_batcher(translator, together, max_wait_s=0.5))
    batches = metrics.registry.get_sample_value("nmt_batch_sentences_count")
    assert batches < len(requests)  # some batch held sentences of several requests
    expected = list(translator.translate(LINES, KEY.decode))
    assert [t[0].text for result in found for t in result] == expected
