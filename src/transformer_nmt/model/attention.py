"""Scaled dot-product attention (eq. 1) and multi-head attention (section 3.2.2).

Two paths compute eq. (1): the fused one through
`torch.nn.functional.scaled_dot_product_attention` (used for training and decoding), and
the explicit one below, which also returns the attention weights (for plots and
alignments). The key/value caches of incremental decoding are in model/cache.py.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.model.dropout import bool_mask_dropout


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Eq. (1) written out: softmax(Q K^T / sqrt(d_k)) V, returning output and weights.

    q: (batch, heads, tgt_len, d_k); k: (batch, heads, src_len, d_k);
    v: (batch, heads, src_len, d_v); mask: broadcastable to (batch, heads, tgt_len, src_len),
    True where attention is allowed. Illegal connections are set to -inf before the softmax.
    """
    weights = attention_weights(q, k, mask).to(q.dtype)
    output = bool_mask_dropout(weights, dropout, dropout > 0) @ v  # (batch, heads, tgt_len, d_v)
    return output, weights


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) of eq. (1), float32 (batch, heads, tgt_len, src_len), for
    q (batch, heads, tgt_len, d_k) and k (batch, heads, src_len, d_k) in one dtype; mask as
    in scaled_dot_product_attention."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, tgt_len, src_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1)


Kernel = Callable[[Tensor, Tensor, Tensor, "Tensor | None", bool, bool, float],
                  "tuple[Tensor, Tensor | None]"]
"""Eq. (1) on q, k, v of one dtype (batch, heads, len, d), with mask, causal, need_weights
and dropout as `eq1_kernel` takes them: the output and, if need_weights, the weights."""


def eq1_kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
               need_weights: bool, dropout: float) -> tuple[Tensor, Tensor | None]:
    """Eq. (1) as a `Kernel`: the explicit path when the weights are asked for, else the
    fused one, with its own causal rule."""
    if need_weights:
        return scaled_dot_product_attention(q, k, v, mask, dropout)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                          is_causal=causal), None


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
           need_weights: bool, kernel: Kernel = eq1_kernel, dropout: float = 0.0
           ) -> tuple[Tensor, Tensor | None]:
    """Eq. (1) on every head through `kernel`: the output (batch, heads, tgt_len, d_v) in
    q's dtype and, if need_weights, the weights (batch, heads, tgt_len, src_len).

    q (batch, heads, tgt_len, d_k); k and v (memory batch, heads, src_len, d), in the
    dtype a cache stores them in. q's batch may be `group` times k's: rows
    r * group .. r * group + group - 1 attend to k's row r (the beams of one sentence).
    causal: query i sits at position src_len - tgt_len + i and sees keys up to it
    (the decoder's masked self-attention, section 3.2.3).
    """
    if causal:
        mask, causal = _causal_mask(mask, q.size(2), k.size(2), need_weights, q.device)
    out_dtype = q.dtype
    q = q.to(k.dtype)  # a cache may store keys and values in a narrower dtype
    group = q.size(0) // k.size(0)
    if group > 1:
        # Several query rows per memory row (the beams of one sentence): fold them into
        # the query length, so that each sentence's keys/values are stored and read once.
        q = _fold_group(q, group)  # (batch / group, heads, group * tgt_len, d_k)
    out, weights = kernel(q, k, v, mask, causal, need_weights, dropout)
    if group > 1:
        out = _unfold_group(out, group)
        weights = None if weights is None else _unfold_group(weights, group)
    return out.to(out_dtype), weights


class AttentionCache(Protocol):
    """What incremental decoding keeps of one attention layer between steps: it owns how
    its keys and values are stored and attended (model/cache.py has the plain one)."""

    holds_memory: bool
    """Encoder-decoder attention: whether memory's keys and values are already kept (then
    the layer does not project memory again)."""

    def attend(self, q: Tensor, k: Tensor | None, v: Tensor | None, mask: Tensor | None,
               causal: bool, need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """Keep the new keys k and values v (batch, heads, new, d), None where the cache
        holds memory's, and return `attend` of q over every key kept."""


class MultiHeadAttention(nn.Module):
    """h parallel attention heads with their own projections, concatenated and projected
    (section 3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O.

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
        self.kernel: Kernel = eq1_kernel
        """How eq. (1) is computed (`eq1_kernel`); decoding may install its own: the
        same equation, other numerics."""

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                causal: bool = False, cache: AttentionCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attend from x (batch, tgt_len, d_model) to itself or to memory (batch, src_len, d_model).

        mask: bool, broadcastable to (batch, heads, tgt_len, src_len), True = may attend.
        causal: forbid attending to later positions (the decoder's self-attention).
        cache: for incremental decoding, the AttentionCache that keeps x's or memory's
        keys/values (memory projected once) and attends over them.
        Encoder-decoder attention accepts x with a batch `group` times memory's (`attend`).
        Returns the output (batch, tgt_len, d_model) and, if need_weights, the weights
        (batch, heads, tgt_len, src_len).
        """
        hk, hv = self.heads * self.d_k, self.heads * self.d_v
        if self.self_attention:
            q, k, v = self.qkv_proj(x).split([hk, hk, hv], dim=-1)  # (batch, tgt_len, h * d)
        else:
            q, k, v = self.q_proj(x), None, None
            if cache is None or not cache.holds_memory:
                k, v = self.kv_proj(memory).split([hk, hv], dim=-1)  # (batch, src_len, h * d)
        q = self._split_heads(q, self.d_k)  # (batch, heads, tgt_len, d_k)
        if k is not None:
            k, v = self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)
        dropout = self.attention_dropout if self.training else 0.0
        if cache is None:
            out, weights = attend(q, k, v, mask, causal, need_weights, self.kernel, dropout)
        else:
            out, weights = cache.attend(q, k, v, mask, causal, need_weights, self.kernel,
                                        dropout)
        out = out.transpose(1, 2).flatten(2)  # (batch, tgt_len, heads * d_v)
        return self.out_proj(out), weights

    def _split_heads(self, x: Tensor, width: int) -> Tensor:
        # (batch, len, heads * width) -> (batch, heads, len, width)
        return x.unflatten(-1, (self.heads, width)).transpose(1, 2)


def _causal_mask(mask: Tensor | None, tgt_len: int, src_len: int, need_weights: bool,
                 device: torch.device) -> tuple[Tensor | None, bool]:
    """The decoder self-attention's (mask, is_causal) for the attention kernel.

    Query i sits at absolute position past + i, after past = src_len - tgt_len cached
    positions, and may see keys 0..past + i. The fused kernel's own causal flag serves
    only a whole prefix without weights or another mask; otherwise the rule becomes part
    of the mask, (tgt_len, src_len) or mask's shape.
    """
    if tgt_len == 1:
        # One query, at the newest position, may see every key: nothing to hide, and a
        # mask would only slow the fused kernel down.
        return mask, False
    past = src_len - tgt_len
    if past == 0 and not need_weights and mask is None:
        return None, True
    rows = torch.arange(tgt_len, device=device).unsqueeze(1) + past  # (tgt_len, 1)
    allowed = rows >= torch.arange(src_len, device=device)  # (tgt_len, src_len)
    return (allowed if mask is None else mask & allowed), False


def _fold_group(x: Tensor, group: int) -> Tensor:
    """(n * group, heads, len, d) -> (n, heads, group * len, d); row r goes to n = r // group."""
    return x.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)


def _unfold_group(x: Tensor, group: int) -> Tensor:
    """The inverse of _fold_group: (n, heads, group * len, d) -> (n * group, heads, len, d)."""
    return x.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)
