"""The spare buffers that the decoding caches' reorders gather into
(decode/attention/kv_cache.py), handing memory back to the operating system as batches
shrink."""

from __future__ import annotations

from torch import Tensor

from transformer_nmt.memory import release_rows


class SparePool:
    """Buffers that reorders gather into, shared by the caches of one decoder.

    A reorder gathers a cache into a spare buffer and hands its old buffer back, so one
    spare serves every layer in turn: the memory of one layer's cache, not of a second
    copy of all of them. A fresh allocation per step would instead be page-faulted in
    every time. Only buffers of the latest shape are kept.
    """

    def __init__(self) -> None:
        self._free: list[Tensor] = []

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
        return like.new_empty(rows, *like.shape[1:])

    def give(self, buffer: Tensor) -> None:
        """Keep `buffer` for a later take; buffers of other shapes are dropped."""
        self._free = [b for b in self._free if b.shape[1:] == buffer.shape[1:]][-1:] + [buffer]
