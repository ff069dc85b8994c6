"""What every search shares: the model protocol it decodes through (`Seq2Seq`), the
reserved token ids, the `Hypothesis` it returns, the GNMT length penalty and the maximum
output lengths. The definitions are transformer_nmt.decode.search.searches's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID


class EncoderState(Protocol):
    """What `Seq2Seq.encode` returns; the search only needs to pick batch rows from it."""

    def select(self, index: Tensor) -> "EncoderState":
        """Rows `index` (new_batch,) of the batch."""


class DecoderState(Protocol):
    """The incremental-decoding cache; the search reorders it as hypotheses move."""

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Keep decoder rows `index` (new_batch,) in that order, and encoder rows
        `sentences` (new_sentences,) when sentences leave the batch (None: all stay)."""


class DecoderOutput(Protocol):
    """What `Seq2Seq.decode` returns."""

    logits: Tensor
    """(batch, tgt_len, vocab); unnormalized, or log-probabilities (an ensemble's)."""
    cross_attention: list[Tensor]
    """Per layer (batch, heads, tgt_len, src_len), filled when need_weights is True."""


class Seq2Seq(Protocol):
    """The model interface the searches use (transformer_nmt.model.transformer.Transformer)."""

    def encode(self, src: Tensor) -> EncoderState:
        """Encode source ids (batch, src_len), each sentence ending in EOS, padded with PAD."""

    def new_cache(self, max_length: int = 0) -> DecoderState:
        """An empty incremental-decoding cache for at most max_length target positions
        (a hint; 0: unknown)."""

    def decode(self, tgt: Tensor, enc: EncoderState, cache: DecoderState | None = None,
               need_weights: bool = False) -> DecoderOutput:
        """Logits for target prefixes; with a cache, tgt holds only the new positions.

        tgt's batch is g times enc's (g = 1 for greedy search, the beam size after beam
        search's first step): rows r * g .. r * g + g - 1 belong to source sentence r.
        """


@dataclass(frozen=True)
class SpecialIds:
    """The reserved token ids (by default the data pipeline's vocabulary's)."""

    pad: int = PAD_ID
    bos: int = BOS_ID
    eos: int = EOS_ID


@dataclass
class Hypothesis:
    """One finished translation of one source sentence, as token ids."""

    tokens: list[int]
    """Generated token ids, without BOS and EOS."""
    score: float
    """log P(Y | X) / lp(Y), the quantity the search maximizes."""
    log_prob: float
    """log P(Y | X), EOS included."""
    attention: Tensor | None = None
    """(len(tokens) + 1, src_len + 1) encoder-decoder attention of the step that produced
    each output token (EOS last) over the source tokens (EOS last), averaged over heads of
    one decoder layer; only when asked for."""
    token_scores: list[float] | None = None
    """log P of each token given the ones before it, EOS last (len(tokens) + 1 values
    summing to log_prob); only when asked for."""
    features: list[float] | None = None
    """The confidence's STATE_FEATURES (transformer_nmt.decode.search.features), gathered
    by the search (transformer_nmt.decode.search.feature_track) when asked."""


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha; length counts tokens with EOS."""
    return ((5 + length) / 6) ** alpha


def source_lengths(src: Tensor, pad_id: int) -> Tensor:
    """(batch,) each source's length without EOS, of src (batch, src_len) (ids, EOS, PAD)."""
    return src.ne(pad_id).sum(1) - 1


def max_lengths(src: Tensor, cfg: DecodeConfig, pad_id: int, limit: int | None = None) -> Tensor:
    """Per-sentence maximum output length (batch,) before EOS: floor(a * src_len + b).

    src (batch, src_len) holds ids + EOS + padding; src_len excludes EOS and padding.
    `limit` caps the length, e.g. so that BOS and the tokens fit the model's positions.
    """
    src_len = source_lengths(src, pad_id)  # (batch,)
    lengths = torch.floor(cfg.max_len_a * src_len.double() + cfg.max_len_b).long().clamp(min=0)
    return lengths if limit is None else lengths.clamp(max=limit)
