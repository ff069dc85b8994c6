"""A search's step through the model: the next token's log-probabilities for a batch of
prefixes that grows one token per step (`Stepper`), from the model's logits
(`next_token_log_probs`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.decode.attention.kv_cache import step_cache
from transformer_nmt.decode.search.base import EncoderState, Seq2Seq, SpecialIds
from transformer_nmt.memory import release_free_memory


def next_token_log_probs(logits: Tensor, special: SpecialIds) -> Tensor:
    """float32 log-probabilities (rows, vocab) of next-token logits (rows, vocab), PAD and
    BOS at -inf: they are never generated."""
    # float32 even for a bf16 model: sums of log-probs over ~100 steps need the mantissa.
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    log_probs[:, special.pad] = float("-inf")
    log_probs[:, special.bos] = float("-inf")
    return log_probs


class Stepper:
    """Next-token log-probabilities for a batch of prefixes that grows one token per step.

    With `use_cache`, only the newest token is fed and the model's cache holds the past;
    without, the whole prefix is decoded every step (the reference the tests and the
    benchmark compare against).
    """

    def __init__(self, model: Seq2Seq, enc: EncoderState, use_cache: bool,
                 max_length: int, probe_layer: int | None = None) -> None:
        """probe_layer: a decoder layer whose encoder-decoder attention each step keeps in
        `probed` (a Transformer's only)."""
        self.model, self.enc = model, enc
        self.use_cache = use_cache
        self.cache, self.probe = step_cache(model, use_cache, max_length, probe_layer)
        self.probed: Tensor | None = None
        """(batch, heads, 1, src_len) the probed layer's attention at the last step."""
        # The encoder's working memory is free by now: hand it back before the caches
        # grow, or the allocator keeps it for the whole batch, part of a beam search's peak.
        release_free_memory()

    def log_probs(self, tokens: Tensor, step: int, special: SpecialIds) -> Tensor:
        """float32 (batch, vocab) log P(next | tokens[:, :step + 1]); PAD and BOS at -inf."""
        if not self.use_cache:
            out = self.model.decode(tokens[:, : step + 1], self.enc, self.cache)
        else:
            out = self.model.decode(tokens[:, step: step + 1], self.enc, self.cache)
        if self.probe is not None:
            self.probed = self.probe.weights[:, :, -1:]
        return next_token_log_probs(out.logits[:, -1], special)

    def reorder(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Continue with prefix rows `rows`; sentences: the encoder rows to keep if
        sentences left the batch, None if they all stay."""
        if self.cache is not None:
            self.cache.reorder(rows, sentences)
        if sentences is not None:
            self.enc = self.enc.select(sentences)
