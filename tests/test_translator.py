"""The Translator: text in, text out, order kept, batching invisible (decode/translator.py).

`make_model_file` (a tiny random model with a tiny BPE vocabulary, written as a model
file) is also used by test_translate_cli.py and test_evaluate.py.
"""

from __future__ import annotations

import gc
import logging
import random
from dataclasses import replace
import weakref
from pathlib import Path

import pytest
import torch

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.vocab import train_vocab
from transformer_nmt.decode import translator as translator_module
from transformer_nmt.decode.translator import (
    Translation, Translator, format_translations, prepare_model, source_limit, word_alignment)
from transformer_nmt.errors import UserError
from transformer_nmt.runtime import bf16_supported
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import save_model_file, load_for_inference, model_payload

WORDS = ("the house is small . a dog runs in the green garden , and the cat sleeps on "
         "a warm roof ; children play near old trees while their parents talk").split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """Random sentences of 3-12 words from WORDS."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(count)]


def make_model_file(directory: Path, max_positions: int = 256) -> Path:
    """A tiny random Transformer with a 60-piece BPE vocabulary, saved as model.pt."""
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences(300)) + "\n", encoding="utf-8")
    vocab = train_vocab([corpus], directory / "spm", 60, threads=1)
    torch.manual_seed(0)
    cfg = replace(get_preset("tiny").model, dropout=0.0, max_positions=max_positions)
    model = Transformer(cfg, len(vocab))
    with torch.no_grad():  # sharper distributions, so hypotheses differ
        model.tgt_embed.weight.mul_(4)
    path = directory / "model.pt"
    save_model_file(model_payload(model, vocab.to_bytes()), path)
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    return make_model_file(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def short_model_file(tmp_path_factory) -> Path:
    """A model with only 32 positions, so ordinary lines are too long for it."""
    return make_model_file(tmp_path_factory.mktemp("short"), max_positions=32)


SHORT = DecodeConfig(beam=2, max_len_b=6)


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


NATIVE_BF16 = bf16_supported(torch.device("cpu"))


@pytest.mark.parametrize("precision", [
    pytest.param("bf16", marks=pytest.mark.skipif(not NATIVE_BF16, reason="no native bf16")),
    "int8"])
def test_reduced_precision_translates(model_file, precision):
    lines = sentences(4, seed=4)
    translator = Translator(load_for_inference(model_file), SHORT, precision=precision)
    assert len(list(translator.translate(lines))) == 4


def test_int8_frees_the_float_layers_it_replaces():
    # Quantization leaves the replaced float layers in reference cycles; prepare_model
    # must collect them itself, or they stay resident until some later collection.
    model = Transformer(get_preset("tiny").model, 60)
    float_layers = [weakref.ref(m) for m in model.modules() if type(m) is torch.nn.Linear]
    gc.collect()
    gc.disable()
    try:
        prepare_model(model, "cpu", "int8")
        assert float_layers and all(layer() is None for layer in float_layers)
    finally:
        gc.enable()


@pytest.mark.skipif(NATIVE_BF16, reason="this CPU has native bf16")
def test_emulated_bf16_is_refused(model_file):
    with pytest.raises(UserError, match="no native bf16"):
        Translator(load_for_inference(model_file), SHORT, precision="bf16")


def test_alignments_are_word_pairs_within_both_sentences(model_file):
    translator = Translator(load_for_inference(model_file), SHORT, alignments=True)
    line = "the green garden"
    [best] = next(translator.translate_nbest([line]))
    assert best.alignment
    target_words = len(best.text.split())
    for source_word, target_word in best.alignment:
        assert 0 <= source_word < 3 and 0 <= target_word < target_words


def test_word_alignment_maps_pieces_to_words():
    src = ["▁the", "▁gar", "den"]
    tgt = ["▁der", "▁Gar", "ten", "."]
    attention = torch.tensor([[0.8, 0.1, 0.1, 0.0],  # der -> the
                              [0.1, 0.2, 0.7, 0.0],  # Gar -> den (word 1)
                              [0.1, 0.6, 0.3, 0.0],  # ten -> gar (word 1)
                              [0.5, 0.2, 0.2, 0.1],  # . (still word 1) -> the
                              [0.0, 0.0, 0.0, 1.0]])  # EOS row, ignored
    assert word_alignment(src, tgt, attention) == [(0, 0), (0, 1), (1, 1)]


def test_output_formats():
    translations = [Translation("ein Haus", -0.51234, [5, 6], [(0, 0), (1, 1)]),
                    Translation("Haus", -0.9, [6], [(1, 0)])]
    assert format_translations(7, translations, nbest=False) == ["ein Haus ||| 0-0 1-1"]
    assert format_translations(7, translations, nbest=True) == [
        "7 ||| ein Haus ||| -0.5123 ||| 0-0 1-1", "7 ||| Haus ||| -0.9000 ||| 1-0"]
    plain = [Translation("ein Haus", -0.5, [5, 6])]
    assert format_translations(0, plain, nbest=False) == ["ein Haus"]


def test_bad_settings_are_user_errors(model_file):
    inference_model = load_for_inference(model_file)
    with pytest.raises(UserError, match="nbest"):
        Translator(inference_model, DecodeConfig(beam=2, nbest=3))
    with pytest.raises(UserError, match="precision"):
        Translator(inference_model, precision="fp8")
