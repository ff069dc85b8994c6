"""The key/value caches of incremental decoding: at each step the decoder feeds only the
new positions and attends over the keys and values of the ones before (section 3.2.3's
masked self-attention makes those unchanged by later positions). Other caches plug in
through `DecodingCache` and model/attention.py's AttentionCache.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from transformer_nmt.model.attention import AttentionCache, Kernel, attend


@runtime_checkable
class DecodingCache(Protocol):
    """What the model reads of an incremental-decoding cache, and all it reads: each
    decoder layer's self- and encoder-decoder attention cache (None for a layer that
    keeps nothing) and where the positions fed next start."""

    self_attention: Sequence[AttentionCache | None]
    """Per decoder layer, its self-attention's cache."""
    cross_attention: Sequence[AttentionCache | None]
    """Per decoder layer, its encoder-decoder attention's cache."""

    def new_positions(self, new: int) -> int:
        """The position of the first of the `new` target positions fed next."""


class KVCache:
    """Keys and values of one attention layer kept between incremental decoding steps, as
    plain tensors: self-attention's grow by each step's positions; encoder-decoder
    attention's (`memory`) are memory's, given once per source sentence."""

    def __init__(self, memory: bool = False) -> None:
        self.memory = memory
        self.keys: Tensor | None = None  # (batch, heads, length, d_k)
        self.values: Tensor | None = None  # (batch, heads, length, d_v)

    @property
    def holds_memory(self) -> bool:
        """Whether memory's keys and values are kept (encoder-decoder attention)."""
        return self.memory and self.keys is not None

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.keys is None else self.keys.size(2)

    def attend(self, q: Tensor, k: Tensor | None, v: Tensor | None, mask: Tensor | None,
               causal: bool, need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """AttentionCache.attend, the keys and values kept as concatenated tensors."""
        if k is not None:
            self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)
            self.values = v if self.values is None else torch.cat([self.values, v], dim=2)
        return attend(q, self.keys, self.values, mask, causal, need_weights, kernel, dropout)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (batch,) in that order, e.g. the surviving beams."""
        if self.keys is not None:
            self.keys, self.values = self.keys[index], self.values[index]


class DecoderCache:
    """Every decoder layer's self-attention and encoder-decoder attention caches."""

    def __init__(self, self_attention: Sequence, cross_attention: Sequence) -> None:
        self.self_attention = list(self_attention)
        self.cross_attention = list(cross_attention)

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.self_attention[0].length

    def new_positions(self, new: int) -> int:
        """Where the `new` positions fed next start: after the `length` decoded."""
        return self.length

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Keep decoder rows `index` (new_batch,): hypotheses moving between beams.

        The encoder-decoder keys/values are kept once per source sentence (the encoder
        batch), not per hypothesis: `sentences` (new_sentences,) says which to keep when
        sentences leave the batch, None when they all stay.
        """
        for cache in self.self_attention:
            cache.reorder(index)
        if sentences is not None:
            for cache in self.cross_attention:
                cache.reorder(sentences)
