"""Scaled dot-product and multi-head attention (model/attention.py): eq. (1) against numbers
computed by hand, the masks, and the module's paths (fused, with weights, cached, beams
sharing a sentence's keys) against each other. All in float32. The probe and decoding's
kernels are tested with them (tests/test_decode_attention_probe.py, tests/test_decode_attention_kernels.py)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_nmt.model.attention import (
    MultiHeadAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from transformer_nmt.model.cache import KVCache

D_MODEL, HEADS, D_K, D_V = 12, 3, 4, 5


def softmax(scores: list[float]) -> list[float]:
    exps = [math.exp(s) for s in scores]
    return [e / sum(exps) for e in exps]


def test_eq_1_on_numbers_computed_by_hand():
    # d_k = 4, so sqrt(d_k) = 2: the scores are the dot products halved.
    q = torch.tensor([[[[2.0, 0.0, 0.0, 0.0], [0.0, 2.0, 2.0, 0.0]]]])  # (1, 1, 2, 4)
    k = torch.tensor([[[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]]]])  # (1, 1, 3, 2)
    # Query 1: q.k = (2, 0, 2) -> scores (1, 0, 1); query 2: q.k = (0, 2, 4) -> (0, 1, 2).
    expected_weights = [softmax([1.0, 0.0, 1.0]), softmax([0.0, 1.0, 2.0])]
    expected_out = [[w[0] * 1 + w[1] * 0 + w[2] * 2, w[0] * 0 + w[1] * 1 + w[2] * 3]
                    for w in expected_weights]
    out, weights = scaled_dot_product_attention(q, k, v)
    assert weights.dtype == out.dtype == torch.float32
    torch.testing.assert_close(weights[0, 0], torch.tensor(expected_weights))
    torch.testing.assert_close(out[0, 0], torch.tensor(expected_out))
    torch.testing.assert_close(attention_weights(q, k), weights)


def test_a_masked_key_gets_weight_zero_and_the_others_share_its_weight():
    q = torch.tensor([[[[2.0, 0.0, 0.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]]]])
    mask = torch.tensor([True, False, True]).view(1, 1, 1, 3)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # Scores (1, -inf, 1): the two allowed keys share the weight equally.
    assert weights[0, 0, 0, 1] == 0
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([0.5, 0.0, 0.5]))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([1.5, 1.5]))


def test_the_mask_broadcasts_over_heads_and_queries_per_batch_row():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 5)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert weights[1, ..., 4:].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))
    # Row 1 with its padding cut off is the same attention.
    cut, _ = scaled_dot_product_attention(q[1:], k[1:, :, :4], v[1:, :, :4])
    torch.testing.assert_close(out[1:], cut)
    torch.testing.assert_close(out[:1], scaled_dot_product_attention(q[:1], k[:1], v[:1])[0])


def by_hand(attention: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor | None = None,
            mask: torch.Tensor | None = None) -> torch.Tensor:
    """Section 3.2.2 written out head by head from the module's own projection weights:
    Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""
    if memory is None:
        w, b = attention.qkv_proj.weight, attention.qkv_proj.bias
        wq, wk, wv = w.split([HEADS * D_K, HEADS * D_K, HEADS * D_V])
        bq, bk, bv = b.split([HEADS * D_K, HEADS * D_K, HEADS * D_V])
        source = x
    else:
        wq, bq = attention.q_proj.weight, attention.q_proj.bias
        wk, wv = attention.kv_proj.weight.split([HEADS * D_K, HEADS * D_V])
        bk, bv = attention.kv_proj.bias.split([HEADS * D_K, HEADS * D_V])
        source = memory
    heads = []
    for h in range(HEADS):
        q = x @ wq[h * D_K:(h + 1) * D_K].T + bq[h * D_K:(h + 1) * D_K]
        k = source @ wk[h * D_K:(h + 1) * D_K].T + bk[h * D_K:(h + 1) * D_K]
        v = source @ wv[h * D_V:(h + 1) * D_V].T + bv[h * D_V:(h + 1) * D_V]
        scores = q @ k.transpose(-2, -1) / math.sqrt(D_K)  # (batch, tgt_len, src_len)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v)
    return attention.out_proj(torch.cat(heads, -1))


def module(self_attention: bool, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(D_MODEL, HEADS, D_K, D_V, self_attention=self_attention).eval()


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_is_section_3_2_2_head_by_head(need_weights):
    attention = module(self_attention=True)
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        out, weights = attention(x, need_weights=need_weights)
        torch.testing.assert_close(out, by_hand(attention, x))
    assert (weights is None) != need_weights
    if need_weights:
        assert weights.shape == (2, HEADS, 5, 5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_encoder_decoder_attention_is_section_3_2_2_with_the_padding_masked(need_weights):
    attention = module(self_attention=False)
    x, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 6, D_MODEL)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False
    with torch.no_grad():
        out, weights = attention(x, memory, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out, by_hand(attention, x, memory, mask.squeeze(1)))
    if need_weights:
        assert weights[0, ..., 4:].abs().max() == 0


@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_self_attention_sees_no_later_position(need_weights):
    attention = module(self_attention=True)
    x = torch.randn(1, 5, D_MODEL)
    later = x.clone()
    later[:, 3:] = torch.randn(1, 2, D_MODEL)
    causal = torch.ones(5, 5).tril().bool()
    with torch.no_grad():
        out, weights = attention(x, causal=True, need_weights=need_weights)
        changed, _ = attention(later, causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, by_hand(attention, x, mask=causal))
    torch.testing.assert_close(out[:, :3], changed[:, :3])
    assert not torch.allclose(out[:, 3:], changed[:, 3:])
    if need_weights:
        assert torch.triu(weights, diagonal=1).abs().max() == 0


def test_cached_steps_equal_one_causal_pass():
    attention = module(self_attention=True)
    x = torch.randn(2, 4, D_MODEL)
    cache = KVCache()
    with torch.no_grad():
        whole, _ = attention(x, causal=True)
        first, _ = attention(x[:, :2], causal=True, cache=cache)  # a prefix of two, then steps
        steps = [attention(x[:, i:i + 1], causal=True, cache=cache)[0] for i in (2, 3)]
    torch.testing.assert_close(torch.cat([first, *steps], 1), whole)


def test_beams_of_one_sentence_attend_to_its_memory_row():
    attention = module(self_attention=False)
    group = 3
    x, memory = torch.randn(2 * group, 2, D_MODEL), torch.randn(2, 6, D_MODEL)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 5:] = False
    with torch.no_grad():
        for need_weights in (False, True):
            shared, weights = attention(x, memory, mask=mask, need_weights=need_weights)
            repeated, expected = attention(
                x, memory.repeat_interleave(group, 0), mask=mask.repeat_interleave(group, 0),
                need_weights=need_weights)
            torch.testing.assert_close(shared, repeated)
            if need_weights:
                torch.testing.assert_close(weights, expected)
