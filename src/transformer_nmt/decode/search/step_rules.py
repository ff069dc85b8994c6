"""What a search imposes on each step's log-probabilities besides the model: step
processors, small objects with one method that restrict the log-probabilities in place,
applied in order (fairseq2's generation step processors are the model).

Every search obeys `ForcePrefix` (an optional target prefix: its tokens only, scored by
the model, then free search; the maximum length grows to fit it), `NoRepeatNgram` (an
optional ban on repeating an n-gram), `MinLength` (an optional fewest tokens before EOS)
and `ForceEos` (EOS at a sentence's maximum length, which wins over the minimum);
constrained search puts its own before them (transformer_nmt.decode.search.constrained).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig


@dataclass
class Step:
    """What a step processor knows of the step being taken."""

    index: int
    """Tokens generated before this step (0: each row holds only BOS)."""
    tokens: Tensor
    """(rows, index + 1) each row's tokens so far, BOS first; rows = sentences * width."""
    sentences: Tensor
    """(sentences,) the batch index of each sentence still searched."""
    width: int
    """Rows (hypotheses) per sentence."""
    at_limit: Tensor
    """(rows,) True for rows at their maximum length."""
    forced: list[tuple[Tensor, Tensor, Tensor]] = field(default_factory=list)
    """Tokens forced at this step: (rows, tokens, their log-probabilities), see `force`."""

    def force(self, rows: Tensor, tokens: Tensor, log_probs: Tensor) -> None:
        """Rows `rows` (n,) must take tokens (n,), scored log_probs (n,), whatever the
        processors ban: written after every processor has run (`apply_processors`)."""
        self.forced.append((rows, tokens, log_probs))


class StepProcessor(Protocol):
    """One rule of a search's steps."""

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        """Restrict log_probs (rows, vocab) in place: -inf for the tokens banned."""


def apply_processors(processors: list[StepProcessor], log_probs: Tensor, step: Step) -> None:
    """Each processor in turn, in place; then the tokens forced at this step."""
    for processor in processors:
        processor(log_probs, step)
    for rows, tokens, scores in step.forced:
        log_probs[rows] = float("-inf")
        log_probs[rows, tokens] = scores


class ForceEos:
    """At a row's maximum length only EOS may follow."""

    def __init__(self, eos: int) -> None:
        self.eos = eos

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        if step.at_limit.any():
            eos_scores = log_probs[step.at_limit, self.eos]
            log_probs[step.at_limit] = float("-inf")
            log_probs[step.at_limit, self.eos] = eos_scores


class MinLength:
    """No EOS before an output has `tokens` tokens (fairseq's --min-len), except at a
    row's maximum length, which wins: `ForceEos` keeps the EOS score it finds there."""

    def __init__(self, eos: int, tokens: int) -> None:
        self.eos, self.tokens = eos, tokens

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        if step.index < self.tokens:
            log_probs[~step.at_limit, self.eos] = float("-inf")


class NoRepeatNgram:
    """No n-gram twice in one output: bans every token that followed an earlier
    occurrence of the row's last n - 1 tokens (fairseq's and CTranslate2's
    no_repeat_ngram_size)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        history, n = step.tokens, self.n  # (rows, length), BOS first
        length = history.size(1)
        if length < n:
            return
        windows = history.unfold(1, n, 1)  # (rows, length - n + 1, n) every n-gram so far
        context = history[:, length - n + 1:].unsqueeze(1)  # (rows, 1, n - 1) the last n - 1
        repeats = windows[:, :, :-1].eq(context).all(dim=2)  # (rows, length - n + 1)
        # Non-repeating windows point at BOS, which is banned anyway.
        banned = torch.where(repeats, windows[:, :, -1], history[:, :1])
        log_probs.scatter_(1, banned, float("-inf"))


class ForcePrefix:
    """Each output starts with its sentence's prefix: while a prefix lasts, its next token
    is forced, keeping the log-probability it has when this processor runs (before the
    shared bans: the model's) whatever the processors after it ban."""

    def __init__(self, prefixes: Tensor) -> None:
        self.prefixes = prefixes  # (batch, longest prefix), -1 after each prefix's end

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        if step.index >= self.prefixes.size(1):
            return
        wanted = self.prefixes[step.sentences, step.index].repeat_interleave(step.width)  # (rows,)
        rows = wanted.ge(0).nonzero().squeeze(1)
        step.force(rows, wanted[rows], log_probs[rows, wanted[rows]])


def prefix_tensor(prefixes: list[list[int]] | None, device: torch.device) -> Tensor | None:
    """(batch, longest prefix) token ids that the outputs must start with, -1 after each
    prefix's end; None when there is no prefix to force."""
    if not prefixes or not any(prefixes):
        return None
    forced = torch.full((len(prefixes), max(len(prefix) for prefix in prefixes)), -1,
                        dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        forced[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    return forced.to(device)


def step_processors(cfg: DecodeConfig, eos: int, prefixes: Tensor | None,
                    own: list[StepProcessor] | None = None) -> list[StepProcessor]:
    """The rules of a search, in the order they apply: its `own`, the forced prefix (when
    given), no repeated n-grams and the fewest tokens (when cfg asks), EOS at the maximum
    length."""
    processors: list[StepProcessor] = list(own or [])
    if prefixes is not None:
        processors.append(ForcePrefix(prefixes))
    if cfg.no_repeat_ngram:
        processors.append(NoRepeatNgram(cfg.no_repeat_ngram))
    if cfg.min_len:
        processors.append(MinLength(eos, cfg.min_len))
    processors.append(ForceEos(eos))
    return processors


def fit_prefixes(limits: Tensor, prefixes: Tensor | None) -> Tensor:
    """limits (batch,) raised where needed so that each prefix fits."""
    if prefixes is None:
        return limits
    return torch.maximum(limits, prefixes.ge(0).sum(1))
