"""Which runtime a Translator takes (decode/runtime/choice.py): CTranslate2 under auto
wherever it can run the call, PyTorch with its reason otherwise, and a one-line refusal
when CTranslate2 was asked for and cannot run."""

from __future__ import annotations

import logging

import pytest
import torch

from transformer_nmt.config import get_preset
from transformer_nmt.decode.runtime.choice import (choose_engine, compute_type, storage_type,
                                                   torch_reason)
from transformer_nmt.decode.search.ensemble import Ensemble
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(get_preset("tiny").model, 32)


def test_auto_takes_ctranslate2_for_one_transformer_on_the_cpu(model):
    assert choose_engine("auto", model, CPU, "auto", batch_invariant=False) == "ctranslate2"
    assert choose_engine("ctranslate2", model, CPU, "fp32", batch_invariant=False) == \
        "ctranslate2"
    assert choose_engine("torch", model, CPU, "auto", batch_invariant=False) == "torch"


@pytest.mark.parametrize("precision, invariant, words", [
    ("auto", True, "batch invariance"), ("bf16", False, "no bf16 on the cpu")])
def test_auto_takes_torch_saying_why_once(model, caplog, precision, invariant, words):
    with caplog.at_level(logging.INFO, logger="transformer_nmt.decode.runtime.choice"):
        assert choose_engine("auto", model, CPU, precision, invariant) == "torch"
    (record,) = caplog.records
    assert words in record.getMessage()


def test_an_ensemble_decodes_in_torch(model):
    assert "ensemble" in torch_reason(Ensemble([model, model]), CPU, "fp32", False)


def test_ctranslate2_asked_for_where_it_cannot_run_is_one_line(model):
    with pytest.raises(UserError, match="--engine ctranslate2: batch invariance"):
        choose_engine("ctranslate2", model, CPU, "fp32", batch_invariant=True)
    with pytest.raises(UserError, match="engine must be one of auto, ctranslate2, torch"):
        choose_engine("onnx", model, CPU, "fp32", batch_invariant=False)


def test_precisions_map_to_compute_types_stored_as_computed():
    assert compute_type(CPU, "fp32") == "float32"
    assert compute_type(CPU, "int8") == "int8_float32"
    assert storage_type(compute_type(CPU, "int8")) == "int8"
    assert storage_type(compute_type(CPU, "fp32")) == "float32"
    assert compute_type(torch.device("cuda"), "bf16") == "bfloat16"
