"""Decoding's kernel of eq. (1) (decode/attention/kernels.py): float32 products for bf16
weights on a CPU, and batch-invariant attention that gives a row the numbers it gets alone."""

from __future__ import annotations

import torch

from transformer_nmt.decode.attention.kernels import DecodingKernel, install_kernels
from transformer_nmt.model.attention import MultiHeadAttention, scaled_dot_product_attention

D_MODEL, HEADS = 12, 3


def test_the_weights_path_multiplies_bf16_on_a_cpu_in_float32(monkeypatch):
    # bf16 products on a CPU keep a compiled kernel per pair of lengths; this path serves
    # whole sentences of every length, so it multiplies in float32 and answers in bf16.
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 6)
    expected, expected_weights = scaled_dot_product_attention(q, k, v)
    dtypes = []
    matmul = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__",
                        lambda a, b: dtypes.append(a.dtype) or matmul(a, b))
    out, weights = DecodingKernel()(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, False,
                                    True, 0.0)
    assert dtypes == [torch.float32, torch.float32]
    assert out.dtype == weights.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=0.05, rtol=0.05)
    torch.testing.assert_close(weights.float(), expected_weights, atol=0.02, rtol=0.02)


def test_batch_invariant_attention_gives_a_row_the_numbers_it_gets_alone():
    # Identity projections (exact whatever the matrix product's order of sums) leave only
    # the attention itself to depend on the batch.
    width = D_MODEL // HEADS
    attention = MultiHeadAttention(D_MODEL, HEADS, width, width, self_attention=False).eval()
    with torch.no_grad():
        for projection in (attention.q_proj, attention.kv_proj, attention.out_proj):
            projection.bias.zero_()
        attention.q_proj.weight.copy_(torch.eye(D_MODEL))
        attention.kv_proj.weight.copy_(torch.cat([torch.eye(D_MODEL), torch.eye(D_MODEL)]))
        attention.out_proj.weight.copy_(torch.eye(D_MODEL))
    install_kernels(attention, batch_invariant=True)
    torch.manual_seed(0)
    short, long = torch.randn(1, 3, D_MODEL), torch.randn(1, 3, D_MODEL)
    memory = torch.randn(2, 40, D_MODEL)
    mask = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    mask[0, ..., 7:] = False  # the first sentence has 7 tokens, its batch mate 40
    with torch.no_grad():
        together, _ = attention(torch.cat([short, long]), memory, mask=mask)
        alone, _ = attention(short, memory[:1, :7])
        _, weights = attention(short, memory[:1, :7], need_weights=True)
    assert torch.equal(together[:1], alone)
    heads = memory[:1, :7].unflatten(-1, (HEADS, width)).transpose(1, 2)  # (1, heads, 7, width)
    expected = (weights @ heads).transpose(1, 2).flatten(2)
    torch.testing.assert_close(alone, expected)


def test_installed_kernels_know_self_attention_and_leave_fp32_outputs_as_they_are():
    torch.manual_seed(0)
    plain = MultiHeadAttention(D_MODEL, HEADS, 4, 4, self_attention=True).eval()
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        before = plain(x, causal=True)[0], plain(x, need_weights=True)
        install_kernels(plain)
        after = plain(x, causal=True)[0], plain(x, need_weights=True)
    assert plain.kernel == DecodingKernel(batch_invariant=False, self_attention=True)
    assert torch.equal(before[0], after[0])
    assert all(torch.equal(a, b) for a, b in zip(before[1], after[1]))
