"""The key/value caches of incremental decoding: at each step the decoder feeds only the
new positions and attends over the keys and values of the ones before (section 3.2.3's
masked self-attention makes those unchanged by later positions).

Read top to bottom: what the model reads of a decoder's cache (`DecodingCache`, all that
decoding plugs into), one attention layer's cache, then the cache of a whole decoder
(every layer's self- and encoder-decoder attention). Each cache owns how its keys and
values are stored and attended (model/attention.py, AttentionCache), so that other
caches plug in without the model knowing them.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from torch import Tensor

from transformer_nmt.model.attention import AttentionCache, Kernel, attend


@runtime_checkable
class DecodingCache(Protocol):
    """What the model reads of an incremental-decoding cache, and all it reads: each
    decoder layer's self- and encoder-decoder attention cache (None for a layer that
    keeps nothing) and where the positions fed next start. `DecoderCache` below is the
    plain one; decoding's own implement the same (transformer_nmt.decode.attention)."""

    self_attention: Sequence[AttentionCache | None]
    """Per decoder layer, its self-attention's cache."""
    cross_attention: Sequence[AttentionCache | None]
    """Per decoder layer, its encoder-decoder attention's cache."""

    def new_positions(self, new: int) -> int:
        """The position of the first of the `new` target positions fed next."""


class KVCache:
    """Keys and values of one attention layer kept between incremental decoding steps.

    Self-attention appends one step's keys/values per call; encoder-decoder attention
    (`memory`) keeps memory's keys/values, given once per source sentence. Beam search
    calls `reorder`.

    They live in contiguous buffers (batch, heads, capacity, d), so that a step writes
    only its own positions (torch.cat would copy the whole cache every step).
    `capacity` positions are set aside at the first append: the operating system backs
    only the pages that are written, so the unused tail costs address space, not memory,
    where growing the buffers (in steps of GROWTH positions, past the capacity) leaves
    the allocator holes of every smaller size, which raise a beam search's peak memory.
    """

    GROWTH = 16

    def __init__(self, capacity: int = 0, memory: bool = False) -> None:
        self._keys: Tensor | None = None  # (batch, heads, capacity, d_k)
        self._values: Tensor | None = None  # (batch, heads, capacity, d_v)
        self._capacity = capacity
        self.memory = memory
        """Encoder-decoder attention's cache: memory's keys and values, kept once."""
        self.length = 0
        """Number of cached positions."""

    @property
    def holds_memory(self) -> bool:
        """Whether memory's keys and values are kept (encoder-decoder attention)."""
        return self.memory and self._keys is not None

    @property
    def keys(self) -> Tensor | None:
        """(batch, heads, length, d_k) the cached keys, or None before the first append."""
        return None if self._keys is None else self._keys[:, :, : self.length]

    @property
    def values(self) -> Tensor | None:
        """(batch, heads, length, d_v) the cached values, or None before the first append."""
        return None if self._values is None else self._values[:, :, : self.length]

    def attend(self, q: Tensor, k: Tensor | None, v: Tensor | None, mask: Tensor | None,
               causal: bool, need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """Eq. (1) of q (batch, heads, tgt_len, d_k) over every key kept, after keeping
        the new keys k and values v (batch, heads, new, d). Encoder-decoder attention
        passes memory's once (attended as given) and None after."""
        if k is None:
            k, v = self.keys, self.values
        elif self.memory:
            self.append(k, v)
        else:
            k, v = self.append(k, v)
        return attend(q, k, v, mask, causal, need_weights, kernel, dropout)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions, keys (batch, heads, new, d_k) and values; return all so far."""
        end = self.length + keys.size(2)
        if self._keys is None or end > self._keys.size(2):
            self._grow(keys, values, end)
        self._keys[:, :, self.length: end] = keys
        self._values[:, :, self.length: end] = values
        self.length = end
        return self.keys, self.values

    def _grow(self, keys: Tensor, values: Tensor, needed: int) -> None:
        capacity = max(-(-needed // self.GROWTH) * self.GROWTH, self._capacity)
        grown = []
        for old, new in ((self._keys, keys), (self._values, values)):
            batch, heads, _, width = new.shape
            buffer = new.new_empty(batch, heads, capacity, width)
            if old is not None:
                buffer[:, :, : self.length] = old[:, :, : self.length]
            grown.append(buffer)
        self._keys, self._values = grown

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (batch,) in that order, e.g. the surviving beams."""
        if self._keys is None:
            return
        self._keys = self._gather(self._keys, index)
        self._values = self._gather(self._values, index)

    def _gather(self, buffer: Tensor, index: Tensor) -> Tensor:
        """Rows `index` of buffer (batch, heads, capacity, d); a copy, which carries
        gradients."""
        return buffer[index]


class DecoderCache:
    """Every decoder layer's self-attention and encoder-decoder attention caches."""

    def __init__(self, self_attention: Sequence, cross_attention: Sequence) -> None:
        self.self_attention = list(self_attention)
        self.cross_attention = list(cross_attention)

    @classmethod
    def plain(cls, layers: int, max_length: int = 0) -> "DecoderCache":
        """KVCaches for `layers` layers, room for max_length target positions (0: unknown)."""
        return cls([KVCache(max_length) for _ in range(layers)],
                   [KVCache(memory=True) for _ in range(layers)])

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
