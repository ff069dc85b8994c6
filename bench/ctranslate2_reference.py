"""CTranslate2 as a same-machine reference for bench/translate_speed.py.

CTranslate2 (pip install ctranslate2) is the fastest CPU translator of the field, in C++.
This module hands it the very weights of one of our Transformers, through its Python model
specification, so that both systems decode the same model on the same CPU in the same
run. Not a project dependency: the benchmark skips this reference when it is missing.

Mapping (post-norm base-shape models with tied embeddings, as the paper's):
our fused Q/K/V projection is CTranslate2's self-attention linear[0], the encoder-decoder
attention's query and fused key/value projections its linear[0] and linear[1], and each
residual block's LayerNorm the layer_norm of its attention or FFN. The sinusoidal table
goes across as is, since CTranslate2's built-in one lays sines and cosines out in halves
instead of interleaving them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import ctranslate2

# torch and the project only where weights are exported: a process that only translates
# with CTranslate2 should not carry torch's ~220 MB in its peak memory.
if TYPE_CHECKING:
    import numpy as np
    from ctranslate2.specs import TransformerSpec
    from torch import Tensor, nn

    from transformer_nmt.data.vocab import Vocab
    from transformer_nmt.model.transformer import Transformer


def _array(tensor: Tensor) -> np.ndarray:
    # A numpy array owning its memory, as the specification stores it.
    return tensor.detach().float().cpu().numpy().copy()


def _linear(spec, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    spec.bias = _array(linear.bias)


def _norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention_and_ffn(layer_spec, layer, attention_norm: nn.LayerNorm) -> None:
    """The self-attention and FFN of one encoder or decoder layer."""
    _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)
    _linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
    _norm(layer_spec.self_attention.layer_norm, attention_norm)
    _linear(layer_spec.ffn.linear_0, layer.ffn.linear1)
    _linear(layer_spec.ffn.linear_1, layer.ffn.linear2)
    _norm(layer_spec.ffn.layer_norm, layer.ffn_block.norm)


def model_spec(model: Transformer, vocab: Vocab) -> TransformerSpec:
    """A CTranslate2 specification holding `model`'s weights and `vocab`'s pieces."""
    from ctranslate2.specs import TransformerSpec

    cfg = model.cfg
    if cfg.pre_norm or cfg.positional != "sinusoidal" or model.output_proj is not None:
        raise ValueError("only post-norm, sinusoidal, fully tied models are mapped")
    spec = TransformerSpec.from_config((cfg.encoder_layers, cfg.decoder_layers), cfg.heads,
                                       pre_norm=False)
    table = _array(model.sinusoids)  # (max_positions, d_model)
    embedding = _array(model.tgt_embed.weight)  # (vocab, d_model), shared by all three
    spec.encoder.embeddings[0].weight = embedding
    spec.encoder.position_encodings.encodings = table
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.attn_block.norm)
    spec.decoder.embeddings.weight = embedding
    spec.decoder.position_encodings.encodings = table
    spec.decoder.projection.weight = embedding
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention_and_ffn(layer_spec, layer, layer.self_attn_block.norm)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
        _norm(layer_spec.attention.layer_norm, layer.cross_attn_block.norm)
    pieces = [vocab.piece(i) for i in range(len(vocab))]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.bos_token, spec.config.eos_token = vocab.piece(vocab.bos_id), vocab.piece(vocab.eos_id)
    spec.config.unk_token = vocab.piece(vocab.unk_id)
    spec.config.decoder_start_token = spec.config.bos_token
    return spec


def export(model: Transformer, vocab: Vocab, directory: Path) -> Path:
    """Write `model` as a float32 CTranslate2 model directory; returns it."""
    spec = model_spec(model, vocab)
    spec.validate()
    spec.optimize(quantization=None)
    directory.mkdir(parents=True, exist_ok=True)
    spec.save(str(directory))
    return directory


def load(directory: Path, precision: str, threads: int, workers: int = 1
         ) -> ctranslate2.Translator:
    """The exported model, quantized on load for int8 (CTranslate2's 'int8' compute type);
    `workers` batches decoded in parallel, each on threads // workers threads."""
    return ctranslate2.Translator(str(directory), device="cpu",
                                  compute_type={"fp32": "float32", "int8": "int8"}[precision],
                                  inter_threads=workers,
                                  intra_threads=max(threads // workers, 1))


def translate(translator: ctranslate2.Translator, sources: list[list[str]], beam: int,
              length: int, asynchronous: bool = False) -> list:
    """Exactly `length` output pieces per sentence (EOS forbidden before, decoding stopped
    at it), with beam search of width `beam`, no length penalty; best hypothesis each.
    asynchronous: return CTranslate2's pending results instead (`.result()` waits), so
    that several batches can be queued for its parallel workers."""
    results = translator.translate_batch(
        sources, beam_size=beam, max_batch_size=0, min_decoding_length=length,
        max_decoding_length=length, length_penalty=0.0, num_hypotheses=1,
        return_end_token=False, asynchronous=asynchronous)
    if asynchronous:
        return results
    return [result.hypotheses[0] for result in results]
