"""A list of sentences through the continuous-batching engine (transformer_nmt.decode.engine),
as `nmt translate` and `nmt evaluate` decode a file: the engine kept full, sentences
joining as others end, so that a batch's ragged end never decodes half-empty rows."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from transformer_nmt.decode.engine import Engine
from transformer_nmt.decode.search_base import Hypothesis


def join_size(max_sentences: int) -> int:
    """Sentences that join at once when many wait: a quarter of the engine's sentences.

    Each join encodes the joining sentences together and extends the caches; joining a
    few at a time keeps the engine nearly full without paying that every step.
    """
    return max(max_sentences // 4, 1)


def decode_continuously(engine: Engine, sources: list[list[int]],
                        source_tensor: Callable[[list[list[int]]], Tensor],
                        max_sentences: int) -> list[list[Hypothesis]]:
    """The engine's hypotheses for every sentence of `sources` (token ids, no EOS; best
    given longest first, for the least padding), at most max_sentences at once.
    source_tensor pads a list of sources into the model's input (Translator.source_tensor)."""
    found: list[list[Hypothesis] | None] = [None] * len(sources)
    waiting = 0  # sources[waiting:] have not joined yet
    while waiting < len(sources) or engine.rows:
        room = max_sentences - engine.rows // engine.k
        left = len(sources) - waiting
        if left and room >= min(join_size(max_sentences), left):
            end = waiting + min(room, left)
            engine.add(source_tensor(sources[waiting:end]), list(range(waiting, end)))
            waiting = end
        for ticket, hypotheses in engine.step():
            found[ticket] = hypotheses
    return found  # type: ignore[return-value]  # every sentence ends by its maximum length
