"""Padded tensors of a batch of pairs: what a training or validation step consumes.

Kept apart from the batch sampler (data/batching.py), which needs only NumPy, so that
`nmt prepare` does not pay torch's import.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from transformer_nmt.data.batching import round_up
from transformer_nmt.data.binarize import ParallelData
from transformer_nmt.data.shapes import BatchShapes
from transformer_nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """A padded batch of pairs, as tensors. B rows; S, T the longest source and target."""

    src: torch.Tensor
    """(B, S) int64: source ids + EOS, padded with pad_id."""
    tgt_in: torch.Tensor
    """(B, T) int64: BOS + target ids, padded: the decoder input."""
    tgt_out: torch.Tensor
    """(B, T) int64: target ids + EOS, padded: what the decoder must predict."""
    src_tokens: int
    """Real source tokens (EOS included)."""
    tgt_tokens: int
    """Real target tokens (one EOS each included): the loss's normalizer."""
    indices: list[int]
    """The pair index of each row."""

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """The same batch with its tensors on `device`."""
        return replace(self, src=self.src.to(device, non_blocking=non_blocking),
                       tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                       tgt_out=self.tgt_out.to(device, non_blocking=non_blocking))


def collate(data: ParallelData, indices: Sequence[int], pad_id: int = PAD_ID,
            bos_id: int = BOS_ID, eos_id: int = EOS_ID, max_len: int | None = None,
            length_multiple: int = 1, shapes: BatchShapes | None = None) -> Batch:
    """Pad the pairs `indices` of `data` into a Batch, each side to a multiple of
    `length_multiple` tokens (as the batch sampler counted them), or with `shapes` to
    lengths of their grid, with empty rows (data/shapes.py) up to the sentences that
    shape holds.

    `max_len`, if given, truncates each side to max_len - 1 ids (max_len with its
    special), for a model whose positions end there; prepare keeps long valid and test
    sentences whole. An empty `indices` gives a Batch of zero rows (shape (0, 1)).
    """
    pairs = [data.pair(int(i)) for i in indices]
    if max_len is not None:
        pairs = [(src[:max_len - 1], tgt[:max_len - 1]) for src, tgt in pairs]
    rows = len(pairs)
    src_len = round_up(max((len(src) for src, _ in pairs), default=0) + 1, length_multiple)
    tgt_len = round_up(max((len(tgt) for _, tgt in pairs), default=0) + 1, length_multiple)
    if shapes is not None and rows:
        src_len, tgt_len = shapes.padded(src_len), shapes.padded(tgt_len)
        rows = max(shapes.rows(src_len, tgt_len), rows)
    if max_len is not None:  # the padding, too, must have positions
        src_len, tgt_len = min(src_len, max_len), min(tgt_len, max_len)
    src = np.full((rows, src_len), pad_id, dtype=np.int64)
    tgt_in = np.full((rows, tgt_len), pad_id, dtype=np.int64)
    tgt_out = np.full((rows, tgt_len), pad_id, dtype=np.int64)
    # Empty rows past the pairs: one source key each, nothing in the loss.
    src[len(pairs):, 0] = eos_id
    tgt_in[len(pairs):, 0] = bos_id
    src_tokens = tgt_tokens = 0
    for row, (s, t) in enumerate(pairs):
        src[row, :len(s)] = s
        src[row, len(s)] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1:len(t) + 1] = t
        tgt_out[row, :len(t)] = t
        tgt_out[row, len(t)] = eos_id
        src_tokens += len(s) + 1
        tgt_tokens += len(t) + 1
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                 src_tokens, tgt_tokens, [int(i) for i in indices])
