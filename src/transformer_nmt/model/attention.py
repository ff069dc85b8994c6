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
    output = F.dropout(weights, p=dropout, training=dropout > 0) @ v  # (batch, heads, tgt_len, d_v)
    return output, weights


class KVCache:
    """Keys and values of one attention layer kept between incremental decoding steps.

    Self-attention appends one step's keys/values per call; encoder-decoder attention
    fills its keys/values once per source sentence. Beam search calls `reorder`.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None  # (batch, heads, length, d_k)
        self.values: Tensor | None = None  # (batch, heads, length, d_v)

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.keys is None else self.keys.size(2)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions; return all keys and values so far."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (batch,) in that order, e.g. the surviving beams."""
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)


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
            if causal and (past > 0 or need_weights or mask is not None):
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
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and q.size(2) > 1)
        out = out.transpose(1, 2).flatten(2)  # (batch, tgt_len, heads * d_v)
        return self.out_proj(out), weights
