"""`nmt attention`: the maps are distributions and every picture has one panel per head."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from decode_fixtures import make_model_file
from transformer_nmt.attention_plot import KINDS, compute_attention, draw_layer, draw_overview
from transformer_nmt.cli import main
from transformer_nmt.model_file import load_for_inference

matplotlib.use("Agg")

SOURCE = "the small dog runs home"
TARGET = "a dog runs"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return make_model_file(tmp_path_factory.mktemp("attention"), max_positions=64)


def test_every_row_of_every_map_sums_to_one(model_file):
    loaded = load_for_inference(model_file)
    maps = compute_attention(loaded.model, loaded.vocab, SOURCE, TARGET)
    cfg = loaded.model.cfg
    src_len, tgt_len = len(maps.src_tokens), len(maps.tgt_out_tokens)
    assert maps.src_tokens[-1] == "</s>" and maps.tgt_in_tokens[0] == "<s>"
    expected = {"encoder": (src_len, src_len), "decoder": (tgt_len, tgt_len),
                "cross": (tgt_len, src_len)}
    for kind, shape in expected.items():
        assert len(maps.weights[kind]) == cfg.encoder_layers
        for layer in maps.weights[kind]:
            assert layer.shape == (cfg.heads, *shape)
            torch.testing.assert_close(layer.sum(-1), torch.ones(cfg.heads, shape[0]))


def test_figures_have_one_panel_per_head(model_file):
    loaded = load_for_inference(model_file)
    maps = compute_attention(loaded.model, loaded.vocab, SOURCE, TARGET)
    heads = loaded.model.cfg.heads
    for kind in KINDS:
        assert len(draw_layer(maps, kind, 0).axes) == heads
    assert len(draw_overview(maps, 0).axes) == heads * len(KINDS)


def test_cli_writes_a_picture_per_kind_and_layer_plus_an_overview(model_file, tmp_path, capsys):
    out = tmp_path / "pictures"
    assert main(["attention", "--model", str(model_file), "--src", SOURCE, "--out", str(out),
                 "--beam", "2"]) == 0
    layers = load_for_inference(model_file).model.cfg.encoder_layers
    names = sorted(path.name for path in out.glob("*.png"))
    assert len(names) == len(KINDS) * layers + 1
    assert f"overview-layer{layers}.png" in names
    assert "target:" in capsys.readouterr().out


def test_a_layer_the_model_lacks_is_a_one_line_error(model_file, tmp_path, capsys):
    assert main(["attention", "--model", str(model_file), "--src", SOURCE, "--tgt", TARGET,
                 "--out", str(tmp_path), "--layer", "9"]) == 2
    assert "--layer 9" in capsys.readouterr().err
