"""Continuous batching: a beam search whose sentences join and leave between two steps.

The searches of transformer_nmt.decode.search take a batch, decode it until its last
sentence ends, and only then take the next: as sentences finish, the batch's rows empty
while other sentences wait. The `Engine` instead holds a set of rows, `beam` per
sentence, each at its own position (decode/row_cache.py): a step advances every row by one
token, the sentences that end leave, and sentences added since (`add`, encoded on
arrival) join before the next step. Its caller keeps it full.

Each sentence gets exactly the search of transformer_nmt.decode.beam's loop with
`TopK` (greedy search is beam 1): the same rules, the same early stop, the same
hypotheses; only its rows share the model's products with other sentences' rows. Two
things differ in form, not in result: a sentence that joins has `beam` rows from its
first step, all but one empty (log P -inf, never chosen), so that every sentence has the
same number of rows and its beams share its encoder-decoder keys and values; and the
step and length penalty are each sentence's own.

What it does not do (`serves` says; those go through the searches as before): sampling,
forced prefixes, terminology constraints, no-repeat n-grams, and models without
rows of their own (ensembles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.beam import TopK, best_first, best_possible_scores
from transformer_nmt.decode.probe import install_probe
from transformer_nmt.decode.row_cache import new_row_cache
from transformer_nmt.decode.search_base import (Hypothesis, SpecialIds, length_penalty,
                                                max_lengths, next_token_log_probs,
                                                source_lengths)
from transformer_nmt.decode.search_features import FeatureTrack, probe_layer
from transformer_nmt.decode.step_rules import ForceEos, Step
from transformer_nmt.model.transformer import Transformer


def serves(model: Any, cfg: DecodeConfig, prefixes: bool = False,
           constraints: bool = False) -> bool:
    """Whether the engine can decode with `model` and `cfg` (with prefixes or
    constraints when asked): beam search or greedy, nothing that needs the whole batch
    in lockstep."""
    return (isinstance(model, Transformer) and not cfg.sampling and not cfg.no_repeat_ngram
            and not cfg.min_len and not prefixes and not constraints)


@dataclass
class _Sentence:
    """A sentence being searched: who asked for it and what it has found."""

    ticket: Hashable
    found: list[tuple[bool, Hypothesis]]


class Engine:
    """Beam search (width cfg.beam; 1 is greedy) over sentences that join and leave
    between steps, on `model` (a Transformer, its rows in a RowCache, decode/row_cache.py)."""

    def __init__(self, model: Any, cfg: DecodeConfig, special: SpecialIds = SpecialIds(),
                 max_len_limit: int | None = None, features: bool = False) -> None:
        """features: each hypothesis gets Hypothesis.features, what the confidence needs."""
        self.model, self.cfg, self.special = model, cfg, special
        self.max_len_limit = max_len_limit
        self.k = cfg.beam
        self._selection = TopK()
        self._force_eos = ForceEos(special.eos)
        self._cache = new_row_cache(model, self.k)
        self._sentences: list[_Sentence] = []
        device = next(model.parameters()).device
        # Per sentence: its maximum output length, tokens generated so far, the log P
        # of its open prefixes (-inf for an empty row) and its nbest-th finished score.
        self._limits = torch.zeros(0, dtype=torch.long, device=device)  # (sentences,)
        self._steps = torch.zeros(0, dtype=torch.long, device=device)  # (sentences,)
        self._scores = torch.zeros(0, self.k, device=device)  # (sentences, k)
        self._nbest_scores = torch.zeros(0, device=device)  # (sentences,)
        # Per row (sentences * k): BOS, the tokens so far, room for the rest.
        self._tokens = torch.zeros(0, 2, dtype=torch.long, device=device)
        self._probe = install_probe(self._cache, probe_layer(len(model.decoder_layers))) \
            if features else None
        self._track = FeatureTrack(torch.zeros(0, dtype=torch.long, device=device)) \
            if features else None

    @property
    def rows(self) -> int:
        """Rows decoded at the next step: beam per sentence present."""
        return len(self._sentences) * self.k

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
        self._sentences += [_Sentence(ticket, []) for ticket in tickets]
        self._limits = torch.cat([self._limits, limits])
        self._steps = torch.cat([self._steps, self._steps.new_zeros(new)])
        first = torch.full((new, self.k), float("-inf"), device=device)
        first[:, 0] = 0.0  # one empty prefix per sentence; the other rows are empty
        self._scores = torch.cat([self._scores, first])
        self._nbest_scores = torch.cat([self._nbest_scores,
                                        torch.full((new,), float("-inf"), device=device)])
        width = max(self._tokens.size(1), int(limits.max()) + 2)
        tokens = torch.full((new * self.k, width), self.special.bos, dtype=torch.long,
                            device=device)
        self._tokens = torch.cat([_widen(self._tokens, width, self.special.pad), tokens])

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Advance every row by one token; the sentences that end leave, each with its
        cfg.nbest best hypotheses, best first."""
        if not self._sentences:
            return []
        k, n = self.k, len(self._sentences)
        row_steps = self._steps.repeat_interleave(k)  # (rows,)
        rows = torch.arange(n * k, device=row_steps.device)
        self._cache.start_step(row_steps)
        out = self.model.decode(self._tokens[rows, row_steps].unsqueeze(1), None, self._cache)
        log_probs = next_token_log_probs(out.logits[:, 0], self.special)  # (rows, vocab)
        if self._track is not None:
            self._track.observe(log_probs, self._probe.weights)
        self._force_eos(log_probs, Step(0, self._tokens, rows, k,
                                        (self._limits == self._steps).repeat_interleave(k)))
        ranked = self._selection.rank(self._scores, log_probs, k, k)
        is_eos = ranked.tokens.eq(self.special.eos)
        done = self._limits.le(self._steps)
        self._finish_hypotheses(ranked, is_eos, done, log_probs)

        # The first k candidates not ending in EOS stay open; EOS ones sort last.
        rank = torch.arange(2 * k, device=is_eos.device) + is_eos * (2 * k)  # (n, 2k)
        keep_rank = rank.topk(k, dim=1, largest=False).indices  # (n, k)
        scores = ranked.scores.gather(1, keep_rank)  # (n, k)
        next_beam = ranked.beams.gather(1, keep_rank)
        next_token = ranked.tokens.gather(1, keep_rank)
        done |= self._nbest_scores >= best_possible_scores(scores, self._steps + 1,
                                                           self._limits, self.cfg.alpha)
        done |= scores.isinf().all(dim=1)

        ended = [(sentence.ticket, self._best(sentence))
                 for sentence, over in zip(self._sentences, done.tolist()) if over]
        keep = (~done).nonzero().squeeze(1)  # (n_next,)
        next_rows = ((keep * k).unsqueeze(1) + next_beam[keep]).view(-1)  # (n_next * k,)
        if self._track is not None:
            self._track.advance(next_rows, log_probs[next_rows, next_token[keep].view(-1)])
        self._scores = scores[keep]
        self._keep(keep, next_rows, n)
        written = torch.arange(next_rows.numel(), device=next_rows.device)
        self._tokens[written, self._steps.repeat_interleave(k) + 1] = next_token[keep].view(-1)
        self._steps += 1
        return ended

    @torch.inference_mode()
    def drop(self, tickets: set[Hashable]) -> None:
        """The sentences with these tickets leave without a result (their request went
        away)."""
        stay = [i for i, sentence in enumerate(self._sentences) if sentence.ticket not in tickets]
        if len(stay) == len(self._sentences):
            return
        keep = torch.tensor(stay, dtype=torch.long, device=self._limits.device)
        rows = ((keep * self.k).unsqueeze(1) + torch.arange(self.k, device=keep.device)).view(-1)
        if self._track is not None:
            self._track.keep(rows)
        self._scores = self._scores[keep]
        self._keep(keep, rows, len(self._sentences))

    def _finish_hypotheses(self, ranked: Any, is_eos: Tensor, done: Tensor,
                           log_probs: Tensor) -> None:
        """EOS within the first k ranks finishes a hypothesis; a sentence with k finished
        ones is done (marked in `done` (n,), in place). log_probs (rows, vocab): this
        step's."""
        k = self.k
        finishing = is_eos[:, :k] & ranked.scores[:, :k].isfinite()  # (n, k)
        if not finishing.any():
            return
        # The penalty in double, then float32, as the searches divide by a Python float.
        penalty = length_penalty((self._steps + 1).double(), self.cfg.alpha).float()
        normalized = ranked.scores[:, :k] / penalty.unsqueeze(1)
        pairs = finishing.nonzero()  # (finishing, 2): sentence, rank
        ending_rows = pairs[:, 0] * k + ranked.beams[pairs[:, 0], pairs[:, 1]]
        gathered = [None] * pairs.size(0) if self._track is None else self._track.ended(
            ending_rows, log_probs[ending_rows, self.special.eos], self._steps[pairs[:, 0]] + 1)
        for (i, rank), row, features in zip(pairs.tolist(), ending_rows.tolist(), gathered):
            step = int(self._steps[i])
            found = self._sentences[i].found
            found.append((True, Hypothesis(self._tokens[row, 1: step + 1].tolist(),
                                           float(normalized[i, rank]),
                                           float(ranked.scores[i, rank]), features=features)))
            if len(found) >= self.cfg.nbest:
                found.sort(key=best_first)  # stable, as the searches sort
                self._nbest_scores[i] = found[self.cfg.nbest - 1][1].score
            if len(found) >= k:
                done[i] = True

    def _best(self, sentence: _Sentence) -> list[Hypothesis]:
        return [hyp for _, hyp in sorted(sentence.found, key=best_first)][: self.cfg.nbest]

    def _keep(self, keep: Tensor, rows: Tensor, present: int) -> None:
        """Go on with sentences `keep` (of `present`) and their rows `rows`."""
        self._sentences = [self._sentences[i] for i in keep.tolist()]
        self._limits, self._steps = self._limits[keep], self._steps[keep]
        self._nbest_scores = self._nbest_scores[keep]
        self._tokens = self._tokens[rows]
        if self._sentences:
            width = int(self._limits.max()) + 2
            self._tokens = self._tokens[:, :width]
        self._cache.keep(rows, keep if keep.numel() < present else None)


def _widen(tokens: Tensor, width: int, fill: int) -> Tensor:
    """tokens (rows, w) with columns of `fill` added up to `width`."""
    if tokens.size(1) >= width:
        return tokens
    return torch.cat([tokens, tokens.new_full((tokens.size(0), width - tokens.size(1)), fill)],
                     dim=1)

