"""The analytic FLOP count of training/flops.py, against a hand count and against torch.

The convention flops.py documents: a (m, k) by (k, n) matrix product is 2·m·k·n
operations; attention scores and weighted sums are counted over the full square (the
causal half is not subtracted); embedding lookups, biases, softmax and layer norms are
not counted; a training step is three forward passes (backward does two products per
forward product: one for the input's gradient, one for the weight's).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_nmt.config import BASE, get_preset
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.flops import forward_flops, train_step_flops

SRC_LEN, TGT_LEN, VOCAB, SENTENCES = 27, 25, 37000, 4


def test_base_model_step_matches_a_hand_count_from_the_papers_shapes():
    # Base model: N = 6, d_model = 512, d_ff = 2048, h = 8, d_k = d_v = 64 (h·d_k = 512).
    # Per sentence, 27 source and 25 target positions, a shared vocabulary of 37000.
    encoder_self_attention = (
        3 * (2 * 27 * 512 * 512)      # Q, K, V projections: (27, 512) x (512, 8·64)
        + 2 * 27 * 512 * 512          # output projection: (27, 8·64) x (8·64, 512)
        + 8 * (2 * 27 * 64 * 27)      # scores Q K^T per head: (27, 64) x (64, 27)
        + 8 * (2 * 27 * 27 * 64))     # weighted sums per head: (27, 27) x (27, 64)
    encoder_ffn = 2 * 27 * 512 * 2048 + 2 * 27 * 2048 * 512
    decoder_self_attention = (
        3 * (2 * 25 * 512 * 512)
        + 2 * 25 * 512 * 512
        + 8 * (2 * 25 * 64 * 25)      # full square, although half of it is masked
        + 8 * (2 * 25 * 25 * 64))
    cross_attention = (
        2 * 25 * 512 * 512            # Q from the decoder's 25 positions
        + 2 * (2 * 27 * 512 * 512)    # K, V from the encoder's 27 positions
        + 2 * 25 * 512 * 512          # output projection
        + 8 * (2 * 25 * 64 * 27)      # scores: (25, 64) x (64, 27)
        + 8 * (2 * 25 * 27 * 64))     # weighted sums: (25, 27) x (27, 64)
    decoder_ffn = 2 * 25 * 512 * 2048 + 2 * 25 * 2048 * 512
    embeddings = 0                    # lookups, not products
    pre_softmax = 2 * 25 * 512 * 37000
    forward = (6 * (encoder_self_attention + encoder_ffn)
               + 6 * (decoder_self_attention + cross_attention + decoder_ffn)
               + embeddings + pre_softmax)
    step = 3 * 4 * forward

    assert forward_flops(BASE, VOCAB, SRC_LEN, TGT_LEN) == forward
    assert train_step_flops(BASE, VOCAB, SRC_LEN, TGT_LEN, SENTENCES) == step
    # The sum above, written out once: about 39 GFLOPs for four short sentence pairs.
    assert step == 39_146_668_032


def test_unequal_key_and_value_widths_are_counted_separately():
    cfg = get_preset("b-dk16").model  # d_k = 16, d_v = 64
    narrower_keys = forward_flops(cfg, VOCAB, SRC_LEN, TGT_LEN)
    base = forward_flops(BASE, VOCAB, SRC_LEN, TGT_LEN)
    # Each attention loses Q and K projection widths and score widths of 8·(64 - 16).
    saved_per_width = (
        6 * (2 * 2 * 27 * 512 + 2 * 27 * 27)                  # encoder self-attention
        + 6 * (2 * 2 * 25 * 512 + 2 * 25 * 25)                # decoder self-attention
        + 6 * (2 * 25 * 512 + 2 * 27 * 512 + 2 * 25 * 27))    # cross: Q, K, scores
    assert base - narrower_keys == 8 * (64 - 16) * saved_per_width


def test_a_step_is_linear_in_the_number_of_sentences():
    one = train_step_flops(BASE, VOCAB, SRC_LEN, TGT_LEN, 1)
    for sentences in (2, 3, 64):
        assert train_step_flops(BASE, VOCAB, SRC_LEN, TGT_LEN, sentences) == sentences * one
    assert train_step_flops(BASE, VOCAB, SRC_LEN, TGT_LEN, 0) == 0


def test_longer_sentences_cost_more_and_attention_makes_it_superlinear():
    def cost(src_len, tgt_len):
        return train_step_flops(BASE, VOCAB, src_len, tgt_len, 1)

    for length in (1, 10, 100):
        assert cost(length + 1, length) > cost(length, length)
        assert cost(length, length + 1) > cost(length, length)
    # Doubling both lengths doubles every linear term and quadruples the square ones:
    # cost(2L) - 2·cost(L) is twice the square terms at L.
    length = 20
    squares_per_layer = (2 * 2 * 8 * 64 * length * length) * 3  # encoder, decoder, cross
    assert cost(2 * length, 2 * length) - 2 * cost(length, length) \
        == 3 * 6 * 2 * squares_per_layer


def test_the_pre_softmax_projection_depends_on_the_vocabulary_and_target_length_only():
    per_word = (train_step_flops(BASE, VOCAB + 1, SRC_LEN, TGT_LEN, 1)
                - train_step_flops(BASE, VOCAB, SRC_LEN, TGT_LEN, 1))
    assert per_word == 3 * 2 * TGT_LEN * 512
    assert (train_step_flops(BASE, VOCAB + 1, SRC_LEN + 5, TGT_LEN, 1)
            - train_step_flops(BASE, VOCAB, SRC_LEN + 5, TGT_LEN, 1)) == per_word


@pytest.mark.parametrize("changes", [
    {},
    {"encoder_layers": 3, "decoder_layers": 1, "d_k": 6, "d_v": 10, "heads": 3},
    {"tie_embeddings": "none", "pre_norm": True, "d_ff": 40},
], ids=["tiny", "unequal-depths-and-widths", "untied-pre-norm"])
def test_the_count_equals_torchs_count_of_a_real_forward_and_backward(changes):
    cfg = replace(get_preset("tiny").model, dropout=0.0, **changes)
    torch.manual_seed(0)
    model = Transformer(cfg, 50)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(1, 50, (3, 7), generator=generator)
    tgt = torch.randint(1, 50, (3, 5), generator=generator)
    # The counter does not see inside the fused CPU attention kernel; the math path
    # computes the same products as visible batched matrix products.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as forward_counter:
        logits = model(src, tgt)
    assert forward_counter.get_total_flops() == 3 * forward_flops(cfg, 50, 7, 5)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as step_counter:
        model(src, tgt).logsumexp(-1).sum().backward()
    assert step_counter.get_total_flops() == train_step_flops(cfg, 50, 7, 5, 3)
    assert logits.shape == (3, 5, 50)
