"""The caches of rows that decode at their own positions: continuous batching.

The searches decode a batch in lockstep, every row at the same position, with one
`KVCache` per layer (model/cache.py, decode/attention/kv_cache.py). The engine of a busy server
(transformer_nmt.decode.continuous.engine) lets sentences join and leave between two steps instead,
so that a batch never decodes empty rows while work waits; each row then sits at its own
position. Read top to bottom: one layer's self-attention cache of such rows, one layer's
encoder-decoder cache of their sentences, and the cache of a whole decoder, which the
model's `decode` takes like any other (the rows' positions, their source mask and their
encoder-decoder keys are the cache's).

Every buffer here starts as zeros and is only ever written with keys and values, so
the positions a row may not see hold finite numbers: the attention masks them, and a
masked NaN would still poison the softmax.

A step's rows read their keys and values in a few spans (`row_spans`), each only as far
as its own longest row: sentences join last, at position 0, and all advance together,
so the rows are in order of position, longest first, and one span per step would make a
sentence that just joined read as many positions as the oldest one: on a server's
arrival order that padding was a large share of the engine's attention and cache gathers
(bench/RESULTS.md, "The engine in a server's arrival order").
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.decode.device.precision import cache_dtype
from transformer_nmt.decode.attention.spare_pool import SparePool
from transformer_nmt.model.attention import Kernel, attend
from transformer_nmt.model.cache import KVCache
from transformer_nmt.model.transformer import EncoderOut, Transformer

SPANS = 4
"""Most spans of rows a step's self-attention and cache gathers are cut into: each span
costs one more call per layer, and four spans over positions spread evenly read well
under what one span reads (eight or two measured no different)."""


def row_spans(lengths: list[int], group: int) -> list[tuple[int, int, int]]:
    """Spans (first row, end row, positions to read) that cover the rows of sentences
    whose rows read `lengths` positions (one per sentence, `group` rows each): when the
    lengths never increase, up to SPANS spans of about equal numbers of sentences, each
    reading as far as its first sentence; otherwise one span reading the longest."""
    count = len(lengths)
    if count == 0:
        return []
    if any(earlier < later for earlier, later in zip(lengths, lengths[1:])):
        return [(0, count * group, max(lengths))]
    size = -(-count // SPANS)
    spans: list[tuple[int, int, int]] = []
    for first in range(0, count, size):
        end = min(first + size, count) * group
        if spans and spans[-1][2] == lengths[first]:
            spans[-1] = (spans[-1][0], end, lengths[first])  # nothing to save: merge
        else:
            spans.append((first * group, end, lengths[first]))
    return spans


class RowSelfCache:
    """One layer's self-attention keys and values of rows at their own positions.

    Row r writes its newest keys/values at `positions[r]` and attends to positions
    0 .. positions[r] (`mask`), span by span. The buffers (row capacity, heads, capacity,
    d) hold the rows present first; joining rows take the spare rows after them, so a
    join copies nothing until the capacity doubles; positions grow by GROWTH, the plain
    cache's.
    """

    GROWTH = KVCache.GROWTH

    def __init__(self, pool: SparePool, dtype: torch.dtype | None) -> None:
        self._keys: Tensor | None = None  # (row capacity, heads, capacity, d_k)
        self._values: Tensor | None = None  # (row capacity, heads, capacity, d_v)
        self._pool, self.dtype = pool, dtype
        self.rows = 0
        """Rows present."""
        self.positions = torch.zeros(0, dtype=torch.long)
        """(rows,) where each row writes this step (set by RowCache.start_step)."""
        self.end = 0
        """1 + the largest position: the positions a step reads."""
        self.spans: list[tuple[int, int, int]] = []
        """This step's spans of rows and the positions each reads (`row_spans`)."""
        self.mask = torch.zeros(0, 1, 1, 0, dtype=torch.bool)
        """(rows, 1, 1, end) True at the positions each row may attend to this step."""

    def add_rows(self, count: int) -> None:
        """Room for `count` more rows, after the present ones. Their spare rows hold old
        keys and values, finite and masked until the rows write their own."""
        self.rows += count
        if self._keys is not None and self.rows > self._keys.size(0):
            capacity = max(self.rows, 2 * self._keys.size(0))
            self._keys, self._values = (
                torch.cat([buffer, buffer.new_zeros(capacity - buffer.size(0), *buffer.shape[1:])])
                for buffer in (self._keys, self._values))

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Write each row's new keys (rows, heads, 1, d_k) and values at its position;
        return every row's keys and values (rows, heads, end, d) for the attention."""
        if self.dtype is not None:
            keys, values = keys.to(self.dtype), values.to(self.dtype)
        if self._keys is None or self.end > self._keys.size(2):
            self._grow(keys, values)
        rows = torch.arange(self.rows, device=keys.device)
        self._keys[rows, :, self.positions] = keys[:, :, 0]
        self._values[rows, :, self.positions] = values[:, :, 0]
        return self._keys[: self.rows, :, : self.end], self._values[: self.rows, :, : self.end]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
               need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """Eq. (1) of each row's query q (rows, heads, 1, d_k) over its positions so far,
        after writing its new keys k (rows, heads, 1, d_k) and values v at its position:
        the output (rows, heads, 1, d_v) and, if need_weights, the weights. The rows'
        own `mask` replaces mask; with one query per row, causal hides nothing."""
        k, v = self.append(k, v)  # (rows, heads, end, d)
        if len(self.spans) > 1 and not need_weights:
            # Each span only as far as it reads.
            return torch.cat([
                attend(q[first:end], k[first:end, :, :length], v[first:end, :, :length],
                       self.mask[first:end, :, :, :length], False, False, kernel, dropout)[0]
                for first, end, length in self.spans]), None
        return attend(q, k, v, self.mask, causal, need_weights, kernel, dropout)

    def _grow(self, keys: Tensor, values: Tensor) -> None:
        capacity = -(-self.end // self.GROWTH) * self.GROWTH
        grown = []
        for old, new in ((self._keys, keys), (self._values, values)):
            row_capacity = self.rows if old is None else old.size(0)
            buffer = new.new_zeros(row_capacity, new.size(1), capacity, new.size(3))
            if old is not None:
                buffer[:, :, : old.size(2)] = old
            grown.append(buffer)
        self._keys, self._values = grown

    def keep(self, rows: Tensor, spans: list[tuple[int, int, int]]) -> None:
        """Go on with rows `rows` (new_rows,) in that order (beams moving, sentences
        leaving); spans: of the new rows, with the positions each has written."""
        if self._keys is not None and not _is_identity(rows, self.rows):
            self._keys, self._values = (self._gather(buffer, rows, spans)
                                        for buffer in (self._keys, self._values))
        self.rows = rows.numel()

    def _gather(self, buffer: Tensor, rows: Tensor, spans: list[tuple[int, int, int]]
                ) -> Tensor:
        gathered = self._pool.take(buffer.size(0), buffer)
        for first, end, length in spans:
            # Beyond a span's length its rows keep the spare's old keys: finite, masked.
            torch.index_select(buffer[: self.rows, :, :length], 0, rows[first:end],
                               out=gathered[first:end, :, :length])
        self._pool.give(buffer)
        return gathered


class RowCrossCache:
    """One layer's encoder-decoder keys and values, once per sentence (sentences, heads,
    src_len, d), every source padded to the longest one present."""

    holds_memory = True
    """Sentences join with their keys and values (`join`): the model never projects them."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def attend(self, q: Tensor, k: None, v: None, mask: Tensor | None, causal: bool,
               need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """Eq. (1) of q (rows, heads, 1, d_k), `group` rows per sentence, over their
        sentence's keys; mask (sentences, 1, 1, src_len) from RowCache.src_mask."""
        return attend(q, self.keys, self.values, mask, causal, need_weights, kernel, dropout)

    def join(self, keys: Tensor, values: Tensor) -> None:
        """Add new sentences' keys and values (new, heads, their src_len, d)."""
        if self.keys is None or self.keys.size(0) == 0:
            self.keys, self.values = keys, values
            return
        self.keys, self.values = (_cat_padded(old, new, dim=2)
                                  for old, new in ((self.keys, keys), (self.values, values)))

    def keep(self, sentences: Tensor, length: int) -> None:
        """Go on with sentences `sentences` (new_sentences,), sources cut to `length`."""
        self.keys = self.keys[:, :, :length].index_select(0, sentences)
        self.values = self.values[:, :, :length].index_select(0, sentences)


class RowCache:
    """Every decoder layer's caches for rows at their own positions, `group` rows per
    sentence (the beams of one sentence: rows s * group .. s * group + group - 1).

    A step sets where each row writes (`start_step`), then the model decodes the rows'
    tokens with this cache and no encoder output (Transformer.decode); between steps,
    sentences join (`join`, with their encoder-decoder keys and values) and rows move or
    leave (`keep`).
    """

    def __init__(self, layers: int, group: int, dtype: torch.dtype | None = None) -> None:
        pool = SparePool(zeroed=True)  # one spare serves every layer's reorders
        self.group = group
        self.self_attention = [RowSelfCache(pool, dtype) for _ in range(layers)]
        self.cross_attention = [RowCrossCache() for _ in range(layers)]
        self.src_mask = torch.zeros(0, 0, dtype=torch.bool)
        """(sentences, src_len) True at each sentence's real source positions."""
        self._positions = torch.zeros(0, dtype=torch.long)
        """(rows,) where each row writes this step."""
        self._written: list[int] = []
        """Positions each sentence's rows have written, by sentence."""
        self._spans: list[tuple[int, int, int]] = []
        """`row_spans` of `_written`: the step's, and its gathers' while no sentence leaves."""

    @property
    def sentences(self) -> int:
        """Sentences present."""
        return self.src_mask.size(0)

    def new_positions(self, new: int) -> Tensor:
        """(rows, 1) the position each row feeds this step (`start_step`'s); new is 1."""
        return self._positions.unsqueeze(1)

    def join(self, model: Transformer, enc: EncoderOut) -> None:
        """New sentences, `group` rows each after the present rows: enc's, each decoder
        layer's encoder-decoder keys and values (new, heads, src_len, d) of `model`
        computed once here, and their source mask (new, src_len)."""
        src_mask = enc.src_mask
        for cache, layer in zip(self.cross_attention, model.decoder_layers):
            cache.join(*layer.cross_attn.memory_keys_values(enc.states))
        if self.src_mask.numel() == 0:
            self.src_mask = src_mask
        else:
            self.src_mask = _cat_padded(self.src_mask.to(src_mask.device), src_mask, dim=1)
        for cache in self.self_attention:
            cache.add_rows(src_mask.size(0) * self.group)
        self._written += [0] * src_mask.size(0)

    def start_step(self, positions: Tensor) -> None:
        """Each row (rows,) writes at its position this step and sees those before; the
        rows of a sentence are at one position."""
        # After this step each sentence's rows have written up to their position.
        self._written = [position + 1 for position in positions[:: self.group].tolist()]
        end = max(self._written)
        self._spans = row_spans(self._written, self.group)
        seen = torch.arange(end, device=positions.device) <= positions.unsqueeze(1)
        mask = seen[:, None, None, :]  # (rows, 1, 1, end)
        self._positions = positions
        for cache in self.self_attention:
            cache.positions, cache.end, cache.spans, cache.mask = positions, end, self._spans, mask

    def keep(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Go on with rows `rows` (new_rows,); `sentences` (new_sentences,) when
        sentences leave (None: every one stays)."""
        if sentences is not None:
            self._written = [self._written[i] for i in sentences.tolist()]
            self._spans = row_spans(self._written, self.group)
        for cache in self.self_attention:
            cache.keep(rows, self._spans)
        if sentences is None:
            return
        self.src_mask = self.src_mask.index_select(0, sentences)
        # The longest source left: padding beyond it is no longer read.
        length = int(self.src_mask.sum(1).max()) if sentences.numel() else 0
        self.src_mask = self.src_mask[:, :length]
        for cache in self.cross_attention:
            cache.keep(sentences, length)


def new_row_cache(model: Transformer, group: int) -> RowCache:
    """An empty RowCache for `model`, `group` rows per sentence (the beam), keys and
    values stored in its decoding dtype (precision.cache_dtype)."""
    return RowCache(len(model.decoder_layers), group, cache_dtype(model))


def _is_identity(rows: Tensor, present: int) -> bool:
    """Whether rows (new_rows,) keeps the first new_rows of `present` rows in place
    (greedy search between two departures): then nothing needs to move."""
    return bool(torch.equal(rows, torch.arange(rows.numel(), device=rows.device))) \
        and rows.numel() <= present


def _cat_padded(old: Tensor, new: Tensor, dim: int) -> Tensor:
    """old and new concatenated along dim 0, the shorter one zero-padded along `dim`."""
    length = max(old.size(dim), new.size(dim))
    return torch.cat([_pad_to(old, dim, length), _pad_to(new, dim, length)])


def _pad_to(tensor: Tensor, dim: int, length: int) -> Tensor:
    if tensor.size(dim) == length:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = length - tensor.size(dim)
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)
