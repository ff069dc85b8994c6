"""The confidence's features, each defined once: what each one is, for a translation Y of a
source X, whichever path computes it. transformer_nmt.decode.quality.confidence weighs them.

Four come from the model's states (STATE_FEATURES). At every step of Y (its tokens, then
EOS) the model gives the log P of Y's token, the entropy of the distribution that token was
chosen from (`token_entropy`), and the encoder-decoder attention of the probed decoder layer
(transformer_nmt.decode.attention.probe.ATTENTION_LAYER), averaged over heads
(`heads_averaged`). Over Y's steps these add up (`StepSums`), and the sums reduce to
(`StepSums.features`):

- mean_log_prob, min_log_prob: the mean and the lowest log P of Y's tokens (EOS included);
- mean_entropy: the mean entropy of the next-token distributions along Y;
- unattended_source: the share of X's tokens (EOS excluded) that received less than
  ATTENDED attention in total.

Two paths compute the sums: one teacher-forced pass over a chosen output
(`StepSums.over_positions`, confidence.sentence_features, on which `nmt calibrate` fits)
and the search while it decodes (`StepSums.then`, feature_track.FeatureTrack); both
reduce them here. The other four features are functions of Y's and X's token ids
(`all_features`):

- log_length_ratio and its square: log(|Y| / |X|), tokens with EOS, so that outputs far
  longer or shorter than usual can both lower the confidence;
- repeated_bigrams: the share of Y's token bigrams that already occurred in Y;
- copied_tokens: the share of Y's tokens that are tokens of X.

A calibration stored in a model file holds coefficients for these definitions: changing one
means bumping CALIBRATION_VERSION in the same change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

FEATURES = ("mean_log_prob", "min_log_prob", "mean_entropy", "log_length_ratio",
            "log_length_ratio_squared", "unattended_source", "repeated_bigrams",
            "copied_tokens")
"""The features, in the order of a calibration's coefficients."""
STATE_FEATURES = ("mean_log_prob", "min_log_prob", "mean_entropy", "unattended_source")
"""The features that come from the model's states, in the order of `StepSums.features`'
columns and of Hypothesis.features."""
CALIBRATION_VERSION = 1
"""Bumped when the features or their definitions change: a model calibrated for others
must be calibrated again."""
ATTENDED = 0.5
"""Attention a source token must receive, summed over the output's tokens, to count as
attended (each output token spreads 1 over the source)."""


def token_entropy(log_probs: Tensor) -> Tensor:
    """The entropy (...,) of each next-token distribution of log_probs (..., vocab), as the
    model gives them (PAD and BOS at -inf)."""
    # -inf clamped: a token of probability 0 adds 0 × (finite) = 0 (and measured faster
    # than torch.special.entr).
    return -log_probs.exp().mul_(log_probs.clamp(min=-1e4)).sum(-1)


def heads_averaged(attention: Tensor) -> Tensor:
    """float32 (rows, tgt_len, src_len): the probed layer's attention (rows, heads,
    tgt_len, src_len) averaged over its heads."""
    return attention.float().mean(1)


