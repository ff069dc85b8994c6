"""Continuous batching: a beam search whose sentences join and leave between two steps.

The searches of transformer_nmt.decode.search.searches take a batch, decode it until its
last sentence ends, and only then take the next: as sentences finish, the batch's rows empty
while other sentences wait. The `Engine` instead holds a set of rows, `beam` per sentence,
each at its own position (decode/continuous/row_cache.py): a step advances every row by one
token, the sentences that end leave, and sentences added since (`add`, encoded on arrival)
join before the next step. Its caller keeps it full.

Each sentence gets exactly the search of transformer_nmt.decode.search.beam's loop with
`TopK` (greedy search is beam 1): the same step (transformer_nmt.decode.search.step, which
both take), the same rules, the same early stop, the same hypotheses; only its rows share
the model's products with other sentences' rows. Two things differ in form, not in result: a
sentence that joins has `beam` rows from its first step, all but one empty (log P -inf,
never chosen), so that every sentence has the same number of rows and its beams share its
encoder-decoder keys and values; and the step and length penalty are each sentence's own.

What it does not do (`serves` says; those go through the searches as before): sampling,
forced prefixes, terminology constraints, no-repeat n-grams, and models without
rows of their own (ensembles).
"""

from __future__ import annotations

from typing import Any, Hashable

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.attention.probe import install_probe
from transformer_nmt.decode.search.ranking import TopK
from transformer_nmt.decode.continuous.row_cache import new_row_cache
from transformer_nmt.decode.search.base import (Hypothesis, SpecialIds, max_lengths,
                                                source_lengths)
from transformer_nmt.decode.search.stepper import next_token_log_probs
from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.decode.quality.feature_track import FeatureTrack
from transformer_nmt.decode.search.step import SearchStep
from transformer_nmt.decode.search.step_rules import ForceEos, Step
from transformer_nmt.model.transformer import Transformer


def serves(model: Any, cfg: DecodeConfig, prefixes: bool = False,
           constraints: bool = False) -> bool:
    """Whether the engine can decode with `model` and `cfg` (with prefixes or
    constraints when asked): beam search or greedy, nothing that needs the whole batch
    in lockstep."""
    return (isinstance(model, Transformer) and not cfg.sampling and not cfg.no_repeat_ngram
            and not cfg.min_len and not prefixes and not constraints)


