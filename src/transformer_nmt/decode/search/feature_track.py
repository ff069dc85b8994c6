"""What a calibrated model's confidence needs from a translation, gathered while the search
makes it (`FeatureTrack`), so that no second decoder pass is needed afterwards.

transformer_nmt.decode.search.features defines the features; four of them
(STATE_FEATURES) come from the model's states: the log P of each step's token, the entropy
of the distribution it was chosen from, and the attention of the probed decoder layer
(transformer_nmt.decode.attention.probe.ATTENTION_LAYER).
A search computes every one of those distributions and attentions on its way to the
output; the track adds them up per open row (`StepSums`), follows the rows as beams move
and sentences leave, and hands each finished hypothesis its four numbers. They equal the
teacher-forced pass's up to float rounding (tests/test_decode_search_feature_track.py),
without the pass's cost.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_nmt.decode.search.features import StepSums, heads_averaged, token_entropy

class FeatureTrack:
    """Per open row of a search: what its tokens so far add up to (`StepSums`).

    A step calls `observe` with the model's distributions before any step rule restricts
    them, `ended` for the rows whose hypotheses finish with EOS at that step, and
    `advance` with the rows that go on and the log P of the tokens they add.
    """

    def __init__(self, source_tokens: Tensor) -> None:
        """source_tokens (rows,): each row's source length without EOS."""
        self.source_tokens = source_tokens
        self.sums = StepSums.empty(source_tokens.numel(), 0, source_tokens.device)
        self._entropy = self._attention = None  # this step's (rows,) and (rows, src_len)

    def add_rows(self, source_tokens: Tensor) -> None:
        """Rows of new sentences (source_tokens as in the constructor) after the present
        ones, with nothing decoded yet."""
        new = StepSums.empty(source_tokens.numel(), self.sums.received.size(1),
                             source_tokens.device)
        self.source_tokens = torch.cat([self.source_tokens, source_tokens])
        self.sums = self.sums.joined(new)

    def observe(self, log_probs: Tensor, attention: Tensor) -> None:
        """This step's distributions, log_probs (rows, vocab) as the model gives them (PAD
        and BOS at -inf), and the probed layer's attention (rows, heads, 1, src_len)."""
        self._entropy = token_entropy(log_probs)  # (rows,)
        self._attention = heads_averaged(attention)[:, 0]  # (rows, src_len)
        self.sums = replace(self.sums, received=_fit(self.sums.received,
                                                     self._attention.size(1)))

    def ended(self, rows: Tensor, eos_log_probs: Tensor, steps: Tensor) -> list[list[float]]:
        """STATE_FEATURES of each hypothesis that ends at this step, extending row rows[i]
        with EOS of log P eos_log_probs[i], steps[i] tokens long with EOS (all
        (hypotheses,))."""
        sums = self.sums.select(rows).then(eos_log_probs, self._entropy[rows],
                                           self._attention[rows])
        return sums.features(steps, self.source_tokens[rows]).tolist()

    def advance(self, rows: Tensor | None, log_probs: Tensor) -> None:
        """Go on with rows `rows` (next_rows,) of this step (None: every row, in place),
        each extended by a token of log P log_probs (next_rows,)."""
        entropy, attention = self._entropy, self._attention
        if rows is not None:
            self.keep(rows)
            entropy, attention = entropy[rows], attention[rows]
        self.sums = self.sums.then(log_probs, entropy, attention)

    def keep(self, rows: Tensor) -> None:
        """Go on with rows `rows` (new_rows,), adding nothing (between steps: sentences
        withdrawn)."""
        self.source_tokens, self.sums = self.source_tokens[rows], self.sums.select(rows)


def _fit(received: Tensor, length: int) -> Tensor:
    """received (rows, n) cut or zero-padded to (rows, length): the sources present may
    have shrunk since the last step, as sentences end."""
    if received.size(1) >= length:
        return received[:, :length]
    return F.pad(received, (0, length - received.size(1)))
