"""A fixed set of batch shapes, for training steps that are compiled or captured per shape.

A compiled step (torch.compile with static shapes, CUDA graphs) is built once for every
(sentences, source length, target length) it meets, and token-budget batches of exact
lengths meet a new one at almost every step. `BatchShapes` rounds each side's length up
to a geometric grid of lengths and fills every batch with empty rows up to the sentences
that the budget allows at its length, so that a batch's shape follows from its two
lengths and an epoch of WMT-like data meets a few dozen shapes, for some padding. The
same recipe as
MLPerf's and NVIDIA's Transformer training: few shapes, full token budgets.

An empty row is a source of one EOS, a decoder input of one BOS and an output of padding
only: it costs the products, is never counted in the loss, and keeps a key for every
query, so that attention never softmaxes over nothing (which would make NaNs that a
zero loss weight does not cancel in the backward pass).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID_RATIO = 1.25
"""Each length of the grid is about this factor above the one before it."""
GRID_MULTIPLE = 8
"""Every length of the grid is a multiple of this (tensor cores work in multiples of 8)."""


def length_grid(longest: int, ratio: float = GRID_RATIO, multiple: int = GRID_MULTIPLE
                ) -> np.ndarray:
    """Increasing lengths, multiples of `multiple`, each about `ratio` times the one before
    (at least `multiple` more), from `multiple` up to the first that reaches `longest`."""
    lengths = [multiple]
    while lengths[-1] < longest:
        step = max(multiple, round(lengths[-1] * (ratio - 1) / multiple) * multiple)
        lengths.append(lengths[-1] + step)
    return np.asarray(lengths, dtype=np.int64)


@dataclass(frozen=True)
class BatchShapes:
    """The shapes batches may take under a budget of `max_tokens` tokens per side."""

    grid: tuple[int, ...]
    """The lengths a side may be padded to, increasing."""
    max_tokens: int
    """Most tokens per side of a batch, its padding and empty rows counted."""

    @classmethod
    def for_lengths(cls, longest: int, max_tokens: int) -> "BatchShapes":
        """The default grid up to a side of `longest` tokens (specials included)."""
        return cls(tuple(int(n) for n in length_grid(longest)), max_tokens)

    def padded(self, lengths):
        """`lengths` (an int or an int array, specials included) rounded up to the grid."""
        grid = np.asarray(self.grid)
        index = np.searchsorted(grid, lengths)
        if np.any(index >= len(grid)):
            raise ValueError(f"a length above the grid's longest, {grid[-1]}")
        return grid[index] if isinstance(index, np.ndarray) else int(grid[index])

    def rows(self, src_len: int, tgt_len: int) -> int:
        """Sentences in a batch whose padded sides are `src_len` and `tgt_len`: as many as
        the budget holds at the longer side, at least one."""
        return max(self.max_tokens // max(src_len, tgt_len), 1)

    def signature(self) -> str:
        """A short text that differs between two different sets of shapes (for a sampler's
        state, whose batches must be cut anew when the shapes change)."""
        return f"{self.max_tokens}:{','.join(map(str, self.grid))}"
