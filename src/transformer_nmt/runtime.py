"""Where a computation runs and in which precision: decided here once, for training,
translation, evaluation and every tool built on them.

The rules: no device named means CUDA when present, else the CPU, except that int8
(dynamic quantization) runs on the CPU only; bf16 only where the device computes it
natively (emulated bf16 is no mere slowdown: a CPU without AVX-512 BF16 or AMX multiplies
bf16 matrices far slower than fp32); fp16 only on CUDA, where a
gradient scaler keeps its small range usable; 'auto' (training) is bf16 where native,
else fp32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from transformer_nmt.config import DECODE_PRECISIONS, TRAIN_PRECISIONS
from transformer_nmt.errors import UserError

DEFAULT_DEVICE = None
"""The device of everything that names none (the library's Translator and trainer, every
command's --device): None lets `resolve_device` decide, CUDA when present, else the CPU."""


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` computes bf16 natively (fast), not just emulates it."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_device(name: str | torch.device | None, precision: str = "fp32",
                   local_rank: int = 0) -> torch.device:
    """The device for `name`: 'cpu', 'cuda', 'cuda:N', or None/'auto' for CUDA when
    present (the CPU for int8). Under torchrun every process takes the GPU of its local
    rank. UserError for an unknown device or one this process cannot use."""
    if name is DEFAULT_DEVICE or name == "auto":
        name = "cuda" if torch.cuda.is_available() and precision != "int8" else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {str(name)!r} asked for, but this PyTorch sees no CUDA "
                            "GPU; use the cpu device")
        if device.index is None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            device = torch.device("cuda", local_rank)
    elif device.type != "cpu":
        raise UserError(f"device {str(name)!r} is not supported; use cpu or cuda")
    return device


def resolve_precision(precision: str, device: torch.device, training: bool) -> str:
    """The precision to compute in on `device`: 'auto' (training only) becomes bf16 where
    native, else fp32; a precision the device cannot do well is a UserError."""
    allowed = TRAIN_PRECISIONS if training else DECODE_PRECISIONS
    if precision not in allowed:
        raise UserError(f"precision must be one of {', '.join(allowed)}, not {precision!r}")
    if precision == "auto":
        return "bf16" if bf16_supported(device) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise UserError("precision fp16 needs a CUDA GPU (CPUs have no fast fp16 matrix "
                        "products); use bf16 or fp32 on the CPU")
    if precision == "int8" and device.type != "cpu":
        raise UserError("precision int8 runs on the CPU only; use bf16 on a GPU")
    if precision == "bf16" and not bf16_supported(device):
        others = "fp32 or fp16" if device.type == "cuda" else "fp32" + (
            "" if training else " or int8")
        raise UserError(f"precision bf16: this {device.type.upper()} has no native bf16 "
                        "(needs AVX-512 BF16 or AMX on a CPU, Ampere or newer on a GPU) and "
                        f"would run far slower than fp32; use {others}")
    return precision


@dataclass(frozen=True)
class Runtime:
    """A decided device and precision."""

    device: torch.device
    precision: str


def resolve_runtime(device: str | torch.device | None, precision: str, *,
                    training: bool = False, local_rank: int = 0) -> Runtime:
    """Decide the device (see `resolve_device`) and then the precision on it (see
    `resolve_precision`), refusing a combination that cannot run well."""
    chosen = resolve_device(device, precision, local_rank)
    return Runtime(chosen, resolve_precision(precision, chosen, training))
