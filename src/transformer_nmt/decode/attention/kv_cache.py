"""The key/value caches the searches decode with, plugged into the model's cache
interface (model/cache.py): keys and values in preallocated buffers, stored in the dtype
decoding chose (`cache_dtype`), reorders gathered into spare buffers
(decode/attention/spare_pool.py); and the cache a search's step decodes with, a probe on
one layer where asked (decode/attention/probe.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from transformer_nmt.decode.attention.probe import Probe, Unkept, install_probe
from transformer_nmt.decode.attention.spare_pool import SparePool
from transformer_nmt.model.attention import Kernel, attend
from transformer_nmt.model.cache import DecoderCache
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import bf16_supported


class StoredKVCache:
    """Keys and values of one attention layer kept between incremental decoding steps
    (the model's AttentionCache), stored in `dtype` (None: as they come), reorders
    gathered into a spare buffer from `pool` rather than a new one.

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

    def __init__(self, pool: SparePool, capacity: int = 0, memory: bool = False,
                 dtype: torch.dtype | None = None) -> None:
        self._keys: Tensor | None = None  # (batch, heads, capacity, d_k)
        self._values: Tensor | None = None  # (batch, heads, capacity, d_v)
        self._capacity = capacity
        self._pool = pool
        self.memory = memory
        """Encoder-decoder attention's cache: memory's keys and values, kept once."""
        self.dtype = dtype
        """The dtype keys and values are stored in (None: the dtype they come in)."""
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
        """Add new positions, keys (batch, heads, new, d_k) and values, converted to
        `dtype`; return all so far."""
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
        self._keys = self._gather(self._keys, index)
        self._values = self._gather(self._values, index)

    def _gather(self, buffer: Tensor, index: Tensor) -> Tensor:
        """Rows `index` of buffer (batch, heads, capacity, d), into a spare buffer."""
        if buffer.requires_grad:
            return buffer[index]  # out= cannot carry gradients
        gathered = self._pool.take(index.numel(), buffer)
        torch.index_select(buffer[:, :, : self.length], 0, index,
                           out=gathered[:, :, : self.length])
        self._pool.give(buffer)
        return gathered


def stored_decoder_cache(layers: int, max_length: int = 0,
                         dtype: torch.dtype | None = None) -> DecoderCache:
    """A DecoderCache of StoredKVCaches for `layers` layers, keys and values in `dtype`;
    one spare buffer per kind serves all layers' reorders (SparePool)."""
    self_pool, cross_pool = SparePool(), SparePool()
    return DecoderCache(
        [StoredKVCache(self_pool, max_length, dtype=dtype) for _ in range(layers)],
        [StoredKVCache(cross_pool, memory=True, dtype=dtype) for _ in range(layers)])


def decoder_cache(model: Any, max_length: int = 0) -> Any:
    """An empty incremental-decoding cache for `model`, for at most max_length target
    positions (0: unknown): a Transformer's stored in its decoding dtype; any other
    model's (an ensemble's, the tests' toys) its own `new_cache`."""
    if isinstance(model, Transformer):
        return stored_decoder_cache(len(model.decoder_layers), max_length, cache_dtype(model))
    return model.new_cache(max_length)


def step_cache(model: Any, use_cache: bool, max_length: int, probe_layer: int | None = None
               ) -> tuple[Any, Probe | None]:
    """The cache a search decodes `model` with (`decoder_cache`; None without use_cache,
    the whole prefix fed at every step) and, for a decoder layer `probe_layer`, the
    Probe on its encoder-decoder attention (a Transformer's only)."""
    cache = decoder_cache(model, max_length) if use_cache else None
    if probe_layer is None:
        return cache, None
    if cache is None:
        cache = Unkept(len(model.decoder_layers))
    return cache, install_probe(cache, probe_layer)


def cache_dtype(model: Transformer) -> torch.dtype | None:
    """The dtype decoding caches `model`'s keys and values in (None: the model's).

    int8 decoding (`quantize`) keeps them in bf16 on a CPU that computes it natively:
    attention over the caches reads them from memory at every step, and with the
    products in int8 that reading is a large part of a step, and bf16 halves its bytes.
    fp32 keeps fp32 caches, so that its
    output stays the reference; without native bf16 the conversions would cost more
    than they save.
    """
    quantized = isinstance(model.projector, torch.ao.nn.quantized.dynamic.Linear)
    return torch.bfloat16 if quantized and bf16_supported(torch.device("cpu")) else None
