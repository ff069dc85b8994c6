"""Attention maps of one sentence pair, per layer and head, drawn as heatmaps.

In the spirit of the paper's appendix figures: for a source sentence and its translation
(or a given target), the encoder self-attention, the decoder self-attention and the
encoder-decoder attention of every layer and head, with the subword tokens on the axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError

KINDS = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "encoder-decoder attention",
}


@dataclass
class AttentionMaps:
    """Attention weights of one sentence pair, every row a distribution over keys."""

    src_tokens: list[str]
    """Source subwords then '</s>': the encoder's positions."""
    tgt_in_tokens: list[str]
    """'<s>' then target subwords: the decoder's input positions (self-attention keys)."""
    tgt_out_tokens: list[str]
    """Target subwords then '</s>': what each decoder position predicts (query rows)."""
    weights: dict[str, list[torch.Tensor]]
    """'encoder' / 'decoder' / 'cross' -> per layer (heads, queries, keys), float32."""


def compute_attention(model, vocab, source: str, target: str) -> AttentionMaps:
    """Run the model teacher-forced on (source, target) and collect every attention map."""
    src_ids = vocab.encode(source)[: model.cfg.max_positions - 1]
    tgt_ids = vocab.target.encode(target)[: model.cfg.max_positions - 1]
    if not src_ids:
        raise UserError(f"the source sentence {source!r} is empty: give some text to translate")
    return compute_attention_of_ids(model, vocab, src_ids, tgt_ids)


@torch.inference_mode()
def compute_attention_of_ids(model, vocab, src_ids: list[int],
                             tgt_ids: list[int]) -> AttentionMaps:
    """Every attention map of the model teacher-forced on source and target token ids
    (without BOS and EOS; at most max_positions - 1 of each), as a translation's own
    tokens give them."""
    src_ids = src_ids + [vocab.eos_id]
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)
    tgt_in = torch.tensor([[vocab.bos_id] + tgt_ids], device=device)
    enc = model.encode(src, need_weights=True)
    dec = model.decode(tgt_in, enc, need_weights=True)
    first = lambda layers: [w[0].float().cpu() for w in layers]  # noqa: E731 (drop batch)
    pieces = vocab.marked_pieces
    return AttentionMaps(
        src_tokens=pieces(src_ids[:-1]) + ["</s>"],
        tgt_in_tokens=["<s>"] + pieces(tgt_ids),
        tgt_out_tokens=pieces(tgt_ids) + ["</s>"],
        weights={"encoder": first(enc.attention), "decoder": first(dec.self_attention),
                 "cross": first(dec.cross_attention)},
    )


def _axes_labels(maps: AttentionMaps, kind: str) -> tuple[list[str], list[str]]:
    """(row labels, column labels) of one kind of map."""
    if kind == "encoder":
        return maps.src_tokens, maps.src_tokens
    if kind == "decoder":
        return maps.tgt_out_tokens, maps.tgt_in_tokens
    return maps.tgt_out_tokens, maps.src_tokens


def _grid(panels: int) -> tuple[int, int]:
    columns = min(panels, 4)
    return math.ceil(panels / columns), columns


def draw_layer(maps: AttentionMaps, kind: str, layer: int):
    """One figure: every head of one layer's `kind` attention, tokens on both axes."""
    import matplotlib.pyplot as plt

    weights = maps.weights[kind][layer]  # (heads, queries, keys)
    rows_labels, column_labels = _axes_labels(maps, kind)
    heads = weights.size(0)
    rows, columns = _grid(heads)
    cell = 0.22  # inches per token, enough for a readable 7-point label
    panel_w = max(2.6, cell * len(column_labels) + 1.0)
    panel_h = max(2.4, cell * len(rows_labels) + 1.0)
    figure, axes = plt.subplots(rows, columns, figsize=(panel_w * columns, panel_h * rows + 0.6),
                                squeeze=False, constrained_layout=True)
    for head in range(rows * columns):
        ax = axes[head // columns][head % columns]
        if head >= heads:
            figure.delaxes(ax)
            continue
        ax.imshow(weights[head].numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {head + 1}", fontsize=9)
        ax.set_xticks(range(len(column_labels)), column_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(rows_labels)), rows_labels, fontsize=7)
        ax.tick_params(length=0)
    figure.suptitle(f"{KINDS[kind]}, layer {layer + 1}: rows attend to columns", fontsize=11)
    return figure


def draw_overview(maps: AttentionMaps, layer: int):
    """A compact figure of every head of one layer: one row per kind, no tick labels."""
    import matplotlib.pyplot as plt

    heads = maps.weights["encoder"][layer].size(0)
    figure, axes = plt.subplots(len(KINDS), heads, figsize=(1.6 * heads + 1.2, 5.4),
                                squeeze=False, constrained_layout=True)
    for row, kind in enumerate(KINDS):
        for head in range(heads):
            ax = axes[row][head]
            ax.imshow(maps.weights[kind][layer][head].numpy(), cmap="Blues", vmin=0.0, vmax=1.0,
                      aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(f"head {head + 1}", fontsize=9)
            if head == 0:
                ax.set_ylabel(KINDS[kind].replace(" ", "\n", 1), fontsize=8)
    figure.suptitle(f"all heads of layer {layer + 1}", fontsize=11)
    return figure


def overview_layers(maps: AttentionMaps) -> int:
    """How many layers an overview can show: it has a row per kind, so the layers that
    both the encoder and the decoder have (their depths may differ)."""
    return min(len(layers) for layers in maps.weights.values())


def write_attention_pictures(maps: AttentionMaps, out_dir: str | Path,
                             overview_layer: int = -1) -> list[Path]:
    """Write one PNG per kind and layer plus the overview of one layer; return the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in KINDS:
        for layer in range(len(maps.weights[kind])):
            figure = draw_layer(maps, kind, layer)
            path = out_dir / f"{kind}-layer{layer + 1}.png"
            figure.savefig(path, dpi=110)
            plt.close(figure)
            written.append(path)
    index = overview_layer % overview_layers(maps)
    figure = draw_overview(maps, index)
    path = out_dir / f"overview-layer{index + 1}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)
    return written


def draw_attention(model_path: str | Path, source: str, out_dir: str | Path,
                   target: str | None = None, beam: int = 4,
                   overview_layer: int = -1) -> tuple[str, list[Path]]:
    """`nmt attention`: translate `source` unless `target` is given, draw every map.

    Returns the target sentence used and the pictures written.
    """
    translator = Translator.from_file(model_path, TranslatorOptions(DecodeConfig(beam=beam)))
    if target is None:
        target = next(translator.translate([source]))
    maps = compute_attention(translator.model, translator.vocab, source, target)
    layers = overview_layers(maps)
    if not -layers <= overview_layer < layers:
        raise UserError(f"overview_layer {overview_layer} is out of range: the overview shows "
                        f"a layer of both the encoder ({len(maps.weights['encoder'])} layers) "
                        f"and the decoder ({len(maps.weights['decoder'])}); choose 0 to "
                        f"{layers - 1} (layers 1 to {layers}), or -1 for the last")
    return target, write_attention_pictures(maps, out_dir, overview_layer)
