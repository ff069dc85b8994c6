"""The Transformer (section 3): embeddings and softmax (section 3.4), positional encodings
(section 3.5), the stacks, the output. The layers are in model/layers.py, attention in
model/attention.py, the key/value caches of incremental decoding in model/cache.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.config import ModelConfig
from transformer_nmt.model.cache import DecoderCache, DecodingCache, KVCache
from transformer_nmt.model.dropout import bool_mask_dropout
from transformer_nmt.model.layer_norm import OutputSavingLayerNorm
from transformer_nmt.model.layers import DecoderLayer, EncoderLayer


def sinusoidal_encodings(length: int, d_model: int) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same).

    Returns (length, d_model), sines at even and cosines at odd dimensions, as in the paper.
    """
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (length, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (length, ceil(d_model / 2))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def sinusoidal_halves_encodings(length: int, d_model: int) -> Tensor:
    """The sines and cosines of `sinusoidal_encodings` laid out in halves, as Marian and
    Hugging Face's MarianSinusoidalPositionalEmbedding hold them: (length, d_model), the
    ceil(d_model / 2) sines first, then the cosines, each half in order of frequency."""
    table = sinusoidal_encodings(length, d_model)  # (length, d_model)
    return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)


FAIRSEQ_FIRST_ROW = 2
"""fairseq's row of position 0: its positions count from padding_idx + 1, padding_idx 1."""


def sinusoidal_fairseq_encodings(length: int, d_model: int) -> Tensor:
    """fairseq's SinusoidalPositionalEmbedding rows of positions 0..length-1, (length,
    d_model): the half = d_model // 2 sines, then the cosines, of angle row * w_i with
    w_i = 10000^(-i / (half - 1)), where position p sits at row p + 2; a zero last column
    when d_model is odd. float32 arithmetic, as fairseq computes its table, so that an
    imported model adds what it was trained with."""
    half = d_model // 2
    step = math.log(10000.0) / max(half - 1, 1)  # fairseq has no table below d_model 4
    frequencies = torch.exp(torch.arange(half, dtype=torch.float32) * -step)  # (half,)
    rows = torch.arange(FAIRSEQ_FIRST_ROW, FAIRSEQ_FIRST_ROW + length, dtype=torch.float32)
    angle = rows.unsqueeze(1) * frequencies.unsqueeze(0)  # (length, half)
    table = torch.zeros(length, d_model)
    table[:, :half], table[:, half: 2 * half] = torch.sin(angle), torch.cos(angle)
    return table


SINUSOIDS = {"sinusoidal": sinusoidal_encodings, "sinusoidal-halves": sinusoidal_halves_encodings,
             "sinusoidal-fairseq": sinusoidal_fairseq_encodings}
"""The fixed table of each ModelConfig.positional that is not learned."""


@dataclass
class EncoderOut:
    """What the decoder needs from the encoder, computed once per source sentence."""

    states: Tensor
    """(batch, src_len, d_model) the encoder stack's output."""
    src_mask: Tensor
    """(batch, src_len) True at real tokens, False at padding."""
    attention: list[Tensor] = field(default_factory=list)
    """Per layer (batch, heads, src_len, src_len) self-attention weights, when asked for."""

    def select(self, index: Tensor) -> "EncoderOut":
        """Rows `index` (new_batch,) of the batch, in that order, repeats allowed."""
        return EncoderOut(self.states.index_select(0, index), self.src_mask.index_select(0, index))


@dataclass
class DecoderOut:
    """Logits for the next tokens and, when asked for, the attention weights."""

    logits: Tensor
    """(batch, tgt_len, vocab)."""
    self_attention: list[Tensor] = field(default_factory=list)
    """Per layer (batch, heads, tgt_len, tgt_len)."""
    cross_attention: list[Tensor] = field(default_factory=list)
    """Per layer (batch, heads, tgt_len, src_len)."""


