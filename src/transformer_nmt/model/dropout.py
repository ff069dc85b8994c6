"""Dropout that keeps a one-byte mask for the backward pass, and draws it fast on CPUs."""

from __future__ import annotations

import torch
from torch import Tensor

_LANES = 1 << 16  # a mask element is one 16-bit slice of a random 64-bit word


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element of x with probability p and scale the rest by 1 / (1 - p).

    Like torch.nn.functional.dropout, except for two costs on the CPU, where F.dropout
    multiplies by a mask of x's dtype that autograd keeps until backward (four times
    the bytes of a bool mask: the base model's training step at ~4000 + 4000 tokens holds
    32 masks, ~250 MB in float32, ~60 MB as bool), and draws one random number per
    element through torch's Bernoulli sampler, which took ~70% of dropout's time here.
    On the CPU the mask comes from 16-bit slices of random 64-bit words instead, so p is
    rounded to a multiple of 1/65536 (0.1 becomes 0.1000061), and the scale follows
    the rounded p, keeping the expectation exact. Elsewhere (GPUs) this is
    torch.native_dropout, which is what F.dropout uses there.
    """
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if x.device.type != "cpu" or not 1 / _LANES <= p <= 1 - 1 / _LANES:
        return torch.native_dropout(x, p, True)[0]
    return _CpuDropout.apply(x, p)


class _CpuDropout(torch.autograd.Function):
    """x * keep / P(keep) with a bool mask `keep`, saved for backward."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        # P(a uniform 16-bit lane < threshold) = (threshold + 2^15) / 2^16 = 1 - p, rounded.
        threshold = round((1 - p) * _LANES) - _LANES // 2
        words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device)
        words.random_(-(1 << 63), (1 << 63) - 1)  # every bit random (random_() leaves the sign 0)
        keep = words.view(torch.int16)[: x.numel()].lt(threshold).view(x.shape)
        scale = _LANES / (threshold + _LANES // 2)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        # native_dropout_backward(t, mask, scale) is t * mask * scale in one pass.
        return torch.ops.aten.native_dropout_backward(x, keep, scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (keep,) = ctx.saved_tensors
        return torch.ops.aten.native_dropout_backward(grad, keep, ctx.scale), None
