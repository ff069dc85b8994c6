"""The Translator: text in, text out, order kept, batching invisible (decode/translator.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decode_fixtures import SHORT, make_model_file, model_file, sentences  # noqa: F401  (fixture)
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode import translator as translator_module
from transformer_nmt.decode.translator import Translator, source_limit
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import load_for_inference


@pytest.fixture(scope="module")
def short_model_file(tmp_path_factory) -> Path:
    """A model with only 32 positions, so ordinary lines are too long for it."""
    return make_model_file(tmp_path_factory.mktemp("short"), max_positions=32)


def test_order_kept_and_empty_lines_stay_empty(model_file):
    lines = sentences(9, seed=1)
    lines[2] = lines[6] = ""
    lines[4] = "   \t "
    translator = Translator(load_for_inference(model_file), SHORT, batch_size=3, buffer_size=5)
    batched = list(translator.translate(lines))
    alone = [next(translator.translate([line])) for line in lines]
    assert batched == alone
    assert len(batched) == len(lines)
    assert batched[2] == batched[4] == batched[6] == ""
    assert all(batched[i] for i in (0, 1, 3, 5, 7, 8))


def test_max_tokens_batches_give_the_same_translations(model_file):
    lines = sentences(7, seed=2)
    inference_model = load_for_inference(model_file)
    by_sentences = list(Translator(inference_model, SHORT, batch_size=4).translate(lines))
    by_tokens = list(Translator(inference_model, SHORT, max_tokens=20).translate(lines))
    assert by_sentences == by_tokens


def test_nbest_translations_are_sorted(model_file):
    translator = Translator(load_for_inference(model_file), replace(SHORT, beam=3, nbest=3))
    for translations in translator.translate_nbest(sentences(3, seed=3)):
        assert len(translations) == 3
        scores = [translation.score for translation in translations]
        assert scores == sorted(scores, reverse=True)


def test_parallel_workers_keep_order_and_translations(model_file):
    lines = sentences(8, seed=6)
    inference_model = load_for_inference(model_file)
    alone = list(Translator(inference_model, SHORT, batch_size=2, workers=1).translate(lines))
    parallel = list(Translator(inference_model, SHORT, batch_size=2, workers=3).translate(lines))
    assert parallel == alone


@pytest.mark.parametrize("cores, workers, batch_size, threads",
                         [(1, 1, 32, 1), (2, 2, 16, 1), (8, 2, 16, 4)])
def test_cpu_defaults_share_32_sentences_and_the_cores_among_two_workers(
        model_file, monkeypatch, cores, workers, batch_size, threads):
    monkeypatch.setattr(translator_module, "_PROCESS_THREADS", cores)
    translator = Translator(load_for_inference(model_file), SHORT)
    assert (translator.workers, translator.batch_size) == (workers, batch_size)
    if workers > 1:
        assert torch.get_num_threads() == threads
    line_by_line = Translator(load_for_inference(model_file), SHORT, buffer_size=1)
    assert (line_by_line.workers, line_by_line.batch_size) == (1, 32)
    explicit = Translator(load_for_inference(model_file), SHORT, batch_size=5, workers=4)
    assert explicit.batch_size == 5 and torch.get_num_threads() == max(cores // 4, 1)


def test_too_long_line_is_truncated_with_one_warning(short_model_file, caplog):
    lines = ["the house", " ".join(["children play near old trees"] * 20), "a dog",
             " ".join(["green garden"] * 40)]
    translator = Translator(load_for_inference(short_model_file), SHORT)
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


def test_alignments_are_word_pairs_within_both_sentences(model_file):
    translator = Translator(load_for_inference(model_file), SHORT, alignments=True)
    line = "the green garden"
    [best] = next(translator.translate_nbest([line]))
    assert best.alignment
    target_words = len(best.text.split())
    for source_word, target_word in best.alignment:
        assert 0 <= source_word < 3 and 0 <= target_word < target_words


def test_bad_settings_are_user_errors(model_file):
    inference_model = load_for_inference(model_file)
    with pytest.raises(UserError, match="nbest"):
        Translator(inference_model, DecodeConfig(beam=2, nbest=3))
    with pytest.raises(UserError, match="precision"):
        Translator(inference_model, precision="fp8")
