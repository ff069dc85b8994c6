"""Token-budget batches of pairs of similar length, sharded per DDP rank, resumable.

Section 5.1 of the paper: "Sentence pairs were batched together by approximate sequence
length. Each training batch contained a set of sentence pairs containing approximately
25000 source tokens and 25000 target tokens." Here the budget is a hard limit per side,
padding included, and a sequence's length counts its specials: the source gets EOS, the
target BOS (decoder input) or EOS (decoder output), so each side is its ids + 1.

The batches are formed once (from the seed) and only their order changes per epoch; they
are kept as a permutation of the pairs plus batch boundaries into it, 4-8 bytes a pair,
never as Python lists.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator, Sequence

import numpy as np

from transformer_nmt.data.shapes import BatchShapes
from transformer_nmt.errors import UserError


class TokenBatchSampler:
    """Batches of pair indices with at most `max_tokens` tokens per side, padding counted.

    Pairs are sorted by the length of their longer side, then source, then target length,
    with a seeded random order among equal lengths, and cut greedily into the largest
    batches that fit. Sorting by the longer side first packs both sides at once: the
    batches hold far more real tokens than when sorting by target length first, which
    leaves the source side padding many of its slots. A pair longer than the budget on
    its own gets a batch of its own (and one warning), so no pair is ever dropped. Every epoch shuffles the batch order with (seed, epoch); `shuffle=False`
    keeps them sorted by length (for validation and translation).

    Rank `rank` of `world_size` takes batches[rank::world_size] of the epoch's order. So
    that all DDP ranks take the same number of steps, every rank yields exactly
    ceil(n_batches / world_size) items, the missing ones as an empty list `[]`, which the
    trainer treats as a batch of zero weight.

    With `length_multiple` m > 1 every side is padded to a multiple of m tokens (collate
    pads alike), and the budget counts those padded lengths: a batch's shape then comes
    from a few dozen rather than hundreds, which is what the runtime asks for where every
    new shape costs (runtime.length_multiple). With `shapes` (data/shapes.py) every side
    is padded to a length of its grid instead, and the budget counts the empty rows that
    fill each batch up to the sentences its shape holds: a compiled step meets each shape
    once.

    Iteration starts at the current position and advances it; `set_epoch` with a new
    epoch rewinds it. `state_dict` / `load_state_dict` save and restore (epoch,
    position), so a resumed run yields exactly the batches that were left, as long as
    the batches are cut at the same max_tokens. If batches are prefetched (a DataLoader
    with workers), save the number of batches the trainer consumed as 'position', not
    this sampler's own count.
    """

    def __init__(self, src_lengths: Sequence[int] | np.ndarray,
                 tgt_lengths: Sequence[int] | np.ndarray, max_tokens: int, *, seed: int,
                 shuffle: bool = True, rank: int = 0, world_size: int = 1,
                 length_multiple: int = 1, shapes: BatchShapes | None = None) -> None:
        if length_multiple < 1:
            raise ValueError(f"length_multiple must be positive, not {length_multiple}")
        if shapes is not None and (length_multiple > 1 or shapes.max_tokens != max_tokens):
            raise ValueError("shapes pad lengths to their own grid, under their own budget")
        # int32 halves the transient memory of sorting 36M pairs; costs are int64 below.
        src = np.asarray(src_lengths, dtype=np.int32) + 1  # + EOS
        tgt = np.asarray(tgt_lengths, dtype=np.int32) + 1  # + BOS or EOS
        if src.shape != tgt.shape or src.ndim != 1:
            raise ValueError(f"length arrays differ: {src.shape} vs {tgt.shape}")
        if max_tokens < 1:
            raise UserError(f"max_tokens must be positive, not {max_tokens}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of size {world_size}")
        self.max_tokens = max_tokens
        self.length_multiple = length_multiple
        self.shapes = shapes
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.num_pairs = len(src)
        index_dtype = np.int32 if len(src) < 2**31 else np.int64
        real_tokens = int(src.sum(dtype=np.int64) + tgt.sum(dtype=np.int64))
        if length_multiple > 1:  # from here on a length is what a batch computes
            src, tgt = round_up(src, length_multiple), round_up(tgt, length_multiple)
        if shapes is not None:
            src, tgt = shapes.padded(src), shapes.padded(tgt)
        self._order = self._sort(src, tgt, seed).astype(index_dtype)  # (n,) pair indices
        sorted_src, sorted_tgt = src[self._order], tgt[self._order]
        self._bounds = self._cut(sorted_src, sorted_tgt, max_tokens)  # (n_batches + 1,)
        self._padding_efficiency = self._efficiency(sorted_src, sorted_tgt, self._bounds,
                                                    real_tokens, shapes)
        del sorted_src, sorted_tgt
        self.epoch = 0
        self.position = 0
        """Items this rank has yielded in the current epoch."""
        self._offset = 0
        # Where this rank's share of the epoch starts among the epoch's batches; not 0 only
        # after resuming with a different world size.
        too_long = int(np.sum(np.maximum(src, tgt) > max_tokens))
        if too_long:
            warnings.warn(
                f"{too_long} pair(s) have more than max_tokens={max_tokens} tokens on a side; "
                "each gets a batch of its own", stacklevel=2)

    @staticmethod
    def _sort(src: np.ndarray, tgt: np.ndarray, seed: int) -> np.ndarray:
        """Pair indices by (longer side, source, target) length, ties in a random order
        fixed by `seed`."""
        shuffled = np.random.default_rng(seed).permutation(len(src))
        src, tgt = src[shuffled], tgt[shuffled]
        return shuffled[np.lexsort((tgt, src, np.maximum(src, tgt)))]  # lexsort is stable

    @staticmethod
    def _cut(src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> np.ndarray:
        """Boundaries of greedy batches over length-sorted pairs: a batch of k pairs costs
        k * (longest side in it) per side and must stay within max_tokens."""
        bounds = [0]
        start, n = 0, len(src)
        while start < n:
            # Pairs are sorted by their longer side, so no more than
            # max_tokens // (longer side of the first pair) of them can fit.
            window = min(n - start, max(max_tokens // max(int(src[start]), int(tgt[start])), 1))
            longest = np.maximum(np.maximum.accumulate(src[start:start + window]),
                                 np.maximum.accumulate(tgt[start:start + window]))
            cost = longest * np.arange(1, window + 1, dtype=np.int64)
            fits = int(np.searchsorted(cost > max_tokens, True))  # cost is non-decreasing
            start += max(fits, 1)
            bounds.append(start)
        return np.asarray(bounds, dtype=np.int64)

    @staticmethod
    def _efficiency(src: np.ndarray, tgt: np.ndarray, bounds: np.ndarray,
                    real_tokens: int, shapes: BatchShapes | None = None) -> float:
        """`real_tokens` / the padded tokens of batches `bounds` over length-sorted pairs
        (with `shapes`, each batch's empty rows counted as padding too)."""
        if len(src) == 0:
            return 1.0
        starts, sizes = bounds[:-1], np.diff(bounds)
        longest_src = np.maximum.reduceat(src, starts).astype(np.int64)
        longest_tgt = np.maximum.reduceat(tgt, starts).astype(np.int64)
        if shapes is not None:  # (batches,) the sentences each batch's shape holds
            sizes = np.maximum(shapes.max_tokens // np.maximum(longest_src, longest_tgt), 1)
        padded = (longest_src * sizes).sum() + (longest_tgt * sizes).sum()
        return float(real_tokens / padded)

    @property
    def num_batches(self) -> int:
        """Batches of one epoch over all ranks."""
        return len(self._bounds) - 1

    def __len__(self) -> int:
        """Items each rank yields over the current epoch (ceil(n_batches / world_size)
        normally), the padding empty batches included."""
        return math.ceil((self.num_batches - self._offset) / self.world_size)

    @property
    def consumed(self) -> int:
        """Batches of the current epoch taken so far by all ranks together."""
        return min(self._offset + self.position * self.world_size, self.num_batches)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its first batch, unless it is already the current one
        (so that calling it after `load_state_dict` keeps the restored position)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.position = 0
            self._offset = 0

    def _epoch_batches(self) -> np.ndarray:
        """This rank's batch numbers for the current epoch, in order."""
        order = np.arange(self.num_batches)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(self.num_batches)
        return order[self._offset:][self.rank::self.world_size]

    def batch(self, number: int) -> list[int]:
        """Pair indices of batch `number` (0 <= number < num_batches)."""
        return self._order[self._bounds[number]:self._bounds[number + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        mine = self._epoch_batches()
        total = len(self)
        while self.position < total:
            index = self.position
            self.position += 1
            yield self.batch(int(mine[index])) if index < len(mine) else []

    def state_dict(self) -> dict:
        """Where this sampler stands: epoch and position, plus what they depend on."""
        return {"epoch": self.epoch, "position": self.position, "offset": self._offset,
                "world_size": self.world_size, "seed": self.seed,
                "max_tokens": self.max_tokens, "num_pairs": self.num_pairs,
                "num_batches": self.num_batches, "length_multiple": self.length_multiple,
                "shapes": self.shapes.signature() if self.shapes else ""}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`, saved from a sampler over the same pairs and seed.

        With another world size, the batches every rank had consumed are skipped and the
        rest of the epoch is shared among the new ranks. With another max_tokens (a
        process's share of a global batch changes with the world size) or length
        multiple (a run resumed in another precision) or shapes the batches are cut anew, and the
        epoch goes on from the same fraction of the new batches: about the data that was
        left, though not exactly the same pairs.
        """
        for key in ("seed", "num_pairs"):
            if key in state and state[key] != getattr(self, key):
                raise UserError(
                    f"cannot resume the batch order: {key} was {state[key]}, now "
                    f"{getattr(self, key)}; resume with the same data and seed")
        self.epoch = int(state["epoch"])
        world_size = state.get("world_size", self.world_size)
        consumed = int(state.get("offset", 0)) + int(state["position"]) * world_size
        shapes = self.shapes.signature() if self.shapes else ""
        if (state.get("max_tokens", self.max_tokens) != self.max_tokens
                or state.get("length_multiple", 1) != self.length_multiple
                or state.get("shapes", "") != shapes):
            fraction = min(consumed / max(int(state["num_batches"]), 1), 1.0)
            self._offset = round(fraction * self.num_batches)
            self.position = 0
        elif world_size == self.world_size:
            self.position = int(state["position"])
            self._offset = int(state.get("offset", 0))
        else:
            self._offset = min(consumed, self.num_batches)
            self.position = 0

    def padding_efficiency(self) -> float:
        """Real tokens / padded tokens over all batches and both sides (1.0 if no pairs)."""
        return self._padding_efficiency


def round_up(lengths, multiple: int):
    """`lengths` (an int or an array of them) rounded up to a multiple of `multiple`."""
    return -(-lengths // multiple) * multiple
