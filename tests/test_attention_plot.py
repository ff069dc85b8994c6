"""`nmt attention`: the maps are distributions and every picture has one panel per head.

The models have encoders and decoders of different depths, so that a map, picture or
file counted by the wrong stack is caught (the tiny preset's 2 + 2 layers hide that).
"""

from __future__ import annotations

from dataclasses import replace

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from decode_fixtures import sentences
from transformer_nmt.attention_plot import KINDS, compute_attention, draw_layer, draw_overview
from transformer_nmt.cli import main
from transformer_nmt.config import get_preset
from transformer_nmt.data.vocab import train_vocab
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import load_for_inference, model_payload, save_model_file

matplotlib.use("Agg")

SOURCE = "the small dog runs home"
TARGET = "a dog runs"


@pytest.fixture(scope="module", params=[(2, 1), (1, 2)], ids=["enc2-dec1", "enc1-dec2"])
def model_file(request, tmp_path_factory):
    """A tiny random model with `encoder_layers`, `decoder_layers` from the parameter."""
    encoder_layers, decoder_layers = request.param
    directory = tmp_path_factory.mktemp("attention")
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(sentences(300)) + "\n", encoding="utf-8")
    vocab = train_vocab([corpus], directory / "spm", 60, threads=1)
    torch.manual_seed(0)
    cfg = replace(get_preset("tiny").model, dropout=0.0, max_positions=64,
                  encoder_layers=encoder_layers, decoder_layers=decoder_layers)
    path = directory / "model.pt"
    save_model_file(model_payload(Transformer(cfg, len(vocab)), vocab.to_bytes()), path)
    return path


def layers_of(cfg) -> dict[str, int]:
    """How many layers of each kind of attention the model has."""
    return {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers,
            "cross": cfg.decoder_layers}


def shapes_of(maps) -> dict[str, tuple[int, int]]:
    """(queries, keys) of each kind of map."""
    src_len, tgt_len = len(maps.src_tokens), len(maps.tgt_out_tokens)
    return {"encoder": (src_len, src_len), "decoder": (tgt_len, tgt_len),
            "cross": (tgt_len, src_len)}


def test_every_row_of_every_map_sums_to_one(model_file):
    loaded = load_for_inference(model_file)
    maps = compute_attention(loaded.model, loaded.vocab, SOURCE, TARGET)
    cfg = loaded.model.cfg
    assert maps.src_tokens[-1] == "</s>" and maps.tgt_in_tokens[0] == "<s>"
    assert len(maps.tgt_in_tokens) == len(maps.tgt_out_tokens)
    for kind, shape in shapes_of(maps).items():
        assert len(maps.weights[kind]) == layers_of(cfg)[kind]
        for layer in maps.weights[kind]:
            assert layer.shape == (cfg.heads, *shape)
            torch.testing.assert_close(layer.sum(-1), torch.ones(cfg.heads, shape[0]))


def test_figures_have_one_panel_per_head_showing_its_map(model_file):
    loaded = load_for_inference(model_file)
    maps = compute_attention(loaded.model, loaded.vocab, SOURCE, TARGET)
    cfg = loaded.model.cfg
    shapes = shapes_of(maps)
    for kind in KINDS:
        for layer in range(layers_of(cfg)[kind]):
            figure = draw_layer(maps, kind, layer)
            assert len(figure.axes) == cfg.heads
            for head, ax in enumerate(figure.axes):
                shown = torch.as_tensor(ax.images[0].get_array())
                assert shown.shape == shapes[kind]
                torch.testing.assert_close(shown, maps.weights[kind][layer][head])
            plt.close(figure)
    for layer in range(min(cfg.encoder_layers, cfg.decoder_layers)):
        overview = draw_overview(maps, layer)
        assert len(overview.axes) == cfg.heads * len(KINDS)
        for index, ax in enumerate(overview.axes):
            kind, head = list(KINDS)[index // cfg.heads], index % cfg.heads
            torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array()),
                                       maps.weights[kind][layer][head])
        plt.close(overview)


def test_cli_writes_a_picture_per_kind_and_layer_plus_an_overview(model_file, tmp_path, capsys):
    out = tmp_path / "pictures"
    # A given target keeps the pictures small: the random model's own translations run to
    # the length limit, and drawing 60 x 60 maps costs seconds each.
    assert main(["attention", "--model", str(model_file), "--src", SOURCE, "--tgt", TARGET,
                 "--out", str(out)]) == 0
    cfg = load_for_inference(model_file).model.cfg
    common = min(cfg.encoder_layers, cfg.decoder_layers)
    expected = {f"{kind}-layer{layer + 1}.png"
                for kind, count in layers_of(cfg).items() for layer in range(count)}
    expected.add(f"overview-layer{common}.png")  # the last layer both stacks have
    assert {path.name for path in out.glob("*.png")} == expected
    assert all(path.stat().st_size > 0 for path in out.glob("*.png"))
    assert f"target: {TARGET}" in capsys.readouterr().out


def test_an_overview_of_a_layer_one_stack_lacks_is_a_one_line_error(model_file, tmp_path,
                                                                    capsys):
    cfg = load_for_inference(model_file).model.cfg
    deeper = max(cfg.encoder_layers, cfg.decoder_layers)
    for layer in (deeper, 9):  # the source is translated first (--beam 2), then refused
        assert main(["attention", "--model", str(model_file), "--src", SOURCE, "--beam", "2",
                     "--out", str(tmp_path), "--layer", str(layer)]) == 2
        err = capsys.readouterr().err
        assert f"overview_layer {layer - 1} is out of range" in err
        assert f"(layers 1 to {min(cfg.encoder_layers, cfg.decoder_layers)})" in err
        assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.png"))
