"""Parameter counts of the Table 3 rows against an independent count and the paper's column."""

from __future__ import annotations

import pytest

from transformer_nmt.cli import main
from transformer_nmt.config import PRESETS, ModelConfig

PAPER_VOCAB = 37000


def independent_count(cfg: ModelConfig, vocab: int) -> int:
    """Count from the architecture alone: one shared embedding plus every layer's terms."""
    d, h = cfg.d_model, cfg.heads
    attention = d * h * cfg.d_k * 2 + h * cfg.d_k * 2 + d * h * cfg.d_v + h * cfg.d_v  # Q, K, V
    attention += h * cfg.d_v * d + d  # output projection
    ffn = d * cfg.d_ff + cfg.d_ff + cfg.d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    positions = cfg.max_positions * d if cfg.positional == "learned" else 0
    final_norms = 2 * norm if cfg.pre_norm else 0  # a pre-norm stack ends with a LayerNorm
    return (vocab * d + positions + final_norms
            + cfg.encoder_layers * encoder_layer + cfg.decoder_layers * decoder_layer)


def printed_count(name: str, capsys) -> int:
    assert main(["params", "--preset", name, "--vocab-size", str(PAPER_VOCAB)]) == 0
    return int(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [n for n, p in PRESETS.items() if p.paper_params_millions])
def test_table_3_parameter_counts(name, capsys):
    preset = PRESETS[name]
    ours = printed_count(name, capsys)
    assert ours == independent_count(preset.model, PAPER_VOCAB)
    paper = preset.paper_params_millions * 1e6
    print(f"{name}: ours {ours / 1e6:.1f}M, paper {preset.paper_params_millions:g}M")
    assert abs(ours - paper) / paper < 0.07


def test_every_preset_counts_like_the_architecture(capsys):
    for name, preset in PRESETS.items():
        assert printed_count(name, capsys) == independent_count(preset.model, PAPER_VOCAB), name