class Engine:
    """Beam search (width cfg.beam; 1 is greedy) over sentences that join and leave between
    steps, on `model` (a Transformer, its rows in a RowCache,
    decode/continuous/row_cache.py)."""

    def __init__(self, model: Any, cfg: DecodeConfig, special: SpecialIds = SpecialIds(),
                 max_len_limit: int | None = None, features: bool = False) -> None:
        """features: each hypothesis gets Hypothesis.features, what the confidence needs."""
        self.model, self.cfg, self.special = model, cfg, special
        self.max_len_limit = max_len_limit
        self.k = cfg.beam
        self._force_eos = ForceEos(special.eos)
        self._cache = new_row_cache(model, self.k)
        device = next(model.parameters()).device
        self._probe = install_probe(self._cache, probe_layer(len(model.decoder_layers))) \
            if features else None
        self._track = FeatureTrack(torch.zeros(0, dtype=torch.long, device=device)) \
            if features else None
        # Every search's step; its `finished` holds each sentence's hypotheses by slot.
        self._search = SearchStep(TopK(), self.k, cfg.nbest, cfg.alpha, special.eos, device,
                                  track=self._track)
        self._finished = self._search.finished
        self._tickets: dict[int, Hashable] = {}  # by slot
        # Per sentence: its maximum output length, tokens generated so far and the log P
        # of its open prefixes (-inf for an empty row).
        self._limits = torch.zeros(0, dtype=torch.long, device=device)  # (sentences,)
        self._steps = torch.zeros(0, dtype=torch.long, device=device)  # (sentences,)
        self._scores = torch.zeros(0, self.k, device=device)  # (sentences, k)
        # Per row (sentences * k): BOS, the tokens so far, room for the rest.
        self._tokens = torch.zeros(0, 2, dtype=torch.long, device=device)

    @property
    def rows(self) -> int:
        """Rows decoded at the next step: beam per sentence present."""
        return self._finished.slots.numel() * self.k

    @torch.inference_mode()
    def add(self, src: Tensor, tickets: list[Hashable]) -> None:
        """Sentences src (new, src_len) (ids, EOS, PAD) join at the next step, encoded
        now; each is named by its ticket in what `step` returns."""
        device = self._limits.device
        src = src.to(device)
        new = src.size(0)
        limits = max_lengths(src, self.cfg, self.special.pad, self.max_len_limit)
        self._cache.join(self.model, self.model.encode(src))
        if self._track is not None:
            self._track.add_rows(
                source_lengths(src, self.special.pad).repeat_interleave(self.k))
        self._tickets.update(zip(self._finished.open(new), tickets))
        self._limits = torch.cat([self._limits, limits])
        self._steps = torch.cat([self._steps, self._steps.new_zeros(new)])
        first = torch.full((new, self.k), float("-inf"), device=device)
        first[:, 0] = 0.0  # one empty prefix per sentence; the other rows are empty
        self._scores = torch.cat([self._scores, first])
        width = max(self._tokens.size(1), int(limits.max()) + 2)
        tokens = torch.full((new * self.k, width), self.special.bos, dtype=torch.long,
                            device=device)
        self._tokens = torch.cat([_widen(self._tokens, width, self.special.pad), tokens])

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Advance every row by one token; the sentences that end leave, each with its
        cfg.nbest best hypotheses, best first."""
        if not self.rows:
            return []
        k, n = self.k, self.rows // self.k
        row_steps = self._steps.repeat_interleave(k)  # (rows,)
        rows = torch.arange(n * k, device=row_steps.device)
        self._cache.start_step(row_steps)
        out = self.model.decode(self._tokens[rows, row_steps].unsqueeze(1), None, self._cache)
        log_probs = next_token_log_probs(out.logits[:, 0], self.special)  # (rows, vocab)
        if self._track is not None:
            self._track.observe(log_probs, self._probe.weights)
        self._force_eos(log_probs, Step(0, self._tokens, rows, k,
                                        (self._limits == self._steps).repeat_interleave(k)))
        outcome = self._search.take(log_probs, self._scores, k, self._steps, self._limits,
                                    self._tokens)
        ended = [(self._tickets.pop(slot), self._finished.close(slot)) for slot in outcome.ended]
        self._scores = outcome.scores
        self._keep(outcome.keep, rows if outcome.rows is None else outcome.rows, n)
        written = torch.arange(outcome.tokens.numel(), device=rows.device)
        self._tokens[written, self._steps.repeat_interleave(k) + 1] = outcome.tokens
        self._steps += 1
        return ended

    @torch.inference_mode()
    def drop(self, tickets: set[Hashable]) -> None:
        """The sentences with these tickets leave without a result (their request went
        away)."""
        slots = self._finished.slots.tolist()
        stay = [i for i, slot in enumerate(slots) if self._tickets[slot] not in tickets]
        if len(stay) == len(slots):
            return
        for slot in slots:
            if self._tickets[slot] in tickets:
                del self._tickets[slot]
                self._finished.close(slot)
        keep = torch.tensor(stay, dtype=torch.long, device=self._limits.device)
        rows = ((keep * self.k).unsqueeze(1) + torch.arange(self.k, device=keep.device)).view(-1)
        if self._track is not None:
            self._track.keep(rows)
        self._scores = self._scores[keep]
        self._finished.keep(keep)
        self._keep(keep, rows, len(slots))

    def _keep(self, keep: Tensor | None, rows: Tensor, present: int) -> None:
        """Go on with sentences `keep` (of `present`; None: all) and their rows `rows`
        (the step has kept them in its `finished`)."""
        if keep is not None:
            self._limits, self._steps = self._limits[keep], self._steps[keep]
        self._tokens = self._tokens[rows]
        if self._limits.numel():
            width = int(self._limits.max()) + 2
            self._tokens = self._tokens[:, :width]
        self._cache.keep(rows, keep if keep is not None and keep.numel() < present else None)


def _widen(tokens: Tensor, width: int, fill: int) -> Tensor:
    """tokens (rows, w) with columns of `fill` added up to `width`."""
    if tokens.size(1) >= width:
        return tokens
    return torch.cat([tokens, tokens.new_full((tokens.size(0), width - tokens.size(1)), fill)],
                     dim=1)

