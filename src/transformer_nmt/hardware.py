"""What the device under a computation can do natively, for training and decoding alike."""

from __future__ import annotations

import torch


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` computes bf16 natively (fast), not just emulates it.

    Emulated bf16 is no mere slowdown: a CPU without AVX-512 BF16 or AMX multiplies bf16
    matrices about a hundred times slower than fp32 ones.
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
