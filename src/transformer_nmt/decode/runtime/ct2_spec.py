"""Our Transformer as a CTranslate2 model, through CTranslate2's own specification API.

CTranslate2 describes a model as a `TransformerSpec` whose leaves are weight arrays; a
converter (a `ctranslate2.converters.Converter`) builds the spec and CTranslate2 itself
validates, quantizes and saves it. This module is that converter for our Transformer,
used by `nmt export --to ctranslate2` and by the CTranslate2 runtime alike.

Mapping: our fused Q/K/V self-attention projection is CTranslate2's self-attention
linear[0] (rows Q, K, V in that order, as ours), the encoder-decoder attention's query and
fused key/value projections its linear[0] and linear[1], each residual block's LayerNorm
the layer_norm of its attention or FFN, and pre-norm stacks' final norms the encoder's and
decoder's layer_norm, the logits bias the decoder projection's bias. The position table
goes across as it is, whichever layout its sines and cosines have (CTranslate2's built-in
ones are in halves, ours interleaved unless "sinusoidal-halves"; fairseq's start at row 2),
and learned tables are tables too, one per stack; unscaled embeddings are CTranslate2's
scale_embeddings off. Source and target vocabularies are one list of pieces, the caller's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor, nn

from transformer_nmt.config import ModelConfig
from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.decode.runtime.ct2_int8 import SEVEN_BIT, quantize_seven_bit
from transformer_nmt.errors import UserError
from transformer_nmt.files import temporary_directory
from transformer_nmt.model.transformer import Transformer


def config_unsupported_reason(cfg: ModelConfig) -> str | None:
    """Why CTranslate2 cannot run a model of configuration `cfg` exactly, or None when it
    can: known before the model is trained."""
    if cfg.d_k != cfg.d_v:
        return (f"its attention heads have d_k = {cfg.d_k} but d_v = {cfg.d_v}, and "
                "CTranslate2's heads have one width for queries, keys and values")
    return None


def unsupported_reason(model: nn.Module) -> str | None:
    """Why CTranslate2 cannot run `model` exactly, or None when it can."""
    if not isinstance(model, Transformer):
        return "it is not one Transformer (an ensemble decodes in PyTorch)"
    return config_unsupported_reason(model.cfg)


def _array(tensor: Tensor) -> np.ndarray:
    # A float32 numpy array owning its memory, as the spec stores it (bf16 weights too).
    return tensor.detach().float().cpu().numpy().copy()


def _linear(spec: Any, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    spec.bias = _array(linear.bias)


def _norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention_and_ffn(layer_spec: Any, layer: nn.Module, attention_norm: nn.LayerNorm) -> None:
    """The self-attention and FFN of one encoder or decoder layer."""
    _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)
    _linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
    _norm(layer_spec.self_attention.layer_norm, attention_norm)
    _linear(layer_spec.ffn.linear_0, layer.ffn.linear1)
    _linear(layer_spec.ffn.linear_1, layer.ffn.linear2)
    _norm(layer_spec.ffn.layer_norm, layer.ffn_block.norm)


def _position_table(model: Transformer, learned: nn.Embedding | None) -> np.ndarray:
    """(max_positions, d_model) the encodings added to one stack's embeddings: its
    `learned` table, or the sinusoids."""
    return _array(model.sinusoids if learned is None else learned.weight)


def model_spec(model: Transformer, pieces: list[str], bos: int, eos: int, unk: int) -> Any:
    """A CTranslate2 TransformerSpec holding `model`'s weights, with `pieces` as both
    vocabularies (piece i is token id i) and bos, eos, unk the ids of those tokens.

    Its attention output (`return_attention`) is the encoder-decoder attention of the
    decoder layer our alignments and confidence read
    (transformer_nmt.decode.attention.probe), averaged over all its heads. UserError for a
    model CTranslate2 cannot run (see `unsupported_reason`)."""
    from ctranslate2.specs import (Activation, TransformerDecoderSpec, TransformerEncoderSpec,
                                   TransformerSpec)

    reason = unsupported_reason(model)
    if reason is not None:
        raise UserError(f"cannot run on CTranslate2: {reason}")
    cfg = model.cfg
    # CTranslate2's GELU is the exact one, with erf, as ours; GELUTanh is the approximation.
    activation = {"relu": Activation.RELU, "swish": Activation.SWISH,
                  "gelu": Activation.GELU}[cfg.activation]
    shape = dict(num_heads=cfg.heads, pre_norm=cfg.pre_norm, head_dim=cfg.d_k,
                 activation=activation)
    spec = TransformerSpec(TransformerEncoderSpec(cfg.encoder_layers, **shape),
                           TransformerDecoderSpec(cfg.decoder_layers, **shape,
                                                  alignment_layer=probe_layer(cfg.decoder_layers),
                                                  alignment_heads=cfg.heads))
    spec.encoder.embeddings[0].weight = _array(model.src_embed.weight)  # (vocab, d_model)
    spec.encoder.position_encodings.encodings = _position_table(model, model.source_positions)
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = cfg.scale_embeddings
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.attn_block.norm)
    spec.decoder.embeddings.weight = _array(model.tgt_embed.weight)
    spec.decoder.position_encodings.encodings = _position_table(model, model.positions)
    spec.decoder.projection.weight = _array(model.projection_weight)
    if model.logits_bias is not None:
        spec.decoder.projection.bias = _array(model.logits_bias)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.self_attn_block.norm)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
        _norm(layer_spec.attention.layer_norm, layer.cross_attn_block.norm)
    if cfg.pre_norm:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    config = spec.config
    config.bos_token, config.eos_token, config.unk_token = pieces[bos], pieces[eos], pieces[unk]
    config.decoder_start_token = config.bos_token
    # Our sources end with EOS; CTranslate2 appends it itself, so that callers (Argos
    # Translate among them) hand it the sentencepiece pieces alone.
    config.add_source_eos = True
    config.layer_norm_epsilon = model.encoder_layers[0].attn_block.norm.eps
    return spec


def convert(model: Transformer, pieces: list[str], bos: int, eos: int, unk: int,
            directory: str, quantization: str, vmap: str | None = None) -> None:
    """Write `model` (see `model_spec`) as a CTranslate2 model into `directory`, replacing
    what it holds, its weights stored as `quantization` (one of CTranslate2's types, or
    ct2_int8.SEVEN_BIT), through CTranslate2's Converter (which validates, quantizes and
    saves the spec); with `vmap`, the text of a vocabulary map
    (transformer_nmt.decode.runtime.vmap) in `pieces`' spelling, as its vmap.txt."""
    from ctranslate2.converters.converter import Converter

    seven_bit = quantization == SEVEN_BIT
    # 7-bit weights are quantized here, and CTranslate2 stores the spec as it is.
    stored = None if seven_bit else quantization

    class TransformerNmtConverter(Converter):
        def _load(self) -> Any:
            spec = model_spec(model, pieces, bos, eos, unk)
            return quantize_seven_bit(spec) if seven_bit else spec

    if vmap is None:
        TransformerNmtConverter().convert(directory, quantization=stored, force=True)
        return
    # The Converter copies the map from a file, after emptying `directory`: it waits
    # beside it.
    with temporary_directory(Path(directory).with_name(Path(directory).name + "-vmap")
                             ) as aside:
        (aside / "vmap.txt").write_text(vmap, encoding="utf-8")
        TransformerNmtConverter().convert(directory, vmap=str(aside / "vmap.txt"),
                                          quantization=stored, force=True)
