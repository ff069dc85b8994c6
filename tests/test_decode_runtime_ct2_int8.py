"""CTranslate2's int8 weights in 7 bits where 8-bit products saturate
(decode/runtime/ct2_int8.py): which CPUs, the weights as stored, and a 7-bit model's
scores near float32's on whatever CPU runs the test."""

from __future__ import annotations

import numpy as np
import pytest

from train_fixtures import reversal_pairs
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.runtime import choice
from transformer_nmt.decode.runtime.ct2_cache import converted_model
from transformer_nmt.decode.runtime.ct2_int8 import (LIMIT, SEVEN_BIT, products_saturate,
                                                     quantize_seven_bit)
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.text.scoring import score_ids
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model_file import load_for_inference

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

ZEN3 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
ZEN4 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n"
HASWELL = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx avx2 fma\n"
ALDER_LAKE = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx_vnni\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize("cpuinfo, saturates", [
    (ZEN3, True), (ZEN3 * 2, True), (HASWELL, True), (ZEN4, False), (ALDER_LAKE, False),
    (ARM, False)])
def test_an_x86_cpu_without_vnni_saturates(cpuinfo, saturates):
    assert products_saturate(cpuinfo) is saturates


@pytest.mark.parametrize("saturates", [True, False])
def test_int8_is_stored_in_7_bits_only_where_products_saturate(monkeypatch, saturates):
    monkeypatch.setattr(choice, "products_saturate_here", lambda: saturates)
    assert choice.storage_type("int8_float32") == (SEVEN_BIT if saturates else "int8")
    assert choice.storage_type("float32") == "float32"


def _translator(model_file) -> Translator:
    return Translator(load_for_inference(model_file), TranslatorOptions(
        DecodeConfig(guard=False), engine="torch", precision="fp32"))


def _quantizable(spec) -> dict[str, tuple[object, np.ndarray]]:
    """(layer, value) of each variable of `spec` that has a scale beside it, by name."""
    from ctranslate2.specs.model_spec import visit_spec

    found = {}

    def collect(layer, name, value):
        if hasattr(layer, name.rsplit("/", 1)[-1] + "_scale"):
            found[name] = layer, np.asarray(value.numpy() if hasattr(value, "numpy") else value)

    visit_spec(spec, collect)
    return found


def test_7_bit_weights_are_within_63_and_scale_back_to_the_float_ones(trained_model_file):
    from transformer_nmt.decode.runtime.ct2_spec import model_spec

    model = load_for_inference(trained_model_file).model
    pieces = [str(i) for i in range(model.tgt_embed.num_embeddings)]
    floats = _quantizable(model_spec(model, pieces, 2, 3, 1))
    sevens = _quantizable(quantize_seven_bit(model_spec(model, pieces, 2, 3, 1)))
    assert floats and sevens.keys() == floats.keys()
    for name, (layer, weight) in sevens.items():
        scale = getattr(layer, name.rsplit("/", 1)[-1] + "_scale")  # (rows,)
        assert weight.dtype == np.int8 and np.abs(weight).max() <= LIMIT
        restored = weight.astype(np.float32) / scale[:, None]
        assert np.abs(restored - floats[name][1]).max() <= 0.5 / scale.min() + 1e-6


def test_7_bit_int8_scores_stay_near_float32s(trained_model_file):
    reference = _translator(trained_model_file)
    pairs = reversal_pairs(32, seed=11, words=(3, 9))
    sources = reference.source_ids([source for source, _ in pairs])
    targets = reference.source_ids([target for _, target in pairs])
    exact = [pair.log_prob for pair in score_ids(reference, sources, targets)]
    model = load_for_inference(trained_model_file)
    vocab = model.vocab
    directory = converted_model(model.model, model.payload_meta,
                                SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id),
                                vocab.unk_id, len(vocab), SEVEN_BIT)
    int8 = ctranslate2.Translator(str(directory), compute_type="int8_float32",
                                  intra_threads=1)
    scored = int8.score_batch([[str(token) for token in ids] for ids in sources],
                              [[str(token) for token in ids] for ids in targets],
                              max_input_length=0)
    errors = [abs(sum(result.log_probs) - ours) / abs(ours)
              for result, ours in zip(scored, exact)]
    # Rounding moves them by about a hundredth; saturating products by several times more.
    assert sum(errors) / len(errors) < 0.03
