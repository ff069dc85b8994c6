"""How a search ranks each step's extensions of its open prefixes: the `Selection`s that
the one step (transformer_nmt.decode.search.step) takes.

`TopK` is beam search's (the 2k likeliest extensions per sentence), `Likeliest` greedy
search's (the likeliest token per row: beam 1) and `Draw` sampling's (one drawn token per
row: beam 1, each sample a sentence of its own); constrained search's beam allocation is
transformer_nmt.decode.search.constrained's. A selection ranks; the step finishes and keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.selection import row_max, top_k


@dataclass
class Ranked:
    """A step's extensions of each of n sentences (at least k), in the order the
    selection prefers."""

    scores: Tensor
    """(n, extensions) log P of each extended prefix; -inf for none."""
    tokens: Tensor
    """(n, extensions) the token each adds."""
    beams: Tensor
    """(n, extensions) the row of its sentence (0 .. width - 1) each extends."""
    complete: Tensor | None = None
    """(n, extensions) whether the hypothesis meets every requirement, as finished ones
    rank first (None: every one does)."""


class Selection(Protocol):
    """How a search ranks each step's extensions, and what it keeps of them."""

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        """At least k extensions per sentence of the open prefixes, scored scores
        (n, width), by the next tokens' log_probs (n * width, vocab)."""

    def keep(self, sentences: Tensor | None, ranks: Tensor) -> None:
        """The search goes on with sentences `sentences` (n_next,) of the last `rank`
        (None: all of them), each with its extensions of ranks `ranks` (n_next, k) as its
        open prefixes."""


class TopK:
    """Plain beam search's selection: the 2k likeliest extensions."""

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        n, vocab = scores.size(0), log_probs.size(1)
        candidates = (scores.view(n * width, 1) + log_probs).view(n, width * vocab)
        if candidates.size(1) < 2 * k:  # a vocabulary smaller than the beam
            candidates = F.pad(candidates, (0, 2 * k - candidates.size(1)), value=float("-inf"))
        top_scores, top_index = top_k(candidates, 2 * k)  # (n, 2k), best first
        # Padding candidates (-inf, never kept alive) point at the sentence's last row.
        return Ranked(top_scores, top_index % vocab, (top_index // vocab).clamp(max=width - 1))

    def keep(self, sentences: Tensor | None, ranks: Tensor) -> None:
        """Nothing to keep: the loop holds the prefixes."""


def _one_per_row(scores: Tensor, chosen_log_probs: Tensor, tokens: Tensor) -> Ranked:
    """The one extension of each row (width 1): tokens (n,) of log P chosen_log_probs (n,)
    after prefixes scored scores (n, 1)."""
    return Ranked(scores + chosen_log_probs.unsqueeze(1), tokens.unsqueeze(1),
                  tokens.new_zeros(tokens.size(0), 1))


class Likeliest:
    """Greedy search's selection: the likeliest next token of each row. It ranks by the
    token's log P alone (not the sum with the prefix's, which may round two tokens
    equal), so beam 1 picks what argmax picks."""

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        best_log_prob, best = row_max(log_probs)  # (n,)
        return _one_per_row(scores, best_log_prob, best)

    def keep(self, sentences: Tensor | None, ranks: Tensor) -> None:
        """Nothing to keep: the loop holds the prefixes."""


def draw_tokens(log_probs: Tensor, uniforms: Tensor, cfg: DecodeConfig) -> Tensor:
    """One token per row of log_probs (rows, vocab), drawn by inverse transform with one
    uniform number (rows,) per row, from the distribution that cfg's temperature, top-k
    and top-p leave."""
    logits = log_probs / cfg.temperature
    if cfg.topk:
        values, index = logits.topk(min(cfg.topk, logits.size(1)), dim=1)  # best first
    else:
        values, index = logits.sort(dim=1, descending=True)
    probs = torch.softmax(values, dim=1)  # (rows, candidates)
    if cfg.topp < 1:
        # Keep the likeliest tokens until their mass reaches p (the first always).
        before = probs.cumsum(dim=1) - probs
        probs = probs.masked_fill(before >= cfg.topp, 0.0)
    cumulative = probs.cumsum(dim=1)  # (rows, candidates)
    target = uniforms.unsqueeze(1) * cumulative[:, -1:]
    pick = cumulative.lt(target).sum(dim=1).clamp(max=probs.size(1) - 1)  # (rows,)
    return index.gather(1, pick.unsqueeze(1)).squeeze(1)


class Draw:
    """Sampling's selection: each row's next token drawn (`draw_tokens`) with its own
    uniform number of the step, scored by the model's untempered log P."""

    def __init__(self, uniforms: Tensor, cfg: DecodeConfig) -> None:
        """uniforms (rows, longest + 1): each row's numbers, one per step."""
        self.uniforms, self.cfg = uniforms, cfg
        self.step = 0

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        drawn = draw_tokens(log_probs, self.uniforms[:, self.step], self.cfg)  # (n,)
        self.step += 1
        return _one_per_row(scores, log_probs.gather(1, drawn.unsqueeze(1)).squeeze(1), drawn)

    def keep(self, sentences: Tensor | None, ranks: Tensor) -> None:
        if sentences is not None:
            self.uniforms = self.uniforms[sentences]