class Transformer(nn.Module):
    """Encoder-decoder Transformer with shared or separate embeddings and output projection
    (section 3.4: the embeddings multiplied by sqrt(d_model), the pre-softmax linear
    transformation sharing their matrix where tied)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.vocab_size, self.pad_id = cfg, vocab_size, pad_id
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0

        self.tgt_embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.src_embed = (self.tgt_embed if cfg.tie_embeddings == "all"
                          else nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id))
        self.output_proj = (None if cfg.tie_embeddings in ("all", "decoder")
                            else nn.Linear(cfg.d_model, vocab_size, bias=False))
        self.projector: nn.Module | None = None
        """Another implementation of the pre-softmax transformation (x W^T + logits_bias),
        installed from outside, which `project` calls; the weights stay where they are,
        for everything else that reads them."""
        # The decoder's learned table, and the encoder's too unless tie_positions is False.
        self.src_positions = None
        if cfg.positional == "learned":
            self.positions = nn.Embedding(cfg.max_positions, cfg.d_model)
            if not cfg.tie_positions:
                self.src_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        else:
            self.positions = None
            self.register_buffer("sinusoids", SINUSOIDS[cfg.positional](cfg.max_positions,
                                                                        cfg.d_model),
                                 persistent=False)
        # (vocab,) the bias added to the logits (cfg.logits_bias). A buffer, as Hugging Face's
        # final_logits_bias: in the state dict, so model files carry it, converted with the
        # model's dtype, but not trained. None registers no key.
        self.register_buffer("logits_bias", torch.zeros(vocab_size) if cfg.logits_bias else None)

        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm stacks end un-normalized, so they get one final LayerNorm each.
        self.encoder_norm = OutputSavingLayerNorm(cfg.d_model) if cfg.pre_norm else None
        self.decoder_norm = OutputSavingLayerNorm(cfg.d_model) if cfg.pre_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections, zero biases, N(0, d_model^-0.5) embeddings.

        The embedding scale keeps embeddings * sqrt(d_model) at unit variance, the same
        scale as the positional encodings they are added to.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for embedding in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(embedding.weight, mean=0.0, std=self.cfg.d_model ** -0.5)
            with torch.no_grad():
                embedding.weight[self.pad_id].zero_()
        for table in (self.positions, self.src_positions):
            if table is not None:
                nn.init.normal_(table.weight, mean=0.0, std=self.cfg.d_model ** -0.5)

    @property
    def source_positions(self) -> nn.Embedding | None:
        """The learned table the encoder adds (the decoder's, unless tie_positions is
        False), or None for sinusoids."""
        return self.positions if self.src_positions is None else self.src_positions

    def _positional(self, start: int, length: int, learned: nn.Embedding | None) -> Tensor:
        """Positional encodings (section 3.5) of positions start..start+length-1,
        (length, d_model): rows of the `learned` table, or the sinusoids where it is None."""
        table = self.sinusoids if learned is None else learned.weight
        end = start + length
        if end > self.cfg.max_positions:
            if learned is not None:
                raise ValueError(f"position {end - 1} is beyond the learned table of "
                                 f"{self.cfg.max_positions} positions")
            table = SINUSOIDS[self.cfg.positional](end, self.cfg.d_model)  # (end, d_model)
            return table.to(self.sinusoids)[start:end]
        return table[start:end]

    def _embed(self, embedding: nn.Embedding, learned: nn.Embedding | None, tokens: Tensor,
               start: int = 0) -> Tensor:
        """Embeddings times sqrt(d_model) (section 3.4) plus positional encodings (section
        3.5) of tokens (batch, len), from position start."""
        x = embedding(tokens) * self.embed_scale  # (batch, len, d_model)
        x = x + self._positional(start, tokens.size(1), learned)
        return bool_mask_dropout(x, self.cfg.dropout, self.training)

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOut:
        """Run the encoder stack on source token ids src (batch, src_len)."""
        src_mask = src.ne(self.pad_id)  # (batch, src_len)
        attn_mask = src_mask[:, None, None, :]  # (batch, 1, 1, src_len)
        x = self._embed(self.src_embed, self.source_positions, src)  # (batch, src_len, d_model)
        weights = []
        for layer in self.encoder_layers:
            x, layer_weights = layer(x, attn_mask, need_weights)
            if need_weights:
                weights.append(layer_weights)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return EncoderOut(x, src_mask, weights)

    def new_cache(self, max_length: int = 0) -> DecoderCache:
        """An empty plain cache for incremental decoding with `decode(..., cache=cache)`.
        max_length, the most target positions the caller will decode, is a hint that
        plain tensors do not need."""
        layers = len(self.decoder_layers)
        return DecoderCache([KVCache() for _ in range(layers)],
                            [KVCache(memory=True) for _ in range(layers)])

    def decode(self, tgt: Tensor, enc: EncoderOut, cache: DecodingCache | None = None,
               need_weights: bool = False) -> DecoderOut:
        """Next-token logits for target prefixes tgt (batch, tgt_len) given the encoder output.

        Without a cache, tgt is the whole prefix (teacher forcing). With a cache, tgt holds
        only the new positions, which start after the ones already decoded
        (`new_positions`); the cache is updated in place, and encoder-decoder keys/values
        are computed on the first call only.
        tgt's batch may be a multiple g of the encoder's: rows r * g .. r * g + g - 1 are
        hypotheses (beams) of encoder row r, and share its states without copies.
        """
        states, self_attention, cross_attention = self._decoder_states(
            tgt, enc, cache, need_weights)
        return DecoderOut(self.project(states), self_attention, cross_attention)

    def _decoder_states(self, tgt: Tensor, enc: EncoderOut,
                        cache: DecodingCache | None = None, need_weights: bool = False
                        ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The decoder stack's output (batch, tgt_len, d_model) and, with need_weights, its
        layers' self- and encoder-decoder attention weights."""
        start = 0 if cache is None else cache.new_positions(tgt.size(1))
        memory_mask = enc.src_mask[:, None, None, :]  # (batch, 1, 1, src_len)
        x = self._embed(self.tgt_embed, self.positions, tgt, start)  # (batch, tgt_len, d_model)
        self_attention: list[Tensor] = []
        cross_attention: list[Tensor] = []
        for i, layer in enumerate(self.decoder_layers):
            x, self_weights, cross_weights = layer(
                x, enc.states, memory_mask,
                self_cache=None if cache is None else cache.self_attention[i],
                cross_cache=None if cache is None else cache.cross_attention[i],
                need_weights=need_weights)
            if need_weights:
                self_attention.append(self_weights)
                cross_attention.append(cross_weights)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return x, self_attention, cross_attention

    @property
    def projection_weight(self) -> Tensor:
        """(vocab, d_model) the pre-softmax linear transformation's weight."""
        return self.tgt_embed.weight if self.output_proj is None else self.output_proj.weight

    def project(self, x: Tensor) -> Tensor:
        """Pre-softmax linear transformation (batch, len, d_model) -> (batch, len, vocab),
        x W^T + logits_bias."""
        if self.projector is not None:
            return self.projector(x)
        return F.linear(x, self.projection_weight, self.logits_bias)

    def forward(self, src: Tensor, tgt_in: Tensor, project: bool = True) -> Tensor:
        """Teacher-forced logits (batch, tgt_len, vocab) for src (batch, src_len), tgt_in (batch, tgt_len).

        project=False returns the decoder's output (batch, tgt_len, d_model) before the
        pre-softmax projection instead, for a loss that projects a chunk at a time
        (training/loss.py). Training calls the model through forward, as DDP requires.
        """
        enc = self.encode(src)
        if project:
            return self.decode(tgt_in, enc).logits
        return self._decoder_states(tgt_in, enc)[0]
