"""What a calibrated model's confidence needs from a translation, gathered while the search
makes it (`FeatureTrack`), so that no second decoder pass is needed afterwards.

transformer_nmt.decode.confidence defines the features on one teacher-forced pass over the
chosen output. Four of them come from the model's states: the mean and the lowest log P of
the output's tokens, the mean entropy of the distributions they were chosen from, and the
share of source tokens that decoder layer ATTENTION_LAYER's encoder-decoder attention left
unattended. A search computes every one of those distributions and attentions on its way
to the output; the track sums them per open row, follows the rows as beams move and
sentences leave, and hands each finished hypothesis its four numbers. They equal the
teacher-forced pass's up to float rounding (tests/test_search_features.py); the pass cost a
fifth of the small model's translation time (bench/RESULTS.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

ATTENTION_LAYER = -2
"""The decoder layer whose encoder-decoder attention is read, for word alignments
(transformer_nmt.decode.search.attach_details) and for the confidence's coverage: the
penultimate, whose attention aligns with the source words best (Garg et al. 2019). A
decoder of one layer reads that one (`probe_layer`)."""
ATTENDED = 0.5
"""Attention a source token must receive, summed over the output's tokens, to count as
attended (each output token spreads 1 over the source)."""


def probe_layer(layers: int) -> int:
    """The index of ATTENTION_LAYER in a decoder of `layers` layers."""
    return max(layers + ATTENTION_LAYER, 0)


class FeatureTrack:
    """Per open row of a search: the sum and the lowest of its tokens' log P, the sum of the
    entropies they were chosen from, and the attention each source position received.

    A step calls `observe` with the model's distributions before any step rule restricts
    them, `ended` for the rows whose hypotheses finish with EOS at that step, and
    `advance` with the rows that go on and the log P of the tokens they add.
    """

    def __init__(self, source_tokens: Tensor) -> None:
        """source_tokens (rows,): each row's source length without EOS."""
        rows, device = source_tokens.numel(), source_tokens.device
        self.source_tokens = source_tokens
        self.log_prob_sum = torch.zeros(rows, device=device)
        self.lowest = torch.full((rows,), float("inf"), device=device)
        self.entropy_sum = torch.zeros(rows, device=device)
        self.received = torch.zeros(rows, 0, device=device)  # (rows, src_len)
        self._entropy = self._received_now = None

    def add_rows(self, source_tokens: Tensor) -> None:
        """Rows of new sentences (source_tokens as in the constructor) after the present
        ones, with nothing decoded yet."""
        new = source_tokens.numel()
        self.source_tokens = torch.cat([self.source_tokens, source_tokens])
        self.log_prob_sum = torch.cat([self.log_prob_sum, self.log_prob_sum.new_zeros(new)])
        self.lowest = torch.cat([self.lowest, self.lowest.new_full((new,), float("inf"))])
        self.entropy_sum = torch.cat([self.entropy_sum, self.entropy_sum.new_zeros(new)])
        self.received = torch.cat([self.received,
                                   self.received.new_zeros(new, self.received.size(1))])

    def observe(self, log_probs: Tensor, attention: Tensor) -> None:
        """This step's distributions, log_probs (rows, vocab) as the model gives them (PAD
        and BOS at -inf), and the probed layer's attention (rows, heads, 1, src_len)."""
        # -inf clamped: a token of probability 0 adds 0 × (finite) = 0, as in the teacher-
        # forced pass (and faster than torch.special.entr here).
        probs = log_probs.exp()
        self._entropy = -probs.mul_(log_probs.clamp(min=-1e4)).sum(1)  # (rows,)
        now = attention.float().mean(1)[:, 0]  # (rows, src_len)
        self._received_now = _fit(self.received, now.size(1)) + now

    def ended(self, rows: Tensor, eos_log_probs: Tensor, steps: Tensor) -> list[list[float]]:
        """mean_log_prob, min_log_prob, mean_entropy, unattended_source of each hypothesis
        that ends at this step, extending row rows[i] with EOS of log P eos_log_probs[i],
        steps[i] tokens long with EOS (all (hypotheses,))."""
        lengths = steps.to(self.log_prob_sum.dtype)
        mean_log_prob = (self.log_prob_sum[rows] + eos_log_probs) / lengths
        lowest = torch.minimum(self.lowest[rows], eos_log_probs)
        mean_entropy = (self.entropy_sum[rows] + self._entropy[rows]) / lengths
        received = self._received_now[rows]  # (hypotheses, src_len)
        sources = self.source_tokens[rows]  # (hypotheses,)
        real = torch.arange(received.size(1), device=rows.device) < sources.unsqueeze(1)
        unattended = (received.lt(ATTENDED) & real).sum(1) / sources.clamp(min=1)
        return torch.stack([mean_log_prob, lowest, mean_entropy, unattended.float()],
                           dim=1).tolist()

    def advance(self, rows: Tensor | None, log_probs: Tensor) -> None:
        """Go on with rows `rows` (next_rows,) of this step (None: every row, in place),
        each extended by a token of log P log_probs (next_rows,)."""
        self.received, entropy = self._received_now, self._entropy
        if rows is not None:
            self.keep(rows)
            entropy = entropy[rows]
        self.log_prob_sum = self.log_prob_sum + log_probs
        self.lowest = torch.minimum(self.lowest, log_probs)
        self.entropy_sum = self.entropy_sum + entropy

    def keep(self, rows: Tensor) -> None:
        """Go on with rows `rows` (new_rows,), adding nothing (between steps: sentences
        withdrawn)."""
        self.source_tokens, self.log_prob_sum = self.source_tokens[rows], self.log_prob_sum[rows]
        self.lowest, self.entropy_sum = self.lowest[rows], self.entropy_sum[rows]
        self.received = self.received[rows]


def _fit(received: Tensor, length: int) -> Tensor:
    """received (rows, n) cut or zero-padded to (rows, length): the sources present may
    have grown or shrunk since the last step (a continuous batch's)."""
    if received.size(1) >= length:
        return received[:, :length]
    return F.pad(received, (0, length - received.size(1)))
