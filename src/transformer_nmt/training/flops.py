"""Analytic floating-point operation counts of the Transformer, for MFU and Table 2 style costs.

A matrix product of (m, k) by (k, n) counts 2·m·k·n operations. Attention is counted over
the full square (the causal half is not subtracted), the usual convention. One training
step costs three forward passes (forward, and backward's two products per weight).
"""

from __future__ import annotations

from transformer_nmt.config import ModelConfig


def _attention_flops(cfg: ModelConfig, queries: int, keys: int, self_attention: bool) -> int:
    h, d = cfg.heads, cfg.d_model
    projections = 2 * queries * d * h * cfg.d_k  # Q
    projections += 2 * (queries if self_attention else keys) * d * h * (cfg.d_k + cfg.d_v)  # K, V
    projections += 2 * queries * h * cfg.d_v * d  # output
    scores_and_mix = 2 * queries * keys * h * (cfg.d_k + cfg.d_v)
    return projections + scores_and_mix


def forward_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> int:
    """Operations of one teacher-forced forward pass on one sentence pair of these lengths."""
    ffn = 2 * 2 * cfg.d_model * cfg.d_ff
    encoder = cfg.encoder_layers * (_attention_flops(cfg, src_len, src_len, True) + src_len * ffn)
    decoder = cfg.decoder_layers * (
        _attention_flops(cfg, tgt_len, tgt_len, True)
        + _attention_flops(cfg, tgt_len, src_len, False)
        + tgt_len * ffn)
    output = 2 * tgt_len * cfg.d_model * vocab_size
    return encoder + decoder + output


def train_step_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int,
                     sentences: int) -> int:
    """Operations of forward and backward over `sentences` pairs of (padded) lengths."""
    return 3 * sentences * forward_flops(cfg, vocab_size, src_len, tgt_len)
