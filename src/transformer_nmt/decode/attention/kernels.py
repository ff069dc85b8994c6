"""Eq. (1) as decoding on a CPU computes it: the model's kernel (model/attention.py,
`eq1_kernel`) with two changes a decoding model gets installed (`install_kernels`,
from decode/runtime/precision.py), the equation unchanged.

- bf16 on a CPU compiles a kernel per shape (transformer_nmt.runtime.compiles_per_shape),
  and the explicit path serves whole sentences of every length (the weights of
  confidence and attention maps): it computes in float32, where nothing is kept per shape.
- Batch-invariant attention (`batch_invariant_attention`): each row attends over a number
  of keys that depends on that row alone, not on its batch's padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.decode.device.threads import torch_threads
from transformer_nmt.model.attention import (MultiHeadAttention, eq1_kernel,
                                             scaled_dot_product_attention)
from transformer_nmt.runtime import compiles_per_shape

KEY_TILE = 16
"""What batch-invariant attention rounds each row's number of keys up to
(`batch_invariant_attention`): a batch's rows fall into a few such lengths, one call each."""


@dataclass(frozen=True)
class DecodingKernel:
    """Eq. (1) for decoding (the module docstring's two changes); a MultiHeadAttention's
    `kernel`, with the arguments of model.attention.eq1_kernel."""

    batch_invariant: bool = False
    """Attend each row over its own keys, rounded up (`batch_invariant_attention`)."""
    self_attention: bool = False
    """The module attends over its own sequence (the encoder's queries are rounded too)."""

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                 need_weights: bool, dropout: float) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            if q.dtype == torch.bfloat16 and compiles_per_shape(q.device, "bf16"):
                out, weights = scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                            mask, dropout)
                return out.to(q.dtype), weights.to(q.dtype)
            return scaled_dot_product_attention(q, k, v, mask, dropout)
        if self.batch_invariant and not causal and (mask is None or (
                mask.size(0) == k.size(0) and mask.size(-2) == 1)):
            # Every key where no mask is given, as a row cache's rows would mask them.
            keys = mask if mask is not None else torch.ones(
                k.size(0), 1, 1, k.size(2), dtype=torch.bool, device=k.device)
            whole = self.self_attention and q.size(2) == k.size(2)
            return batch_invariant_attention(q, k, v, keys, whole), None
        return eq1_kernel(q, k, v, mask, causal, need_weights, dropout)


def install_kernels(model: nn.Module, batch_invariant: bool = False) -> nn.Module:
    """`model`'s attention modules, in place, computing eq. (1) with DecodingKernel."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.kernel = DecodingKernel(batch_invariant, module.self_attention)
    return model


def batch_invariant_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                              whole: bool) -> Tensor:
    """The fused kernel on each row over a number of keys that depends on the row
    alone: its own keys, rounded up to a multiple of KEY_TILE with masked keys.
    q (batch, heads, tgt_len, d_k), k and v (batch, heads, src_len, d), mask
    (batch, 1, 1, src_len) True on each row's first keys (padding at the end); the
    output (batch, heads, tgt_len, d_v). whole: a self-attention over whole sequences.

    The fused kernel's sums over the keys change with how many keys a row has, masked
    ones included: a sentence padded
    to a longer batch mate's source attended differently than alone. Here the rows of
    each rounded length run as one call, keys cut (or zero-padded) to it, so that a
    row gets the call it gets alone; the rows of a call do not affect each other's
    numbers, only the shapes do, and masked keys give weights of exactly 0 whatever
    their (finite) values. A self-attention over whole sequences (the
    encoder's) treats its queries alike, as the number of queries changes the sums
    too.
    """
    lengths = mask.view(mask.size(0), -1).sum(1)  # (batch,) keys each row may see
    rounded = (lengths + KEY_TILE - 1) // KEY_TILE * KEY_TILE  # (batch,)
    queries = q.size(2)
    longest = int(rounded.max())
    if longest > k.size(2):  # zero keys, masked: finite, so that 0 weights give 0
        extra = longest - k.size(2)
        k, v = F.pad(k, (0, 0, 0, extra)), F.pad(v, (0, 0, 0, extra))
        mask = F.pad(mask, (0, extra), value=False)
        if whole:
            q = F.pad(q, (0, 0, 0, extra))
    out = q.new_empty(q.size(0), q.size(1), queries, v.size(-1))  # (batch, heads, tgt_len, d_v)
    for length in rounded.unique().tolist():
        rows = rounded.eq(length).nonzero().squeeze(1)  # (group,)
        first = int(rows[0])
        if int(rows[-1]) - first + 1 == rows.numel():  # consecutive rows: views
            pick: slice | Tensor = slice(first, first + rows.numel())
        else:
            pick = rows
        found = _one_thread_in_float32(
            q[pick][:, :, :length] if whole else q[pick], k[pick][:, :, :length],
            v[pick][:, :, :length], mask[pick][..., :length])
        if whole and length < queries:  # the queries beyond are padding
            found = F.pad(found, (0, 0, 0, queries - length))
        out[pick] = found[:, :, :queries]
    return out


def _one_thread_in_float32(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """The fused kernel on q, k, v with `mask`, on one thread in float32.

    In float32 the CPU's fused kernel gave a row other last bits on the second thread
    than on the first (many rows of a batch differed from the same row alone at two
    threads, none at one), so which rows share a call would decide a row's numbers. bf16's kernel showed no such difference."""
    if q.dtype != torch.float32 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with torch_threads(1):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
