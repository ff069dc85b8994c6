"""Scaled dot-product attention (eq. 1) and multi-head attention (section 3.2.2).

Two paths compute the same thing: the fused one through
`torch.nn.functional.scaled_dot_product_attention` (used for training and decoding), and
the explicit eq. (1) below, which also returns the attention weights (for plots and
alignments). Read top to bottom: eq. (1), the module (its projections, then the
attention itself), and the helpers that let the beams of one sentence share its keys and
values. The key/value caches of incremental decoding are in model/cache.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.model.cache import KVCache
from transformer_nmt.model.dropout import bool_mask_dropout
from transformer_nmt.model.rows import RowSelfCache

KEY_TILE = 16
"""What batch-invariant attention rounds each row's number of keys up to
(`MultiHeadAttention._attend_batch_invariant`): a batch's rows fall into a few such
lengths, one call each."""


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Eq. (1) written out: softmax(Q K^T / sqrt(d_k)) V, returning output and weights.

    q: (batch, heads, tgt_len, d_k); k: (batch, heads, src_len, d_k);
    v: (batch, heads, src_len, d_v); mask: broadcastable to (batch, heads, tgt_len, src_len),
    True where attention is allowed. Illegal connections are set to -inf before the softmax.
    """
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        # A bf16 product on a CPU compiles and keeps a oneDNN kernel for every new pair of
        # lengths, and this path serves whole sentences of every length (the weights of
        # confidence and attention maps): in float32, MKL keeps nothing per shape.
        output, weights = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask,
                                                       dropout)
        return output.to(q.dtype), weights.to(q.dtype)
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
        self.batch_invariant = False
        """Attend each row over a number of keys that depends on that row alone, not on
        its batch's padding (decoding whose rows do not depend on their batch,
        transformer_nmt.decode.precision): see `_attend_batch_invariant`."""

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
        probe: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from x (batch, tgt_len, d_model) to itself or to memory (batch, src_len, d_model).

        mask: bool, broadcastable to (batch, heads, tgt_len, src_len), True = may attend.
        causal: forbid attending to later positions (the decoder's self-attention).
        cache: for incremental decoding; self-attention appends x's keys/values to it,
        encoder-decoder attention computes memory's keys/values once and reuses them.
        Encoder-decoder attention accepts x with a batch `group` times memory's: rows
        r * group .. r * group + group - 1 attend to memory row r (beams of one sentence).
        Returns the output (batch, tgt_len, d_model) and, if need_weights, the weights
        (batch, heads, tgt_len, src_len); with probe instead (encoder-decoder attention:
        no causal rule), the output is the fused kernel's, exactly as without weights, and
        the weights (float32) are computed beside.
        """
        if probe and causal:
            raise ValueError("probe serves encoder-decoder attention, not a causal one")
        if self.self_attention:
            q, k, v = self._self_projections(x, cache)
            if causal:
                mask, causal = _causal_mask(mask, q.size(2), k.size(2), need_weights, x.device)
        else:
            q, k, v = self._cross_projections(x, memory, cache)
        if isinstance(cache, RowSelfCache) and len(cache.spans) > 1 and not need_weights:
            out, weights = self._attend_spans(q, k, v, mask, cache.spans), None
        else:
            out, weights = self._attend(q, k, v, mask, causal, need_weights, probe)
        out = out.transpose(1, 2).flatten(2)  # (batch, tgt_len, heads * d_v)
        return self.out_proj(out), weights

    def _split_heads(self, x: Tensor, width: int) -> Tensor:
        # (batch, len, heads * width) -> (batch, heads, len, width)
        return x.unflatten(-1, (self.heads, width)).transpose(1, 2)

    def _self_projections(self, x: Tensor, cache: KVCache | None
                          ) -> tuple[Tensor, Tensor, Tensor]:
        """Q (batch, heads, tgt_len, d_k) of x, and K, V of the cached positions and x's
        (batch, heads, past + tgt_len, d_k or d_v), x's appended to the cache."""
        q, k, v = self.qkv_proj(x).split(
            [self.heads * self.d_k, self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        q, k, v = (self._split_heads(q, self.d_k), self._split_heads(k, self.d_k),
                   self._split_heads(v, self.d_v))
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v

    def _cross_projections(self, x: Tensor, memory: Tensor | None, cache: KVCache | None
                           ) -> tuple[Tensor, Tensor, Tensor]:
        """Q (batch, heads, tgt_len, d_k) of x, and K, V of memory
        (memory batch, heads, src_len, d_k or d_v), from the cache once it holds them."""
        q = self._split_heads(self.q_proj(x), self.d_k)
        if cache is not None and cache.keys is not None:
            return q, cache.keys, cache.values
        k, v = self.memory_keys_values(memory)
        if cache is not None:
            cache.append(k, v)
        return q, k, v

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder-decoder attention's K and V of memory (batch, src_len, d_model):
        (batch, heads, src_len, d_k) and (batch, heads, src_len, d_v)."""
        k, v = self.kv_proj(memory).split([self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        return self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                need_weights: bool, probe: bool = False) -> tuple[Tensor, Tensor | None]:
        """Eq. (1) on every head: the output (batch, heads, tgt_len, d_v) in q's dtype and,
        if need_weights or probe, the weights (batch, heads, tgt_len, src_len)."""
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
            if self.batch_invariant and not causal and (mask is None or (
                    mask.size(0) == k.size(0) and mask.size(-2) == 1)):
                # Every key where no mask is given, as a row cache's rows would mask them.
                keys = mask if mask is not None else torch.ones(
                    k.size(0), 1, 1, k.size(2), dtype=torch.bool, device=k.device)
                out = self._attend_batch_invariant(q, k, v, keys)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                     dropout_p=dropout, is_causal=causal)
            if probe:  # float32: bf16 products compile a CPU kernel for every new length
                weights = attention_weights(q.float(), k.float(), mask)
        if group > 1:
            out = _unfold_group(out, group)
            weights = None if weights is None else _unfold_group(weights, group)
        return out.to(out_dtype), weights

    def _attend_batch_invariant(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """The fused kernel on each row over a number of keys that depends on the row
        alone: its own keys, rounded up to a multiple of KEY_TILE with masked keys.
        q (batch, heads, tgt_len, d_k), k and v (batch, heads, src_len, d), mask
        (batch, 1, 1, src_len) True on each row's first keys (padding at the end); the
        output (batch, heads, tgt_len, d_v).

        The fused kernel's sums over the keys change with how many keys a row has, masked
        ones included (bench/RESULTS.md, "Batch-invariant decoding"): a sentence padded
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
        whole = self.self_attention and q.size(2) == k.size(2)
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
            found = F.scaled_dot_product_attention(
                q[pick][:, :, :length] if whole else q[pick], k[pick][:, :, :length],
                v[pick][:, :, :length], attn_mask=mask[pick][..., :length])
            if whole and length < queries:  # the queries beyond are padding
                found = F.pad(found, (0, 0, 0, queries - length))
            out[pick] = found[:, :, :queries]
        return out

    def _attend_spans(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                      spans: list[tuple[int, int, int]]) -> Tensor:
        """Rows at their own positions (model/rows.py) attending span by span, each span
        only as far as it reads: q (rows, heads, 1, d_k), k and v (rows, heads, end, d),
        mask (rows, 1, 1, end); the output (rows, heads, 1, d_v)."""
        return torch.cat([
            self._attend(q[first:end], k[first:end, :, :length], v[first:end, :, :length],
                         mask[first:end, :, :, :length], False, False)[0]
            for first, end, length in spans])


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
