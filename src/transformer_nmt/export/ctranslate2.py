"""Export to CTranslate2, through its own Python specification API.

CTranslate2 describes a model as a `TransformerSpec` whose leaves are weight arrays; a
converter (a `ctranslate2.converters.Converter`) builds the spec and CTranslate2 itself
validates, quantizes and saves it. This module is that converter for our Transformer.

Mapping: our fused Q/K/V self-attention projection is CTranslate2's self-attention
linear[0] (rows Q, K, V in that order, as ours), the encoder-decoder attention's query and
fused key/value projections its linear[0] and linear[1], each residual block's LayerNorm
the layer_norm of its attention or FFN, and pre-norm stacks' final norms the encoder's and
decoder's layer_norm, the logits bias the decoder projection's bias. The position table
goes across as it is, whichever layout its sines and cosines have (CTranslate2's built-in
ones are in halves, ours interleaved unless "sinusoidal-halves"; fairseq's start at row 2),
and learned tables are tables too, one per stack; unscaled embeddings are CTranslate2's
scale_embeddings off. Source and target vocabularies are the one shared sentencepiece
vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import numpy as np
from torch import Tensor, nn

from transformer_nmt.config import ModelConfig, Quantization
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.errors import UserError
from transformer_nmt.export.output import export_directory
from transformer_nmt.export.provenance import provenance
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import InferenceModel, load_for_inference

QUANTIZATIONS = get_args(Quantization)
"""CTranslate2's weight types (its ACCEPTED_MODEL_TYPES): the weights are stored so."""
PROVENANCE_FILE = "transformer_nmt.json"
"""The export's record of its source model, beside CTranslate2's own files."""


def require_ctranslate2() -> None:
    """UserError saying how to install CTranslate2 when it is missing."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UserError("exporting to CTranslate2 needs the ctranslate2 package: "
                        "pip install 'transformer-nmt[ctranslate2]'") from None


def unsupported_reason(model: Transformer) -> str | None:
    """Why CTranslate2 cannot run `model` exactly, or None when it can."""
    return config_unsupported_reason(model.cfg)


def config_unsupported_reason(cfg: ModelConfig) -> str | None:
    """Why CTranslate2 cannot run a model of configuration `cfg` exactly, or None when it
    can: known before the model is trained."""
    if cfg.d_k != cfg.d_v:
        return (f"its attention heads have d_k = {cfg.d_k} but d_v = {cfg.d_v}, and "
                "CTranslate2's heads have one width for queries, keys and values")
    return None


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


def model_spec(model: Transformer, vocab: Vocab) -> Any:
    """A CTranslate2 TransformerSpec holding `model`'s weights and `vocab`'s pieces;
    UserError for a model CTranslate2 cannot run (see `unsupported_reason`)."""
    from ctranslate2.specs import (Activation, TransformerDecoderSpec, TransformerEncoderSpec,
                                   TransformerSpec)

    reason = unsupported_reason(model)
    if reason is not None:
        raise UserError(f"cannot export to CTranslate2: {reason}")
    cfg = model.cfg
    # CTranslate2's GELU is the exact one, with erf, as ours; GELUTanh is the approximation.
    activation = {"relu": Activation.RELU, "swish": Activation.SWISH,
                  "gelu": Activation.GELU}[cfg.activation]
    shape = dict(num_heads=cfg.heads, pre_norm=cfg.pre_norm, head_dim=cfg.d_k,
                 activation=activation)
    spec = TransformerSpec(TransformerEncoderSpec(cfg.encoder_layers, **shape),
                           TransformerDecoderSpec(cfg.decoder_layers, **shape))
    spec.encoder.embeddings[0].weight = _array(model.src_embed.weight)  # (vocab, d_model)
    spec.encoder.position_encodings.encodings = _position_table(model, model.source_positions)
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = cfg.scale_embeddings
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.attn_block.norm)
    spec.decoder.embeddings.weight = _array(model.tgt_embed.weight)
    spec.decoder.position_encodings.encodings = _position_table(model, model.positions)
    spec.decoder.projection.weight = _array(model.projection_weight)
    if model.projection_bias is not None:
        spec.decoder.projection.bias = _array(model.projection_bias)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.self_attn_block.norm)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
        _norm(layer_spec.attention.layer_norm, layer.cross_attn_block.norm)
    if cfg.pre_norm:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    pieces = [vocab.piece(i) for i in range(len(vocab))]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    config = spec.config
    config.bos_token, config.eos_token = vocab.piece(vocab.bos_id), vocab.piece(vocab.eos_id)
    config.unk_token = vocab.piece(vocab.unk_id)
    config.decoder_start_token = config.bos_token
    # Our sources end with EOS; CTranslate2 appends it itself, so that callers (Argos
    # Translate among them) hand it the sentencepiece pieces alone.
    config.add_source_eos = True
    config.layer_norm_epsilon = model.encoder_layers[0].attn_block.norm.eps
    return spec


def _converter(model: Transformer, vocab: Vocab) -> Any:
    """A CTranslate2 converter (its Converter class, whose convert() validates, quantizes
    and saves) that builds the spec from our model."""
    from ctranslate2.converters.converter import Converter

    class TransformerNmtConverter(Converter):
        def _load(self) -> Any:
            return model_spec(model, vocab)

    return TransformerNmtConverter()


def write_ctranslate2(model: InferenceModel, directory: Path,
                      quantization: str = "float32") -> None:
    """Write `model` as a CTranslate2 model into `directory` (replacing whatever it holds:
    callers pass a directory of their own making), its weights stored as `quantization`,
    with the source model's record beside CTranslate2's files."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, "
                        f"not {quantization!r}")
    _converter(model.model, model.vocab).convert(str(directory), quantization=quantization,
                                                 force=True)
    record = provenance(model.payload_meta, model.path)
    record["quantization"] = quantization
    (directory / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n",
                                              encoding="utf-8")


def export_ctranslate2(model_path: str | Path, out: str | Path, quantization: str = "float32",
                       force: bool = False) -> Path:
    """`nmt export --to ctranslate2`: the model file at `model_path` as a CTranslate2
    model directory `out`, which `ctranslate2.Translator(out)` loads. Returns `out`."""
    require_ctranslate2()
    model = load_for_inference(model_path)
    reason = unsupported_reason(model.model)
    if reason is not None:
        raise UserError(f"{model_path}: cannot export to CTranslate2: {reason}")
    # At most as large as the model file (float32 weights; quantized ones are smaller).
    with export_directory(out, force, Path(model_path).stat().st_size) as building:
        write_ctranslate2(model, building, quantization)
    return Path(out)
