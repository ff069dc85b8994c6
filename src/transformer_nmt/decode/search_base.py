"""What every search shares: the model protocol it decodes through (`Seq2Seq`), the
reserved token ids, the `Hypothesis` it returns, the GNMT length penalty, the maximum
output lengths, and the `Stepper` that turns the model's logits into each step's
log-probabilities. The definitions are transformer_nmt.decode.search's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from transformer_nmt.decode.kv_cache import step_cache
from transformer_nmt.memory import release_free_memory


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
    """mean_log_prob, min_log_prob, mean_entropy and unattended_source of the confidence's
    features, gathered by the search (transformer_nmt.decode.search_features) when asked."""


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


def next_token_log_probs(logits: Tensor, special: SpecialIds) -> Tensor:
    """float32 log-probabilities (rows, vocab) of next-token logits (rows, vocab), PAD and
    BOS at -inf: they are never generated."""
    # float32 even for a bf16 model: sums of log-probs over ~100 steps need the mantissa.
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    log_probs[:, special.pad] = float("-inf")
    log_probs[:, special.bos] = float("-inf")
    return log_probs


class Stepper:
    """Next-token log-probabilities for a batch of prefixes that grows one token per step.

    With `use_cache`, only the newest token is fed and the model's cache holds the past;
    without, the whole prefix is decoded every step (the reference the tests and the
    benchmark compare against).
    """

    def __init__(self, model: Seq2Seq, enc: EncoderState, use_cache: bool,
                 max_length: int, probe_layer: int | None = None) -> None:
        """probe_layer: a decoder layer whose encoder-decoder attention each step keeps in
        `probed` (a Transformer's only)."""
        self.model, self.enc = model, enc
        self.use_cache = use_cache
        self.cache, self.probe = step_cache(model, use_cache, max_length, probe_layer)
        self.probed: Tensor | None = None
        """(batch, heads, 1, src_len) the probed layer's attention at the last step."""
        # The encoder's working memory is free by now: hand it back before the caches
        # grow, or the allocator keeps it for the whole batch, part of a beam search's peak.
        release_free_memory()

    def log_probs(self, tokens: Tensor, step: int, special: SpecialIds) -> Tensor:
        """float32 (batch, vocab) log P(next | tokens[:, :step + 1]); PAD and BOS at -inf."""
        if not self.use_cache:
            out = self.model.decode(tokens[:, : step + 1], self.enc, self.cache)
        else:
            out = self.model.decode(tokens[:, step: step + 1], self.enc, self.cache)
        if self.probe is not None:
            self.probed = self.probe.weights[:, :, -1:]
        return next_token_log_probs(out.logits[:, -1], special)

    def reorder(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Continue with prefix rows `rows`; sentences: the encoder rows to keep if
        sentences left the batch, None if they all stay."""
        if self.cache is not None:
            self.cache.reorder(rows, sentences)
        if sentences is not None:
            self.enc = self.enc.select(sentences)
