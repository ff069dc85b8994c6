"""Carrying out a decided precision (training/precision.py): autocast per precision, and SDPA's
math kernel for short CPU bf16 batches only."""

import contextlib

import pytest
import torch

from transformer_nmt.training.precision import (DTYPES, MATH_ATTENTION_MAX_LEN, attention_kernels,
                                             autocast)

CPU = torch.device("cpu")


def test_fp32_runs_without_autocast():
    with autocast(CPU, "fp32"):
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_lower_precisions_autocast_to_their_dtype(precision):
    with autocast(CPU, precision):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == DTYPES[precision]
        product = torch.ones(2, 2) @ torch.ones(2, 2)
    assert product.dtype == DTYPES[precision]
    assert not torch.is_autocast_enabled("cpu")


def test_cpu_bf16_uses_the_math_attention_kernel_for_short_batches():
    assert isinstance(attention_kernels(CPU, "fp32", 25), contextlib.nullcontext)
    assert not isinstance(attention_kernels(CPU, "bf16", 25), contextlib.nullcontext)
    assert not isinstance(attention_kernels(CPU, "bf16", MATH_ATTENTION_MAX_LEN),
                          contextlib.nullcontext)
    assert isinstance(attention_kernels(CPU, "bf16", MATH_ATTENTION_MAX_LEN + 1),
                      contextlib.nullcontext)
    assert isinstance(attention_kernels(CPU, "fp32", MATH_ATTENTION_MAX_LEN),
                      contextlib.nullcontext)


def test_gpu_training_attention_leaves_out_cudnns_kernel():
    # Entering the context only sets PyTorch's backend flags, which a CPU can read too.
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_kernels(torch.device("cuda"), "bf16", 25):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
