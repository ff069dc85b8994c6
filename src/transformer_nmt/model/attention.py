"""Scaled dot-product attention (eq. 1), multi-head attention (section 3.2.2), KV cache.

Two paths compute the same thing: the fused one through
`torch.nn.functional.scaled_dot_product_attention` (used for training and decoding), and
an explicit one that also returns the attention weights (for plots and alignments).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.memory import release_rows
from transformer_nmt.model.dropout import dropout as apply_dropout


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Eq. (1) written out: softmax(Q K^T / sqrt(d_k)) V, returning output and weights.

    q: (batch, heads, tgt_len, d_k); k: (batch, heads, src_len, d_k);
    v: (batch, heads, src_len, d_v); mask: broadcastable to (batch, heads, tgt_len, src_len),
    True where attention is allowed. Illegal connections are set to -inf before the softmax.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, tgt_len, src_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    output = apply_dropout(weights, dropout, dropout > 0) @ v  # (batch, heads, tgt_len, d_v)
    return output, weights


class SparePool:
    """Buffers that reorders gather into, shared by the caches of one decoder.

    A reorder gathers a cache into a spare buffer and hands its old buffer back, so one
    spare serves every layer in turn: the memory of one layer's cache, not of a second
    copy of all of them. Fresh allocations of tens of MB per step would instead be
    page-faulted in every time. Only buffers of the latest shape are kept.
    """

    def __init__(self) -> None:
        self._free: list[Tensor] = []

    def take(self, rows: int, like: Tensor) -> Tensor:
        """A buffer (rows, *like.shape[1:]) of like's dtype and device, contents undefined.

        A buffer with more rows than asked for (sentences have left the batch) serves
        as its first rows, and the pages of the rest go back to the operating system:
        they would otherwise stay resident until the batch ends.
        """
        for i, buffer in enumerate(self._free):
            if (buffer.shape[1:] == like.shape[1:] and buffer.size(0) >= rows
                    and buffer.dtype == like.dtype and buffer.device == like.device):
                buffer = self._free.pop(i)
                if buffer.size(0) > rows:
                    release_rows(buffer, rows)
                return buffer[:rows]
        return like.new_empty(rows, *like.shape[1:])

    def give(self, buffer: Tensor) -> None:
        """Keep `buffer` for a later take; buffers of other shapes are dropped."""
        self._free = [b for b in self._free if b.shape[1:] == buffer.shape[1:]][-1:] + [buffer]


class KVCache:
    """Keys and values of one attention layer kept between incremental decoding steps.

    Self-attention appends one step's keys/values per call; encoder-decoder attention
    fills its keys/values once per source sentence. Beam search calls `reorder`.

    They live in contiguous buffers (batch, heads, capacity, d), so that a step writes
    only its own positions (torch.cat would copy the whole cache every step), and a
    reorder is one gather into a spare buffer from `pool`. `capacity` positions are set
    aside at the first append: the operating system backs only the pages that are
    written, so the unused tail costs address space, not memory, where growing the
    buffers (in steps of GROWTH positions, past the capacity) leaves the allocator holes
    of every smaller size: 300 MB more at the peak of a beam search over 120-token
    sentences of the base model.
    """

    GROWTH = 16

    def __init__(self, pool: SparePool | None = None, capacity: int = 0,
                 dtype: torch.dtype | None = None) -> None:
        self._keys: Tensor | None = None  # (batch, heads, capacity, d_k)
        self._values: Tensor | None = None  # (batch, heads, capacity, d_v)
        self._pool = SparePool() if pool is None else pool
        self._capacity = capacity
        self.dtype = dtype
        """The dtype keys and values are stored in (None: the dtype they come in)."""
        self.length = 0
        """Number of cached positions."""

    @property
    def keys(self) -> Tensor | None:
        """(batch, heads, length, d_k) the cached keys, or None before the first append."""
        return None if self._keys is None else self._keys[:, :, : self.length]

    @property
    def values(self) -> Tensor | None:
        """(batch, heads, length, d_v) the cached values, or None before the first append."""
        return None if self._values is None else self._values[:, :, : self.length]

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions, keys (batch, heads, new, d_k) and values; return all so far."""
        if self.dtype is not None:
            keys, values = keys.to(self.dtype), values.to(self.dtype)
        end = self.length + keys.size(2)
        if self._keys is None or end > self._keys.size(2):
            self._grow(keys, values, end)
        self._keys[:, :, self.length: end] = keys
        self._values[:, :, self.length: end] = values
        self.length = end
        return self.keys, self.values

    def _grow(self, keys: Tensor, values: Tensor, needed: int) -> None:
        capacity = max(-(-needed // self.GROWTH) * self.GROWTH, self._capacity)
        grown = []
        for old, new in ((self._keys, keys), (self._values, values)):
            batch, heads, _, width = new.shape
            buffer = new.new_empty(batch, heads, capacity, width)
            if old is not None:
                buffer[:, :, : self.length] = old[:, :, : self.length]
            grown.append(buffer)
        self._keys, self._values = grown

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (batch,) in that order, e.g. the surviving beams."""
        if self._keys is None:
            return
        if self._keys.requires_grad or self._values.requires_grad:
            # Gathering into a buffer (out=) cannot carry gradients; a copy can.
            self._keys, self._values = self._keys[index], self._values[index]
            return
        self._keys = self._gather(self._keys, index)
        self._values = self._gather(self._values, index)

    def _gather(self, buffer: Tensor, index: Tensor) -> Tensor:
        gathered = self._pool.take(index.numel(), buffer)
        torch.index_select(buffer[:, :, : self.length], 0, index,
                           out=gathered[:, :, : self.length])
        self._pool.give(buffer)
        return gathered


class MultiHeadAttention(nn.Module):
    """h parallel attention heads with their own projections, concatenated and projected.

    d_k and d_v are set independently of d_model / h, as Table 3 rows (A) and (B) need.
    Self-attention projects Q, K, V with one fused matrix (one large matrix product);
    encoder-decoder attention projects Q from the decoder and K, V from the encoder.
    """

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int,
                 attention_dropout: float = 0.0, self_attention: bool = True) -> None:
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.self_attention = self_attention
        self.attention_dropout = attention_dropout
        if self_attention:
            self.qkv_proj = nn.Linear(d_model, heads * (2 * d_k + d_v))
        else:
            self.q_proj = nn.Linear(d_model, heads * d_k)
            self.kv_proj = nn.Linear(d_model, heads * (d_k + d_v))
        self.out_proj = nn.Linear(heads * d_v, d_model)

    def _split_heads(self, x: Tensor, width: int) -> Tensor:
        # (batch, len, heads * width) -> (batch, heads, len, width)
        return x.unflatten(-1, (self.heads, width)).transpose(1, 2)

    def _keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.kv_proj(memory).split([self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        return self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from x (batch, tgt_len, d_model) to itself or to memory (batch, src_len, d_model).

        mask: bool, broadcastable to (batch, heads, tgt_len, src_len), True = may attend.
        causal: forbid attending to later positions (the decoder's self-attention).
        cache: for incremental decoding; self-attention appends x's keys/values to it,
        encoder-decoder attention computes memory's keys/values once and reuses them.
        Encoder-decoder attention accepts x with a batch `group` times memory's: rows
        r * group .. r * group + group - 1 attend to memory row r (beams of one sentence).
        Returns the output (batch, tgt_len, d_model) and, if need_weights, the weights
        (batch, heads, tgt_len, src_len).
        """
        if self.self_attention:
            q, k, v = self.qkv_proj(x).split(
                [self.heads * self.d_k, self.heads * self.d_k, self.heads * self.d_v], dim=-1)
            q, k, v = (self._split_heads(q, self.d_k), self._split_heads(k, self.d_k),
                       self._split_heads(v, self.d_v))
            past = 0
            if cache is not None:
                past = cache.length
                k, v = cache.append(k, v)
            if causal and q.size(2) == 1:
                # One query, at the newest position, may see every key: nothing to hide.
                # (Masks cost the fused kernel 5-10% here, and building one costs more.)
                causal = False
            elif causal and (past > 0 or need_weights or mask is not None):
                # Query i sits at absolute position past + i and may see keys 0..past + i.
                tgt_len, src_len = q.size(2), k.size(2)
                rows = torch.arange(tgt_len, device=x.device).unsqueeze(1) + past
                allowed = rows >= torch.arange(src_len, device=x.device)
                mask = allowed if mask is None else mask & allowed
                causal = False
        else:
            q = self._split_heads(self.q_proj(x), self.d_k)
            if cache is not None and cache.keys is not None:
                k, v = cache.keys, cache.values
            else:
                k, v = self._keys_values(memory)
                if cache is not None:
                    cache.append(k, v)
        out_dtype = q.dtype
        q = q.to(k.dtype)  # a cache may store keys and values in a narrower dtype
        group = q.size(0) // k.size(0)
        if group > 1:
            # Several query rows per memory row (the beams of one sentence): fold them into
            # the query length, so that each sentence's keys/values are stored and read once.
            q = _fold_group(q, group)  # (batch / group, heads, group * tgt_len, d_k)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and q.size(2) > 1)
        if group > 1:
            out = _unfold_group(out, group)
            weights = None if weights is None else _unfold_group(weights, group)
        out = out.transpose(1, 2).flatten(2).to(out_dtype)  # (batch, tgt_len, heads * d_v)
        return self.out_proj(out), weights


def _fold_group(x: Tensor, group: int) -> Tensor:
    """(n * group, heads, len, d) -> (n, heads, group * len, d); row r goes to n = r // group."""
    return x.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)


def _unfold_group(x: Tensor, group: int) -> Tensor:
    """The inverse of _fold_group: (n, heads, group * len, d) -> (n * group, heads, len, d)."""
    return x.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)
