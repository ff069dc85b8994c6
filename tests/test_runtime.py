"""The one place that decides device and precision, for training and decoding alike."""

import json

import pytest
import torch

from transformer_nmt import runtime
from transformer_nmt.errors import UserError
from transformer_nmt.runtime import (SHAPE_MULTIPLE, MatmulRates, bf16_supported,
                                     cached_matmul_rates, length_multiple, resolve_device,
                                     resolve_precision, resolve_runtime,
                                     validation_precision)

CPU = torch.device("cpu")
NATIVE_BF16 = bf16_supported(CPU)


def test_auto_precision_is_fp32_where_bf16_is_not_native(monkeypatch):
    monkeypatch.setattr(runtime, "bf16_supported", lambda device: False)
    monkeypatch.setattr(runtime, "measure_matmul_rates", lambda *a: pytest.fail("measured"))
    said = []
    assert resolve_precision("auto", CPU, training=True, log=said.append) == "fp32"
    assert said == ["precision auto: fp32 (this CPU has no native bf16)"]
    assert resolve_precision("fp32", CPU, training=True) == "fp32"


@pytest.mark.parametrize("bf16_rate, chosen", [(0.5e11, "fp32"), (1.2e11, "fp32"),
                                                (1.25e11, "bf16"), (4.0e11, "bf16")])
def test_auto_precision_on_a_native_cpu_follows_the_measured_rates(
        monkeypatch, tmp_path, bf16_rate, chosen):
    """Native bf16 is not enough: it must multiply clearly faster than fp32 (a CPU with
    AVX-512 BF16 but no AMX runs it slower than fp32)."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "bf16_supported", lambda device: True)
    monkeypatch.setattr(runtime, "measure_matmul_rates",
                        lambda device, shape: MatmulRates(fp32=1.0e11, bf16=bf16_rate))
    said = []
    assert resolve_precision("auto", CPU, training=True, log=said.append) == chosen
    assert said[0].startswith(f"precision auto: {chosen} (bf16 products ran "
                              f"{bf16_rate / 1e11:.2f}x as fast as fp32")
    assert "100 GFLOP/s" in said[0]


@pytest.mark.parametrize("bf16_rate, chosen", [(1.2e11, "fp32"), (1.25e11, "bf16")])
def test_auto_decoding_precision_follows_the_rates_at_a_decoding_shape(
        monkeypatch, tmp_path, bf16_rate, chosen):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "bf16_supported", lambda device: True)
    shapes = []

    def measure(device, shape):
        shapes.append(shape)
        return MatmulRates(fp32=1.0e11, bf16=bf16_rate)

    monkeypatch.setattr(runtime, "measure_matmul_rates", measure)
    said = []
    assert resolve_precision("auto", CPU, training=False, log=said.append) == chosen
    assert shapes == [runtime.DECODE_PRODUCT_SHAPE]
    assert said[0].startswith(f"precision auto: {chosen} (bf16 products ran")
    assert resolve_runtime("cpu", "auto").precision == chosen  # cached: measured once
    assert shapes == [runtime.DECODE_PRODUCT_SHAPE]


def test_auto_decoding_precision_never_picks_int8_and_needs_native_bf16(monkeypatch):
    monkeypatch.setattr(runtime, "bf16_supported", lambda device: False)
    monkeypatch.setattr(runtime, "measure_matmul_rates", lambda *a: pytest.fail("measured"))
    assert resolve_precision("auto", CPU, training=False) == "fp32"


def test_the_measured_rates_are_cached_per_machine_and_shape(monkeypatch, tmp_path):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    measured = []

    def measure(device, shape):
        measured.append(shape)
        return MatmulRates(fp32=1e11, bf16=3e11)

    assert cached_matmul_rates(CPU, (8, 4, 2), measure) == (MatmulRates(1e11, 3e11), False)
    assert cached_matmul_rates(CPU, (8, 4, 2), measure) == (MatmulRates(1e11, 3e11), True)
    assert cached_matmul_rates(CPU, (16, 4, 2), measure)[1] is False
    assert measured == [(8, 4, 2), (16, 4, 2)]
    stored = json.loads((tmp_path / "cache" / "matmul_rates.json").read_text())
    assert len(stored) == 2 and all("threads" in key for key in stored)


def test_a_broken_or_unwritable_cache_is_measured_around(monkeypatch, tmp_path):
    (tmp_path / "matmul_rates.json").write_text("{not json")
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    rates = cached_matmul_rates(CPU, (8, 4, 2), lambda device, shape: MatmulRates(1e11, 2e11))
    assert rates == (MatmulRates(1e11, 2e11), False)
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "matmul_rates.json" / "below-a-file"))
    assert cached_matmul_rates(CPU, (8, 4, 2),
                               lambda device, shape: MatmulRates(1e11, 2e11))[1] is False


def test_measured_rates_are_real_numbers():
    rates = runtime.measure_matmul_rates(CPU, (64, 32, 16))
    assert rates.fp32 > 0 and rates.bf16 > 0


def test_fp16_is_for_training_on_a_gpu_and_int8_for_decoding():
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU, training=True)
    with pytest.raises(UserError, match="precision must be one of auto, fp32, bf16, int8"):
        resolve_precision("fp16", CPU, training=False)
    with pytest.raises(UserError, match="precision must be one of auto"):
        resolve_precision("int8", CPU, training=True)


@pytest.mark.skipif(NATIVE_BF16, reason="this CPU has native bf16")
def test_emulated_bf16_is_refused_naming_the_alternatives():
    with pytest.raises(UserError, match="no native bf16.*use fp32 or int8"):
        resolve_precision("bf16", CPU, training=False)


def test_no_device_named_means_the_cpu_for_int8_and_without_a_gpu():
    assert resolve_runtime(None, "int8").device == CPU
    if not torch.cuda.is_available():
        assert resolve_runtime(None, "fp32").device == CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_and_unknown_devices_are_one_line_errors():
    with pytest.raises(UserError, match="sees no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(UserError, match="unknown device 'tpu9'"):
        resolve_device("tpu9")


def test_the_library_and_the_commands_share_one_default_device():
    from transformer_nmt.decode.text.translator import TranslatorOptions
    from transformer_nmt.runtime import DEFAULT_DEVICE

    assert TranslatorOptions().device is DEFAULT_DEVICE
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(DEFAULT_DEVICE).type == expected


def test_batch_lengths_are_padded_to_a_multiple_only_for_bf16_on_a_cpu():
    assert length_multiple(CPU, "bf16") == SHAPE_MULTIPLE > 1
    assert length_multiple(CPU, "fp32") == 1
    assert length_multiple(torch.device("cuda"), "bf16") == 1
    assert length_multiple(torch.device("cuda"), "fp16") == 1


def test_validation_runs_in_fp32_on_a_cpu_and_in_the_training_precision_on_a_gpu():
    assert validation_precision(CPU, "bf16") == "fp32"
    assert validation_precision(CPU, "fp32") == "fp32"
    assert validation_precision(torch.device("cuda"), "bf16") == "bf16"
