"""Scoring given translations: log P(Y | X) of each target sentence under a model, per
sentence and per token, for reranking n-best lists and filtering corpora.

The numbers are the searches' own (transformer_nmt.decode.search.searches): the same
log-probabilities, EOS included, and the same GNMT length normalization, so that scoring
a translation that beam search found gives back the score it reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Iterable, Iterator

import torch

from transformer_nmt.data.text import normalize
from transformer_nmt.decode.text.batches import buffers, length_batches, run_in_order
from transformer_nmt.decode.search.base import length_penalty
from transformer_nmt.decode.search.teacher_forced import teacher_forced
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError


@dataclass
class PairScore:
    """How likely the model finds one target sentence given its source."""

    tokens: list[int]
    """The target's subword token ids, without BOS and EOS."""
    token_scores: list[float]
    """log P of each token given the source and the tokens before it, EOS last."""
    log_prob: float
    """log P(Y | X): the sum of token_scores."""
    score: float
    """log_prob / lp(Y), the GNMT length penalty with the translator's alpha, as beam
    search reports it (alpha 0: log_prob)."""


def score_ids(translator: Translator, sources: list[list[int]], targets: list[list[int]]
              ) -> list[PairScore]:
    """Scores of target token ids given source token ids (both without EOS), batched by
    source length as the translator batches translations; results in input order."""
    special, alpha = translator.special, translator.options.decode.alpha

    def score_batch(batch: list[int]) -> list[PairScore]:
        src = translator.source_tensor([sources[i] for i in batch])  # (batch, longest + 1)
        owners = torch.arange(len(batch), device=src.device)
        scores, _ = teacher_forced(translator.model, src, owners,
                                   [targets[i] for i in batch], special)
        return [PairScore(targets[index], token_scores, sum(token_scores), float(
                    sum(token_scores) / length_penalty(len(token_scores), alpha)))
                for index, token_scores in zip(batch, scores)]

    batches = length_batches([len(source) for source in sources], range(len(sources)),
                             translator.budget)
    found = run_in_order(batches, score_batch)
    return [found[index] for index in range(len(sources))]


def score_lines(translator: Translator, sources: Iterable[str], targets: Iterable[str],
                source_name: str = "source", target_name: str = "target",
                buffer_size: int = TranslatorOptions.buffer_size) -> Iterator[PairScore]:
    """Scores of each target line as a translation of its source line, in order; raw
    text on both sides, normalized and split into subwords with the model's vocabulary.

    UserError when the two differ in length or a target line is too long for the model's
    positions (it cannot be scored whole); a source line too long is cut, with a warning,
    as for translation.
    """
    def pairs() -> Iterator[tuple[str, str]]:
        for line, (source, target) in enumerate(zip_longest(sources, targets), start=1):
            if source is None or target is None:
                shorter = source_name if source is None else target_name
                raise UserError(f"{shorter} has fewer lines than the other side ({line - 1}); "
                                "give one target line per source line")
            yield source, target

    first_line = 0
    for buffer in buffers(pairs(), buffer_size):
        yield from _score_buffer(translator, buffer, first_line, target_name)
        first_line += len(buffer)


def _score_buffer(translator: Translator, pairs: list[tuple[str, str]], first_line: int,
                  target_name: str) -> list[PairScore]:
    sources = translator.source_ids([source for source, _ in pairs],
                                    numbers=list(range(first_line, first_line + len(pairs))))
    targets = translator.vocab.target.encode_batch([normalize(target) for _, target in pairs])
    for offset, target in enumerate(targets):
        if len(target) > translator.max_len_limit:
            raise UserError(f"{target_name} line {first_line + offset + 1} has {len(target)} "
                            f"subword tokens, more than the {translator.max_len_limit} this "
                            "model's positions hold; shorten or leave out that pair")
    return score_ids(translator, sources, targets)
