"""Decoding in reduced precision: bf16 weights and int8 quantization (decode/precision.py)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from decode_fixtures import SHORT, model_file, sentences  # noqa: F401  (model_file is a fixture)
from transformer_nmt.config import get_preset
from transformer_nmt.decode.precision import prepare_model
from transformer_nmt.decode.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.runtime import bf16_supported

NATIVE_BF16 = bf16_supported(torch.device("cpu"))


@pytest.mark.parametrize("precision", [
    pytest.param("bf16", marks=pytest.mark.skipif(not NATIVE_BF16, reason="no native bf16")),
    "int8"])
def test_reduced_precision_translates(model_file, precision):
    lines = sentences(4, seed=4)
    options = TranslatorOptions(SHORT, precision=precision)
    translator = Translator(load_for_inference(model_file), options)
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
        prepare_model(load_for_inference(model_file).model, "cpu", "bf16")