@dataclass
class StepSums:
    """Per row, what the steps of its hypothesis so far add up to."""

    log_prob: Tensor
    """(rows,) the sum of the log P of its tokens."""
    lowest: Tensor
    """(rows,) the lowest log P of its tokens (inf before the first)."""
    entropy: Tensor
    """(rows,) the sum of the entropies of the distributions its tokens were chosen from."""
    received: Tensor
    """(rows, src_len) the head-averaged attention each source position received."""

    @classmethod
    def empty(cls, rows: int, src_len: int, device: torch.device) -> "StepSums":
        """The sums of `rows` hypotheses with no step yet."""
        return cls(torch.zeros(rows, device=device),
                   torch.full((rows,), float("inf"), device=device),
                   torch.zeros(rows, device=device), torch.zeros(rows, src_len, device=device))

    @classmethod
    def over_positions(cls, token_log_probs: Tensor, entropy: Tensor, attention: Tensor,
                       steps: Sequence[int], source_tokens: Sequence[int]) -> "StepSums":
        """The sums over the first steps[i] positions of row i of one pass's per-position
        quantities: the log P of each position's token and the entropy of its distribution
        (rows, positions), the head-averaged attention (rows, positions, src_len), this
        counted only over the first source_tokens[i] source positions."""
        rows = []
        for row, (length, sources) in enumerate(zip(steps, source_tokens)):
            # Each row's own slices, so that every row sums as it would alone.
            taken = token_log_probs[row, :length]  # (length,)
            received = attention[row, :length, :sources].sum(0)  # (sources,)
            rows.append((taken.sum(), taken.min(), entropy[row, :length].sum(),
                         F.pad(received, (0, attention.size(2) - sources))))
        log_prob, lowest, entropy_sum, received = zip(*rows)
        return cls(torch.stack(log_prob), torch.stack(lowest), torch.stack(entropy_sum),
                   torch.stack(received))

    def then(self, log_prob: Tensor, entropy: Tensor, attention: Tensor) -> "StepSums":
        """These sums after one more step, whose token has log P log_prob (rows,), chosen
        from a distribution of entropy `entropy` (rows,), whose head-averaged attention
        is attention (rows, src_len)."""
        return StepSums(self.log_prob + log_prob, torch.minimum(self.lowest, log_prob),
                        self.entropy + entropy, self.received + attention)

    def select(self, rows: Tensor) -> "StepSums":
        """The sums of rows `rows` (new_rows,), in that order."""
        return StepSums(self.log_prob[rows], self.lowest[rows], self.entropy[rows],
                        self.received[rows])

    def joined(self, other: "StepSums") -> "StepSums":
        """These rows, then `other`'s (of as many source positions)."""
        return StepSums(torch.cat([self.log_prob, other.log_prob]),
                        torch.cat([self.lowest, other.lowest]),
                        torch.cat([self.entropy, other.entropy]),
                        torch.cat([self.received, other.received]))

    def features(self, steps: Tensor, source_tokens: Tensor) -> Tensor:
        """(rows, 4) STATE_FEATURES of hypotheses with these sums, steps (rows,) steps long
        (tokens with EOS), of sources source_tokens (rows,) tokens long without EOS (the
        source positions beyond count for nothing)."""
        lengths = steps.to(self.log_prob.dtype)
        positions = torch.arange(self.received.size(1), device=source_tokens.device)
        real = positions < source_tokens.unsqueeze(1)  # (rows, src_len)
        unattended = (self.received.lt(ATTENDED) & real).sum(1) / source_tokens.clamp(min=1)
        return torch.stack([self.log_prob / lengths, self.lowest, self.entropy / lengths,
                            unattended.float()], dim=1)


def all_features(from_states: Sequence[float], tokens: Sequence[int],
                 source: Sequence[int]) -> list[float]:
    """FEATURES of output `tokens` (without EOS) as a translation of source ids `source`
    (without EOS), given its STATE_FEATURES `from_states`."""
    mean_log_prob, min_log_prob, mean_entropy, unattended_source = from_states
    ratio = math.log((len(tokens) + 1) / (len(source) + 1))
    return [mean_log_prob, min_log_prob, mean_entropy, ratio, ratio * ratio,
            unattended_source, repeated_bigrams(tokens), copied_tokens(tokens, source)]


def repeated_bigrams(tokens: Sequence[int]) -> float:
    """The share of the bigrams of `tokens` that already occurred earlier in them."""
    bigrams = list(zip(tokens, tokens[1:]))
    seen: set[tuple[int, int]] = set()
    repeated = 0
    for bigram in bigrams:
        repeated += bigram in seen
        seen.add(bigram)
    return repeated / len(bigrams) if bigrams else 0.0


def copied_tokens(tokens: Sequence[int], source: Sequence[int]) -> float:
    """The share of `tokens` that are also tokens of `source`."""
    own = set(source)
    return sum(token in own for token in tokens) / len(tokens) if tokens else 0.0
