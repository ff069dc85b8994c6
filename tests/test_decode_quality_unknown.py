"""A source the vocabulary cannot read (decode/quality/unknown.py): the share of its
characters in unknown pieces, and the Translator's confidence 0, calibrated or not."""

from __future__ import annotations

import pytest

from decode_fixtures import SHORT
from transformer_nmt.decode.quality.unknown import UNKNOWN_SOURCE, unknown_share, unreadable
from transformer_nmt.decode.text.job import join_jobs
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions

JAPANESE = "日本語の文章をドイツ語のモデルに送りました。"


@pytest.fixture(scope="module")
def translator(model_file) -> Translator:
    """The session's uncalibrated model (its vocabulary learned from English words)."""
    return Translator.from_file(model_file, TranslatorOptions(SHORT, workers=1))


def share(translator: Translator, text: str) -> float:
    return unknown_share(text, translator.vocab.encode(text), translator.vocab)


def test_the_share_counts_characters_so_that_a_collapsed_run_of_unknowns_counts_whole(
        translator):
    vocab = translator.vocab
    # The whole run of Japanese is one unknown piece after a space: two pieces, one unk.
    assert vocab.marked_pieces(vocab.encode(JAPANESE)) == ["\u2581", "<unk>"]
    assert share(translator, JAPANESE) == 1.0 and unreadable(JAPANESE, vocab.encode(JAPANESE),
                                                             vocab)
    assert share(translator, "the dog runs in the garden") == 0.0
    # A name in another script: 2 of 23 characters unknown, translated as usual.
    mixed = "the dog 日本 runs in the garden"
    assert share(translator, mixed) == pytest.approx(2 / 23)
    assert not unreadable(mixed, vocab.encode(mixed), vocab)
    # Fewer unknown pieces than known ones (a Latin name's), most characters unknown.
    name = "私はiPhoneを買いました。"
    ids = vocab.encode(name)
    assert 2 * ids.count(vocab.unk_id) < len(ids)
    assert share(translator, name) == pytest.approx(10 / 15) and unreadable(name, ids, vocab)


def test_an_unreadable_source_gets_confidence_0_without_any_calibration(translator):
    assert translator.confidence is None
    unknown, known, empty = translator.translate_nbest([JAPANESE, "the dog runs", ""])
    assert unknown[0].confidence == 0.0 and unknown[0].confidence_reasons == [UNKNOWN_SOURCE]
    assert known[0].confidence is None and known[0].confidence_reasons == []
    assert empty[0].confidence is None


def test_the_verdict_travels_with_a_job_s_parts_and_joins(translator):
    job = translator.begin(["the dog runs", JAPANESE])
    plain = translator.begin(["the cat sleeps"])
    assert job.unreadable == [False, True] and plain.unreadable is None
    assert job.part([1]).unreadable == [True]
    joined, starts = join_jobs([plain, job])
    assert joined.unreadable == [False, False, True] and starts == [0, 1]
    [found] = translator.translate_job(joined.part([2]), 1)
    assert found[0].confidence == 0.0
