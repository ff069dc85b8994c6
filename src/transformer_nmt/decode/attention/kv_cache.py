"""The key/value caches the searches decode with: the model's plain caches
(model/cache.py) storing keys and values in the dtype decoding chose (`cache_dtype`)
and gathering reorders into spare buffers (decode/attention/spare_pool.py); and the cache a search's
step decodes with, a probe on one layer where asked (decode/attention/probe.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from transformer_nmt.decode.attention.probe import Probe, Unkept, install_probe
from transformer_nmt.decode.attention.spare_pool import SparePool
from transformer_nmt.model.cache import DecoderCache, KVCache
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import bf16_supported


class StoredKVCache(KVCache):
    """A KVCache whose keys and values are stored in `dtype` (None: as they come), and
    whose reorders gather into a spare buffer from `pool` rather than a new one."""

    def __init__(self, pool: SparePool, capacity: int = 0, memory: bool = False,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(capacity, memory)
        self._pool = pool
        self.dtype = dtype
        """The dtype keys and values are stored in (None: the dtype they come in)."""

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """As KVCache.append, keys and values converted to `dtype` first."""
        if self.dtype is not None:
            keys, values = keys.to(self.dtype), values.to(self.dtype)
        return super().append(keys, values)

    def _gather(self, buffer: Tensor, index: Tensor) -> Tensor:
        if buffer.requires_grad:
            return super()._gather(buffer, index)  # out= cannot carry gradients
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
