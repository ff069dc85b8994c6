"""The layers' weights as fairseq (and Hugging Face's BART family) name them, moved into
ours (pretrained/layer_names.py): every weight and bias of our encoder and decoder layers
made, and nothing else; query, key and value rows fused in that order."""

from __future__ import annotations

from dataclasses import replace

import torch

from transformer_nmt.config import get_preset
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.pretrained.layer_names import DECODER_LAYER, ENCODER_LAYER, layer_weights

CFG = replace(get_preset("tiny").model, encoder_layers=2, decoder_layers=1)


def theirs_from(ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our layers' state dict as fairseq would name it: fused rows split into theirs."""
    theirs = {}
    for stack, prefix, count, names in (("encoder_layers", "encoder", CFG.encoder_layers,
                                         ENCODER_LAYER),
                                        ("decoder_layers", "decoder", CFG.decoder_layers,
                                         DECODER_LAYER)):
        for i in range(count):
            for to, sources in names:
                for kind in ("weight", "bias"):
                    parts = ours[f"{stack}.{i}.{to}.{kind}"].chunk(len(sources))
                    theirs.update({f"{prefix}.layers.{i}.{name}.{kind}": part
                                   for name, part in zip(sources, parts)})
    return theirs


def test_every_weight_of_our_layers_is_made_and_nothing_else():
    ours = Transformer(CFG, 16).state_dict()
    made = layer_weights(theirs_from(ours), CFG, "encoder", "decoder")
    layers = {name for name in ours if name.startswith(("encoder_layers.", "decoder_layers."))}
    assert set(made) == layers
    for name in layers:
        assert torch.equal(made[name], ours[name]), name


def test_query_key_and_value_rows_are_fused_in_that_order():
    d = CFG.d_model
    theirs = theirs_from(Transformer(CFG, 16).state_dict())
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        theirs[f"encoder.layers.0.self_attn.{name}.bias"] = torch.full((d,), float(i))
    fused = layer_weights(theirs, CFG, "encoder", "decoder")[
        "encoder_layers.0.self_attn.qkv_proj.bias"]
    assert fused.tolist() == [0.0] * d + [1.0] * d + [2.0] * d
