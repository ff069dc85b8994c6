"""The server's queue: every request's sentences wait here, cut into pieces (sentences of
one request, each with its job: transformer_nmt.decode.text.job), until the batcher
(serve/batcher.py) takes a batch of pieces of one call's settings for a slot to decode.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from transformer_nmt.decode.text.batches import BatchBudget
from transformer_nmt.decode.text.job import CallSettings, TranslationJob


@dataclass(eq=False)
class Piece:
    """Sentences of one request, all decoded by one slot."""

    job: TranslationJob
    """Its lines' settings, token ids, prefixes and constraints, and their numbers: each
    line's position in its request, which seeds its samples."""
    tokens: int
    """Its source tokens."""
    future: asyncio.Future
    arrived: float

    @property
    def key(self) -> CallSettings:
        """Its settings: pieces with equal ones share batches."""
        return self.job.settings

    @property
    def size(self) -> int:
        """Its lines."""
        return len(self.job.ids)

    @property
    def longest(self) -> int:
        """Source tokens of its longest line."""
        return max(len(ids) for ids in self.job.ids)


class Queue:
    """The pieces waiting, oldest first (used on the event loop only)."""

    def __init__(self) -> None:
        self._pieces: deque[Piece] = deque()

    def __bool__(self) -> bool:
        return bool(self._pieces)

    def put(self, pieces: list[Piece]) -> None:
        """`pieces` wait, after those already waiting."""
        self._pieces.extend(pieces)

    def take_all(self) -> list[Piece]:
        """Out of the queue: every piece."""
        pieces = list(self._pieces)
        self._pieces.clear()
        return pieces

    def drop_withdrawn(self) -> list[Piece]:
        """Out of the queue: the pieces whose request went away."""
        gone = [piece for piece in self._pieces if piece.future.done()]
        for piece in gone:
            self._pieces.remove(piece)
        return gone

    def oldest(self) -> Piece | None:
        """The oldest waiting piece."""
        return self._pieces[0] if self._pieces else None

    def waiting(self, key: CallSettings) -> list[Piece]:
        """The waiting pieces of settings `key`, oldest first (left in the queue)."""
        return [piece for piece in self._pieces if piece.key == key]

    def take_batch(self, budget: BatchBudget) -> list[Piece]:
        """Out of the queue: the oldest piece, then the pieces of its settings closest to
        its length, within `budget` (transformer_nmt.decode.text.batches, the rule
        offline batches follow)."""
        if not self._pieces:
            return []
        oldest = self._pieces[0]
        width = oldest.tokens / oldest.size
        batch, sentences, longest = [oldest], oldest.size, oldest.longest
        others = (piece for piece in list(self._pieces)[1:] if piece.key == oldest.key)
        for piece in sorted(others, key=lambda piece: abs(piece.tokens / piece.size - width)):
            if budget.admits(sentences + piece.size, max(longest, piece.longest)):
                batch.append(piece)
                sentences, longest = sentences + piece.size, max(longest, piece.longest)
        for piece in batch:
            self._pieces.remove(piece)
        return batch
