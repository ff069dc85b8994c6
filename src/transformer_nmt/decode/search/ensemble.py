"""Several models decoding as one: at every step the mean of their log-probabilities.

`Ensemble` speaks the searches' `Seq2Seq` protocol (transformer_nmt.decode.search.searches), so
greedy, beam search, sampling and scoring take it like a single model; each member keeps
its own encoder output and key/value cache, reordered together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from transformer_nmt.decode.attention.kv_cache import decoder_cache
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.model_file import InferenceModel, load_for_inference, model_languages


@dataclass
class EnsembleEncoderOut:
    """Each member's encoder output, rows kept in step."""

    members: list

    def select(self, index: Tensor) -> "EnsembleEncoderOut":
        """Rows `index` (new_batch,) of every member's batch."""
        return EnsembleEncoderOut([enc.select(index) for enc in self.members])


@dataclass
class EnsembleCache:
    """Each member's incremental-decoding cache, reordered together."""

    members: list

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Keep decoder rows `index` and encoder rows `sentences` in every member."""
        for cache in self.members:
            cache.reorder(index, sentences)


@dataclass
class EnsembleOut:
    """The members' mean log-probabilities, and the first member's attention."""

    logits: Tensor
    """(batch, tgt_len, vocab) float32 mean of the members' log-probabilities."""
    cross_attention: list[Tensor] = field(default_factory=list)
    """The first member's, per layer (batch, heads, tgt_len, src_len), when asked for:
    word alignments come from one model's attention."""


class Ensemble(nn.Module):
    """Models with one vocabulary whose next-token log-probabilities are averaged
    (the searches normalize the mean again)."""

    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        self.members = nn.ModuleList(models)
        # Positions: the fewest any member has, so that every member can decode the output.
        self.cfg = replace(models[0].cfg, max_positions=min(m.cfg.max_positions for m in models))

    def encode(self, src: Tensor) -> EnsembleEncoderOut:
        """Every member's encoding of src (batch, src_len)."""
        return EnsembleEncoderOut([member.encode(src) for member in self.members])

    def new_cache(self, max_length: int = 0) -> EnsembleCache:
        """An empty cache per member, as each decodes alone (kv_cache.decoder_cache)."""
        return EnsembleCache([decoder_cache(member, max_length) for member in self.members])

    def decode(self, tgt: Tensor, enc: EnsembleEncoderOut, cache: EnsembleCache | None = None,
               need_weights: bool = False) -> EnsembleOut:
        """Mean log-probabilities (batch, tgt_len, vocab) of the members for tgt
        (batch, tgt_len), each with its own encoder output and cache."""
        total, attention = None, []
        for i, member in enumerate(self.members):
            out = member.decode(tgt, enc.members[i], None if cache is None else cache.members[i],
                                need_weights=need_weights and i == 0)
            log_probs = torch.log_softmax(out.logits.float(), dim=-1)
            total = log_probs if total is None else total + log_probs
            if i == 0:
                attention = out.cross_attention
        return EnsembleOut(total / len(self.members), attention)


def load_ensemble(paths: Sequence[str | Path]) -> InferenceModel:
    """The model files at `paths` as one InferenceModel whose network is their Ensemble,
    read onto the CPU, with the first one's vocabulary, path and record; UserError unless
    they share one vocabulary and translate one language pair."""
    loaded = [load_for_inference(path, "cpu") for path in paths]
    vocab = loaded[0].vocab.to_bytes()
    for other in loaded[1:]:
        if other.vocab.to_bytes() != vocab:
            raise UserError(f"{other.path} has another vocabulary than {loaded[0].path}; "
                            "an ensemble's models must share one (trained on one data "
                            "directory)")
        if model_languages(other.payload_meta) != model_languages(loaded[0].payload_meta):
            raise UserError(f"{other.path} and {loaded[0].path} translate different "
                            "language pairs; an ensemble's models must translate one")
    first = loaded[0]
    return InferenceModel(Ensemble([member.model for member in loaded]), first.vocab,
                          first.path, first.payload_meta)
