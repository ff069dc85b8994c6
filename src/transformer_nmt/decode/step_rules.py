"""What every search imposes on each step's log-probabilities besides the model: EOS at
a sentence's maximum length, an optional forced target prefix (its tokens only, scored
by the model, then free search; the maximum length grows to fit it), and an optional ban
on repeating an n-gram. Greedy, beam, sampling and constrained search share them."""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig


def _force_eos(log_probs: Tensor, at_limit: Tensor, eos: int) -> None:
    """At a row's maximum length only EOS may follow: every other token gets -inf (in place)."""
    if at_limit.any():
        eos_scores = log_probs[at_limit, eos]
        log_probs[at_limit] = float("-inf")
        log_probs[at_limit, eos] = eos_scores


def _ban_repeated_ngrams(log_probs: Tensor, history: Tensor, n: int) -> None:
    """-inf (in place) for every token that would repeat an n-gram of its row's history
    (rows, length), BOS first: the tokens that followed an earlier occurrence of the
    last n - 1 tokens (fairseq's and CTranslate2's no_repeat_ngram_size)."""
    length = history.size(1)
    if length < n:
        return
    windows = history.unfold(1, n, 1)  # (rows, length - n + 1, n) every n-gram so far
    context = history[:, length - n + 1:].unsqueeze(1)  # (rows, 1, n - 1) the last n - 1
    repeats = windows[:, :, :-1].eq(context).all(dim=2)  # (rows, length - n + 1)
    # Non-repeating windows point at BOS, which is banned anyway.
    banned = torch.where(repeats, windows[:, :, -1], history[:, :1])
    log_probs.scatter_(1, banned, float("-inf"))


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


class StepRules:
    """What a search imposes on each step's log-probabilities besides the model's: EOS
    at the maximum length, a forced target prefix, no repeated n-grams."""

    def __init__(self, cfg: DecodeConfig, eos: int, prefixes: Tensor | None) -> None:
        self.no_repeat_ngram, self.eos = cfg.no_repeat_ngram, eos
        self.prefixes = prefixes  # (sentences, longest prefix) or None

    def apply(self, log_probs: Tensor, tokens: Tensor, step: int, width: int,
              at_limit: Tensor) -> None:
        """Restrict log_probs (sentences * width, vocab), in place, for rows whose
        tokens (sentences * width, BOS + ...) are known up to `step`; at_limit (rows,)
        marks rows at their maximum length."""
        forced = None
        if self.prefixes is not None and step < self.prefixes.size(1):
            wanted = self.prefixes[:, step].repeat_interleave(width)  # (rows,)
            rows = wanted.ge(0).nonzero().squeeze(1)
            # Read before any ban: the forced token keeps the model's log-probability.
            forced = rows, wanted[rows], log_probs[rows, wanted[rows]]
        if self.no_repeat_ngram:
            _ban_repeated_ngrams(log_probs, tokens[:, : step + 1], self.no_repeat_ngram)
        _force_eos(log_probs, at_limit, self.eos)
        if forced is not None:
            rows, wanted_tokens, scores = forced
            log_probs[rows] = float("-inf")
            log_probs[rows, wanted_tokens] = scores

    def keep(self, sentences: Tensor) -> None:
        """Only sentences `sentences` (kept,) go on."""
        if self.prefixes is not None:
            self.prefixes = self.prefixes[sentences]


def fit_prefixes(limits: Tensor, prefixes: Tensor | None) -> Tensor:
    """limits (batch,) raised where needed so that each prefix fits."""
    if prefixes is None:
        return limits
    return torch.maximum(limits, prefixes.ge(0).sum(1))
