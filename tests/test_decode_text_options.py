"""How a Translator decodes (decode/text/options.py): settings refused when they cannot
be, and `resolved` deciding the device, precision, workers and batch size left open."""

from __future__ import annotations

import pytest
import torch

from transformer_nmt import runtime
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.device import threads as threads_module
from transformer_nmt.decode.text.options import TranslatorOptions
from transformer_nmt.errors import UserError


def test_bad_settings_are_user_errors_naming_the_setting():
    for name in ("batch_size", "max_tokens", "buffer_size", "workers", "threads"):
        with pytest.raises(UserError, match=f"^{name} must be at least 1, not 0$"):
            TranslatorOptions(**{name: 0})
    with pytest.raises(UserError, match="workers must be at least 1, not 1.5"):
        TranslatorOptions(workers=1.5)
    with pytest.raises(UserError, match="^engine must be one of auto, ctranslate2, torch, "
                                        "not 'onnx'"):
        TranslatorOptions(engine="onnx")


def test_resolved_keeps_what_was_asked_and_fills_in_the_rest(monkeypatch):
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", 2)
    resolved = TranslatorOptions(precision="fp32", threads=1, batch_invariant=None).resolved()
    assert (resolved.asked_precision, resolved.threads, resolved.batch_invariant) == (
        "fp32", 1, False)
    assert TranslatorOptions(precision="fp32").resolved().threads == 2
    assert TranslatorOptions(precision="auto").resolved().asked_precision == "auto"


@pytest.mark.parametrize("cores, workers, batch_size", [(1, 1, 32), (2, 2, 16), (8, 2, 16)])
def test_cpu_defaults_share_32_beam_4_sentences_among_two_workers(monkeypatch, cores, workers,
                                                                  batch_size):
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", cores)
    beam_4 = DecodeConfig(beam=4)
    default = TranslatorOptions(beam_4).resolved()
    assert (default.device, default.workers, default.batch_size) == (
        torch.device("cpu"), workers, batch_size)
    line_by_line = TranslatorOptions(beam_4, buffer_size=1).resolved()
    assert (line_by_line.workers, line_by_line.batch_size) == (1, 32)
    explicit = TranslatorOptions(beam_4, batch_size=5, workers=4).resolved()
    assert (explicit.workers, explicit.batch_size) == (4, 5)
    assert explicit.resolved() == explicit


@pytest.mark.parametrize("decode, per_worker", [
    (DecodeConfig(beam=1), 48), (DecodeConfig(beam=2), 32), (DecodeConfig(beam=8), 16),
    (DecodeConfig(sampling=True, nbest=1), 48), (DecodeConfig(sampling=True, nbest=3), 21)])
def test_searches_with_fewer_rows_per_sentence_get_more_sentences(monkeypatch, decode,
                                                                  per_worker):
    # About 128 decoder rows in flight (at least 32 sentences, at most 96), two workers.
    monkeypatch.setattr(threads_module, "_PROCESS_THREADS", 2)
    assert TranslatorOptions(decode).resolved().batch_size == per_worker


@pytest.mark.parametrize("chosen", ["fp32", "bf16"])
def test_decoding_precision_auto_is_the_default_and_resolves_to_what_the_rule_chose(
        monkeypatch, chosen):
    monkeypatch.setattr(runtime, "auto_decoding_precision", lambda device: (chosen, "measured"))
    assert TranslatorOptions().precision == "auto"
    assert TranslatorOptions().resolved().precision == chosen
    assert TranslatorOptions(precision="fp32").resolved().precision == "fp32"
