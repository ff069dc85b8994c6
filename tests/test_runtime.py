"""The one place that decides device and precision, for training and decoding alike."""

import pytest
import torch

from transformer_nmt.errors import UserError
from transformer_nmt.runtime import bf16_supported, resolve_device, resolve_precision, resolve_runtime

CPU = torch.device("cpu")
NATIVE_BF16 = bf16_supported(CPU)


def test_auto_precision_is_bf16_only_where_native():
    assert resolve_precision("auto", CPU, training=True) == ("bf16" if NATIVE_BF16 else "fp32")
    assert resolve_precision("fp32", CPU, training=True) == "fp32"


def test_fp16_needs_a_gpu_and_auto_is_for_training_only():
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU, training=True)
    with pytest.raises(UserError, match="precision must be one of fp32, bf16, int8"):
        resolve_precision("auto", CPU, training=False)
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
    from transformer_nmt.decode.translator import TranslatorOptions
    from transformer_nmt.runtime import DEFAULT_DEVICE

    assert TranslatorOptions().device is DEFAULT_DEVICE
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(DEFAULT_DEVICE).type == expected
