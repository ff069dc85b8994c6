"""Dropout that keeps a bool mask for the backward pass, and draws it fast on CPUs."""

from __future__ import annotations

import threading

import torch
from torch import Tensor

_LANES = 1 << 16  # a mask element is one 16-bit slice of a random 64-bit word
_CHUNK_WORDS = 1 << 18  # random words drawn at a time, four mask elements each
_SCRATCH = threading.local()


def bool_mask_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element of x with probability p and scale the rest by 1 / (1 - p).

    Like torch.nn.functional.dropout, except for two costs on the CPU, where F.dropout
    multiplies by a mask of x's dtype that autograd keeps until backward (four times
    the bytes of a bool mask in float32, and a training step holds one per dropout),
    and draws one random number per element through torch's Bernoulli sampler, most of
    dropout's time. On the CPU the mask is bool and comes from 16-bit slices of random
    64-bit words instead, so p is rounded to a multiple of 1/65536 (0.1 becomes
    0.1000061), and the scale follows the rounded p, keeping the expectation exact.
    Elsewhere (GPUs), and inside torch.compile (whose tracer cannot follow the in-place
    random draw: each dropout would split the graph in two), this is torch.native_dropout,
    which is what F.dropout uses.
    """
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if (x.device.type != "cpu" or torch.compiler.is_compiling()
            or not 1 / _LANES <= p <= 1 - 1 / _LANES):
        return torch.native_dropout(x, p, True)[0]
    # P(a uniform 16-bit lane >= threshold) = p, rounded to the lanes' grid.
    threshold = round((1 - p) * _LANES) - _LANES // 2
    drop = _drop_mask(x.shape, threshold)
    # Autograd keeps only `drop` (bool) for backward: masked_fill's, not the product's.
    return x.mul(_LANES / (threshold + _LANES // 2)).masked_fill_(drop, 0.0)


def _drop_mask(shape: torch.Size, threshold: int) -> Tensor:
    """Bool (shape) True where a uniform 16-bit lane is >= threshold, on the CPU.

    The random words are drawn a chunk at a time into one buffer per thread that is
    kept: a temporary per call, freed between long-lived activations, left the
    allocator a hole per dropout, which raised a training step's peak memory.
    """
    words = getattr(_SCRATCH, "words", None)
    if words is None:
        words = _SCRATCH.words = torch.empty(_CHUNK_WORDS, dtype=torch.int64)
    lanes = words.view(torch.int16)  # (4 * _CHUNK_WORDS,)
    numel = shape.numel()
    drop = torch.empty(numel, dtype=torch.bool)
    for start in range(0, numel, lanes.numel()):
        count = min(lanes.numel(), numel - start)
        # Every bit random: random_() without a range leaves the sign bit 0.
        words[: (count + 3) // 4].random_(-(1 << 63), (1 << 63) - 1)
        torch.ge(lanes[:count], threshold, out=drop[start: start + count])
    return drop.view(shape)
