"""The Translator: text in, text out, order kept, batching invisible (decode/text/translator.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decode_fixtures import SHORT, make_model_file, record_search_threads, sentences
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.base import max_lengths
from transformer_nmt.decode.text.translator import (Translation, Translator, TranslationRequest,
                                               TranslatorOptions, source_limit)
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference


@pytest.fixture(scope="module")
def short_model_file(tmp_path_factory) -> Path:
    """A model with only 32 positions, so ordinary lines are too long for it."""
    return make_model_file(tmp_path_factory.mktemp("short"), max_positions=32)


def translator_for(model_file: Path, decode: DecodeConfig = SHORT, **fields) -> Translator:
    """A Translator of `model_file` with the `decode` settings and option `fields`."""
    return Translator(load_for_inference(model_file), TranslatorOptions(
        decode, **{"precision": "fp32", "engine": "torch", **fields}))


def test_order_kept_and_empty_lines_stay_empty(model_file):
    lines = sentences(9, seed=1)
    lines[2] = lines[6] = ""
    lines[4] = "   \t "
    # Without the guard: its fallback may turn a random model's loop into an empty output.
    translator = translator_for(model_file, replace(SHORT, guard=False), batch_size=3,
                                buffer_size=5)
    batched = list(translator.translate(lines))
    alone = [next(translator.translate([line])) for line in lines]
    assert batched == alone
    assert len(batched) == len(lines)
    assert batched[2] == batched[4] == batched[6] == ""
    assert all(batched[i] for i in (0, 1, 3, 5, 7, 8))


def test_max_tokens_batches_give_the_same_translations(model_file):
    lines = sentences(7, seed=2)
    by_sentences = list(translator_for(model_file, batch_size=4).translate(lines))
    by_tokens = list(translator_for(model_file, max_tokens=20).translate(lines))
    assert by_sentences == by_tokens


def test_nbest_translations_are_sorted(model_file):
    translator = translator_for(model_file, replace(SHORT, beam=3, nbest=3))
    for translations in translator.translate_nbest(sentences(3, seed=3)):
        assert len(translations) == 3
        scores = [translation.score for translation in translations]
        assert scores == sorted(scores, reverse=True)


def test_parallel_workers_keep_order_and_translations(model_file):
    lines = sentences(8, seed=6)
    alone = list(translator_for(model_file, batch_size=2, workers=1).translate(lines))
    threads = torch.get_num_threads()
    parallel = list(translator_for(model_file, batch_size=2, workers=3).translate(lines))
    assert parallel == alone
    assert torch.get_num_threads() == threads  # the caller's setting, not the translator's


def test_a_translator_decodes_with_resolved_options(model_file):
    translator = translator_for(model_file, workers=3)
    assert translator.options == TranslatorOptions(SHORT, workers=3, precision="fp32",
                                                   engine="torch").resolved()


def test_too_long_line_is_truncated_with_one_warning(short_model_file, caplog):
    lines = ["the house", " ".join(["children play near old trees"] * 20), "a dog",
             " ".join(["green garden"] * 40)]
    translator = translator_for(short_model_file)
    with caplog.at_level(logging.WARNING):
        translations = list(translator.translate(lines))
    assert len(translations) == 4
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert warnings[0].startswith("input line 2 has ")


def test_source_limit_leaves_room_for_the_output():
    assert source_limit(256, DecodeConfig()) == 205  # 205 + 50 + BOS = 256 positions
    assert source_limit(256, DecodeConfig(max_len_a=2.0, max_len_b=10)) == 122
    assert source_limit(256, DecodeConfig(max_len_a=0.0, max_len_b=10)) == 255
    assert source_limit(32, DecodeConfig(max_len_b=50)) == 1


def test_longest_output_is_the_searches_length_limit_known_before_decoding(short_model_file):
    translator = translator_for(short_model_file, DecodeConfig(max_len_a=1.5, max_len_b=3))
    decode = translator.options.decode
    for length in (0, 1, 5, 11, 40):  # a line longer than source_limit is cut first
        cut = min(length, source_limit(32, decode))
        src = torch.tensor([[5] * cut + [translator.special.eos]])
        [expected] = max_lengths(src, decode, translator.special.pad,
                                 translator.max_len_limit).tolist()
        assert translator.longest_output(length, decode) == expected
    # Required phrases raise it (constrained search), never past the model's positions.
    assert translator.longest_output(2, decode, phrase_tokens=20) == 20
    assert translator.longest_output(2, decode, phrase_tokens=100) == 31


def test_alignments_are_word_pairs_within_both_sentences(model_file):
    translator = translator_for(model_file, alignments=True)
    line = "the green garden"
    [best] = next(translator.translate_nbest([line]))
    assert best.alignment
    target_words = len(best.text.split())
    for source_word, target_word in best.alignment:
        assert 0 <= source_word < 3 and 0 <= target_word < target_words


def test_a_precision_it_cannot_decode_in_is_a_user_error(model_file):
    with pytest.raises(UserError, match="precision"):
        translator_for(model_file, precision="fp8")


def test_settings_passed_per_call_decode_like_a_translator_built_with_them(model_file):
    lines = sentences(5, seed=8)
    base = translator_for(model_file)
    wider = replace(SHORT, beam=3, nbest=2)
    per_call = list(base.translate_nbest(lines, wider, alignments=True))
    assert base.options.decode == SHORT and not base.options.alignments
    fresh = translator_for(model_file, wider, alignments=True)
    assert_same_translations(per_call, list(fresh.translate_nbest(lines)))
    # A call without settings decodes with the options' again.
    assert list(base.translate(lines)) == list(translator_for(model_file).translate(lines))
    assert_same_translations(base.translate_batch(lines, wider, alignments=True), per_call)


def assert_same_translations(found: list[list[Translation]],
                             expected: list[list[Translation]]) -> None:
    """The same outputs, scores equal but for the last digits: the two sides may batch
    the lines differently (a translator's batch size follows the beam it was built with,
    translate_batch takes all at once), and padded batches sum floats in another order."""
    assert [[(t.text, t.tokens, t.alignment) for t in nbest] for nbest in found] == [
        [(t.text, t.tokens, t.alignment) for t in nbest] for nbest in expected]
    assert [t.score for nbest in found for t in nbest] == pytest.approx(
        [t.score for nbest in expected for t in nbest], abs=1e-5)


def test_a_call_sets_its_threads_and_gives_the_callers_back(model_file, monkeypatch):
    seen = record_search_threads(monkeypatch)
    lines = sentences(6, seed=18)
    before = torch.get_num_threads()
    two = translator_for(model_file, batch_size=2, workers=2)
    list(two.translate(lines))
    assert set(seen) == {2}  # each of two workers on half the cores
    seen.clear()
    list(two.translate(lines[:1]))
    assert seen == [4]  # a lone batch on every core
    seen.clear()
    two.translate_batch(lines[:2])
    two.translate_batch(lines[:2], alone=True)
    assert seen == [2, 4]  # beside the other worker's batch, or alone
    assert torch.get_num_threads() == before


def test_requests_with_a_prefix_start_with_it(model_file):
    translator = translator_for(model_file, replace(SHORT, max_len_b=8))
    lines = sentences(4, seed=9)
    requests = [TranslationRequest(lines[0], "the cat"), lines[1],
                TranslationRequest(lines[2], ""), TranslationRequest("", "the cat")]
    found = [hyps[0] for hyps in translator.translate_nbest(requests)]
    prefix = translator.vocab.encode("the cat")
    assert found[0].tokens[: len(prefix)] == prefix and found[0].text.startswith("the cat")
    free = list(translator.translate(lines[1:3]))
    assert [found[1].text, found[2].text] == free
    assert found[3].text == ""  # an empty line stays empty


def test_samples_depend_on_the_line_and_seed_not_on_the_batching(model_file):
    lines = sentences(7, seed=10)
    decode = DecodeConfig(sampling=True, nbest=2, max_len_b=6, seed=3)
    one = [[t.text for t in hyps] for hyps in translator_for(
        model_file, decode, batch_size=1, buffer_size=3).translate_nbest(lines)]
    many = [[t.text for t in hyps] for hyps in translator_for(
        model_file, decode, batch_size=4, workers=2).translate_nbest(lines)]
    assert one == many
    other = [[t.text for t in hyps] for hyps in translator_for(
        model_file, replace(decode, seed=4)).translate_nbest(lines)]
    assert other != one


def test_a_line_encoded_lately_is_not_encoded_again_when_its_job_begins(model_file,
                                                                        monkeypatch):
    translator = translator_for(model_file)
    encoded = []

    def counting(texts, **options):
        encoded.extend(texts)
        return type(translator.vocab).encode_batch(translator.vocab, texts, **options)
    monkeypatch.setattr(translator.vocab, "encode_batch", counting)
    lines = ["the dog runs .", "the cat sleeps ."]
    first = translator.encode_batch(lines[:1])  # the splitter's length rule, as a server's
    job = translator.begin(lines)
    assert encoded == lines  # each once: the second when its job began
    assert job.ids[0] == first[0]
    job.ids[0].append(5)  # a job's ids are its own: truncating them changes nothing kept
    assert translator.encode_batch(lines[:1]) == first
