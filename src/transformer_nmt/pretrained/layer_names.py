"""The weights of an encoder-decoder Transformer's layers named as fairseq names them, which
Hugging Face's BART family (MarianMTModel among them) kept, as this project's layers take
them: q_proj, k_proj and v_proj concatenated into our fused projections, fc1 and fc2 as the
FFN, and each sub-layer's LayerNorm as the norm of its residual block (before or after the
sub-layer alike: ModelConfig.pre_norm says which)."""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor

from transformer_nmt.config import ModelConfig


FEED_FORWARD = (("ffn.linear1", ("fc1",)), ("ffn.linear2", ("fc2",)),
                ("ffn_block.norm", ("final_layer_norm",)))
SELF_ATTENTION = (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj",
                                          "self_attn.v_proj")),
                  ("self_attn.out_proj", ("self_attn.out_proj",)))
ENCODER_LAYER = (*SELF_ATTENTION, ("attn_block.norm", ("self_attn_layer_norm",)),
                 *FEED_FORWARD)
"""Each linear or LayerNorm of our encoder layer, and theirs whose rows it concatenates."""
DECODER_LAYER = (*SELF_ATTENTION, ("self_attn_block.norm", ("self_attn_layer_norm",)),
                 ("cross_attn.q_proj", ("encoder_attn.q_proj",)),
                 ("cross_attn.kv_proj", ("encoder_attn.k_proj", "encoder_attn.v_proj")),
                 ("cross_attn.out_proj", ("encoder_attn.out_proj",)),
                 ("cross_attn_block.norm", ("encoder_attn_layer_norm",)), *FEED_FORWARD)
"""The same of our decoder layer."""


def layer_weights(theirs: Mapping[str, Tensor], cfg: ModelConfig, encoder: str, decoder: str
                  ) -> dict[str, Tensor]:
    """Our encoder_layers.* and decoder_layers.* state-dict entries from `theirs`, whose
    layers are `{encoder}.layers.{i}` and `{decoder}.layers.{i}`."""
    ours: dict[str, Tensor] = {}
    for stack, prefix, count, names in (
            ("encoder_layers", encoder, cfg.encoder_layers, ENCODER_LAYER),
            ("decoder_layers", decoder, cfg.decoder_layers, DECODER_LAYER)):
        for i in range(count):
            for to, sources in names:
                for kind in ("weight", "bias"):
                    ours[f"{stack}.{i}.{to}.{kind}"] = torch.cat(
                        [theirs[f"{prefix}.layers.{i}.{name}.{kind}"] for name in sources])
    return ours
