"""The key/value caches of incremental decoding, and the spare buffers their reorders share.

Read top to bottom: the pool of spare buffers, one attention layer's cache, and the
cache of a whole decoder (every layer's self- and encoder-decoder attention).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.memory import release_rows


class SparePool:
    """Buffers that reorders gather into, shared by the caches of one decoder.

    A reorder gathers a cache into a spare buffer and hands its old buffer back, so one
    spare serves every layer in turn: the memory of one layer's cache, not of a second
    copy of all of them. A fresh allocation per step would instead be page-faulted in
    every time. Only buffers of the latest shape are kept.
    """

    def __init__(self, zeroed: bool = False) -> None:
        self._free: list[Tensor] = []
        self._zeroed = zeroed
        """New buffers start as zeros (the row caches of model/rows.py need every entry
        finite), else uninitialized."""

    def take(self, rows: int, like: Tensor) -> Tensor:
        """A buffer (rows, *like.shape[1:]) of like's dtype and device, contents undefined.

        A buffer with more rows than asked for (sentences have left the batch) serves
        as its first rows, and the pages of the rest go back to the operating system:
        they would otherwise stay resident until the batch ends.
        """
        for i, buffer in enumerate(self._free):
            if (buffer.shape[1:] == like.shape[1:] and buffer.size(0) >= rows
                    and buffer.dtype == like.dtype and buffer.device == like.device):
                buffer = self._free.pop(i)
                if buffer.size(0) > rows:
                    release_rows(buffer, rows)
                return buffer[:rows]
        if self._zeroed:
            return like.new_zeros(rows, *like.shape[1:])
        return like.new_empty(rows, *like.shape[1:])

    def give(self, buffer: Tensor) -> None:
        """Keep `buffer` for a later take; buffers of other shapes are dropped."""
        self._free = [b for b in self._free if b.shape[1:] == buffer.shape[1:]][-1:] + [buffer]


class KVCache:
    """Keys and values of one attention layer kept between incremental decoding steps.

    Self-attention appends one step's keys/values per call; encoder-decoder attention
    fills its keys/values once per source sentence. Beam search calls `reorder`.

    They live in contiguous buffers (batch, heads, capacity, d), so that a step writes
    only its own positions (torch.cat would copy the whole cache every step), and a
    reorder is one gather into a spare buffer from `pool`. `capacity` positions are set
    aside at the first append: the operating system backs only the pages that are
    written, so the unused tail costs address space, not memory, where growing the
    buffers (in steps of GROWTH positions, past the capacity) leaves the allocator holes
    of every smaller size, which raise a beam search's peak memory.
    """

    GROWTH = 16

    def __init__(self, pool: SparePool | None = None, capacity: int = 0,
                 dtype: torch.dtype | None = None) -> None:
        self._keys: Tensor | None = None  # (batch, heads, capacity, d_k)
        self._values: Tensor | None = None  # (batch, heads, capacity, d_v)
        self._pool = SparePool() if pool is None else pool
        self._capacity = capacity
        self.dtype = dtype
        """The dtype keys and values are stored in (None: the dtype they come in)."""
        self.length = 0
        """Number of cached positions."""

    @property
    def keys(self) -> Tensor | None:
        """(batch, heads, length, d_k) the cached keys, or None before the first append."""
        return None if self._keys is None else self._keys[:, :, : self.length]

    @property
    def values(self) -> Tensor | None:
        """(batch, heads, length, d_v) the cached values, or None before the first append."""
        return None if self._values is None else self._values[:, :, : self.length]

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions, keys (batch, heads, new, d_k) and values; return all so far."""
        if self.dtype is not None:
            keys, values = keys.to(self.dtype), values.to(self.dtype)
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
        if self._keys.requires_grad or self._values.requires_grad:
            # Gathering into a buffer (out=) cannot carry gradients; a copy can.
            self._keys, self._values = self._keys[index], self._values[index]
            return
        self._keys = self._gather(self._keys, index)
        self._values = self._gather(self._values, index)

    def _gather(self, buffer: Tensor, index: Tensor) -> Tensor:
        gathered = self._pool.take(index.numel(), buffer)
        torch.index_select(buffer[:, :, : self.length], 0, index,
                           out=gathered[:, :, : self.length])
        self._pool.give(buffer)
        return gathered


class DecoderCache:
    """Every decoder layer's self-attention and encoder-decoder attention KV caches."""

    def __init__(self, layers: int, max_length: int = 0, dtype: torch.dtype | None = None
                 ) -> None:
        # One spare buffer per kind serves all layers' reorders (see SparePool).
        self_pool, cross_pool = SparePool(), SparePool()
        self.self_attention = [KVCache(self_pool, max_length, dtype) for _ in range(layers)]
        self.cross_attention = [KVCache(cross_pool, dtype=dtype) for _ in range(layers)]

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.self_attention[0].length

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
