"""How a training or validation forward pass computes in its precision: the autocast
context and the choice of attention kernel.

Which precision a run uses is decided once, in transformer_nmt/runtime.py
(`resolve_precision`); this module only carries a decided precision out. The loss, the
gradients, the weights and Adam's moments stay float32 in every precision: autocast
lowers the matrix products alone.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The torch dtype of each training precision that runtime.resolve_precision can return."""

MATH_ATTENTION_MAX_LEN = 128
"""Longest batch (tokens per sentence) for which CPU bf16 training uses SDPA's math kernel."""
GPU_TRAINING_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                          SDPBackend.MATH]
"""SDPA's kernels for training on a GPU: every one but cuDNN's (see `attention_kernels`)."""


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast context of `precision` on `device` (nothing for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def attention_kernels(device: torch.device, precision: str,
                      length: int) -> contextlib.AbstractContextManager:
    """The SDPA kernel choice for a batch whose longer side is `length` tokens long.

    On CPUs in bf16, the backward of the fused flash-attention kernel is slow for the
    short sentences of translation, and the math kernel was measured faster up to a few
    hundred tokens; attention is a sizeable share of a training step at those lengths.

    On a GPU, PyTorch 2.11 picked cuDNN's attention for the padded batches of training.
    cuDNN builds an execution graph for every new shape, a costly step by public reports,
    and training meets a new (sentences, length) shape at almost every batch: the small
    preset trained far slower than it should there. The memory-efficient kernel takes the
    same masks with no per-shape cost. Elsewhere PyTorch's choice stands.
    """
    if device.type == "cpu" and precision == "bf16" and length <= MATH_ATTENTION_MAX_LEN:
        return sdpa_kernel(SDPBackend.MATH)
    if device.type == "cuda":
        return sdpa_kernel(GPU_TRAINING_ATTENTION)
    return contextlib.nullcontext()
