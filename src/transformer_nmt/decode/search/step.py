"""One step of every search, written once: rank the extensions of the open prefixes, finish
those that end with EOS, decide which sentences are done, keep the rest.

Every search runs transformer_nmt.decode.search.beam's lockstep loop (beam search, greedy
search as beam 1, sampling, constrained search): it asks the model for a step's
log-probabilities and applies the step rules (transformer_nmt.decode.search.step_rules);
then `SearchStep.take` does the rest. How extensions rank is the selection's
(transformer_nmt.decode.search.ranking); the definitions are
transformer_nmt.decode.search.searches's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_nmt.decode.search.ranking import Ranked, Selection
from transformer_nmt.decode.search.base import Hypothesis, length_penalty
from transformer_nmt.decode.search.feature_track import FeatureTrack


def best_possible_scores(open_log_probs: Tensor, length: int, limits: Tensor,
                         alpha: float) -> Tensor:
    """Upper bound (sentences,) on the score of any future hypothesis of each sentence.

    open_log_probs (sentences, beam) are the open hypotheses' log P after `length` tokens.
    A completion Y' of one of them has log P' <= log P <= 0 and length+1 <= |Y'| <=
    limit+1, so score(Y') = log P' / lp(|Y'|) <= log P / lp(|Y'|) <= log P / max lp,
    where max lp over that range sits at its upper end when alpha >= 0 and at its lower
    end when alpha < 0 (dividing a non-positive number by a larger lp raises it).
    """
    best = open_log_probs.max(dim=1).values  # (sentences,)
    longest = length_penalty(limits + 1, alpha)
    shortest = length_penalty(torch.full_like(limits, length) + 1, alpha)
    return best / torch.maximum(longest, shortest)


def best_first(pair: tuple[bool, Hypothesis]) -> tuple[bool, float]:
    """Sort key of (complete, hypothesis) pairs: complete ones first, then by score."""
    complete, hypothesis = pair
    return not complete, -hypothesis.score


class Finished:
    """The finished hypotheses of every sentence searched, by slot (a number each sentence
    gets when it opens), and per open sentence its slot and its nbest-th best score."""

    def __init__(self, nbest: int, device: torch.device) -> None:
        self.nbest = nbest
        self.found: dict[int, list[tuple[bool, Hypothesis]]] = {}
        self.slots = torch.zeros(0, dtype=torch.long, device=device)  # (open,)
        self.nbest_scores = torch.zeros(0, device=device)  # (open,) -inf until nbest found
        self._next_slot = 0

    def open(self, count: int) -> list[int]:
        """Slots for `count` new sentences, open after the present ones."""
        slots = list(range(self._next_slot, self._next_slot + count))
        self._next_slot += count
        self.found.update({slot: [] for slot in slots})
        self.slots = torch.cat([self.slots, torch.tensor(slots, dtype=torch.long,
                                                         device=self.slots.device)])
        self.nbest_scores = torch.cat([self.nbest_scores, self.nbest_scores.new_full(
            (count,), float("-inf"))])
        return slots

    def add(self, entries: list[tuple[int, int, bool, Hypothesis]]) -> list[int]:
        """Record hypotheses, each (open sentence, its slot, complete, hypothesis), in
        the order found; returns how many each one's sentence has then."""
        counts, nbest_scores = [], {}
        for sentence, slot, complete, hypothesis in entries:
            found = self.found[slot]
            found.append((complete, hypothesis))
            if len(found) >= self.nbest:
                found.sort(key=best_first)  # stable: among equals the one found first stays ahead
                nbest_scores[sentence] = found[self.nbest - 1][1].score
            counts.append(len(found))
        if nbest_scores:
            where = torch.tensor(list(nbest_scores), device=self.slots.device)
            self.nbest_scores[where] = torch.tensor(list(nbest_scores.values()),
                                                    device=self.slots.device)
        return counts

    def keep(self, sentences: Tensor) -> None:
        """Go on with open sentences `sentences` (n_next,)."""
        self.slots, self.nbest_scores = self.slots[sentences], self.nbest_scores[sentences]

    def close(self, slot: int) -> list[Hypothesis]:
        """The nbest best hypotheses of sentence `slot`, best first; it is forgotten."""
        return [hyp for _, hyp in sorted(self.found.pop(slot), key=best_first)][: self.nbest]


@dataclass
class Outcome:
    """What a step decided, for its loop to carry out."""

    ended: list[int]
    """The slots of the sentences done at this step (`Finished.close` gives their result)."""
    keep: Tensor | None
    """(n_next,) the open sentences that go on; None: all of them."""
    rows: Tensor | None
    """(n_next * k,) the row of this step that each next row extends; None: each row
    extends itself (one row per sentence, none left)."""
    tokens: Tensor
    """(n_next * k,) the token each next row adds."""
    scores: Tensor
    """(n_next, k) log P of each next row's prefix."""


class SearchStep:
    """The step of a search of width k over sentences of open prefixes (`take`), with the
    finished hypotheses it found (`finished`)."""

    def __init__(self, selection: Selection, k: int, nbest: int, alpha: float, eos: int,
                 device: torch.device, early_stop: bool = True,
                 track: FeatureTrack | None = None) -> None:
        """early_stop: a sentence is done once no open hypothesis can beat its nbest-th
        finished one (a bound that holds for `TopK` only; with k = 1 a finished
        hypothesis ends its sentence anyway). track: gather each hypothesis' features."""
        self.selection, self.k, self.alpha, self.eos = selection, k, alpha, eos
        self.early_stop, self.track = early_stop, track
        self.finished = Finished(nbest, device)

    def take(self, log_probs: Tensor, scores: Tensor, width: int, step: int,
             limits: Tensor, tokens: Tensor) -> Outcome:
        """One step of the open sentences (n,): log_probs (n * width, vocab) the next
        tokens' after the step rules, scores (n, width) the open prefixes' log P, step
        the tokens each has, limits (n,) their maximum lengths,
        tokens (n * width, BOS + tokens + room) the prefixes."""
        k, n = self.k, scores.size(0)
        ranked = self.selection.rank(scores, log_probs, width, k)
        is_eos = ranked.tokens.eq(self.eos)  # (n, extensions)
        done = limits.le(step)  # (n,)
        # EOS within the first k ranks finishes a hypothesis.
        finishing = is_eos[:, :k] & ranked.scores[:, :k].isfinite()  # (n, k)
        if k == 1:  # its one finished hypothesis ends a sentence: known without a sync
            done |= finishing[:, 0]
        elif finishing.any():
            self._finish(ranked, finishing, done, log_probs, width, step, tokens)
        keep_rank, open_scores, beams, next_tokens = _open_extensions(ranked, is_eos, k)
        if self.early_stop and k > 1:
            done |= self.finished.nbest_scores >= best_possible_scores(
                open_scores, step + 1, limits, self.alpha)
        done |= open_scores.isinf().all(dim=1)

        ended = self.finished.slots[done].tolist()
        if k == 1 and ended:
            self._finish(ranked, finishing, done, log_probs, width, step, tokens)
        keep = (~done).nonzero().squeeze(1) if ended else None  # (n_next,)
        self.selection.keep(keep, keep_rank if keep is None else keep_rank[keep])
        if keep is not None:
            self.finished.keep(keep)
            open_scores, beams, next_tokens = open_scores[keep], beams[keep], next_tokens[keep]
        rows = self._next_rows(keep, n, width, beams)
        next_tokens = next_tokens.view(-1)
        if self.track is not None:
            chosen = log_probs.gather(1, next_tokens.unsqueeze(1)).squeeze(1) if rows is None \
                else log_probs[rows, next_tokens]
            self.track.advance(rows, chosen)
        return Outcome(ended, keep, rows, next_tokens, open_scores)

    def _next_rows(self, keep: Tensor | None, n: int, width: int, beams: Tensor
                   ) -> Tensor | None:
        """(n_next * k,) the rows of this step that the next extends: row `beam` of each
        kept sentence (width per sentence now), beams (n_next, k); None when every row
        extends itself (greedy search and sampling while no sentence ends), which spares
        the loop a copy of its rows."""
        if keep is None:
            if width == self.k == 1:
                return None
            first = torch.arange(n, device=beams.device) * width
        else:
            first = keep * width
        return (first.unsqueeze(1) + beams).view(-1)

    def _finish(self, ranked: Ranked, finishing: Tensor, done: Tensor, log_probs: Tensor,
                width: int, step: int, tokens: Tensor) -> None:
        """Record the hypotheses `finishing` (n, k) of the ranked extensions; a sentence
        with k finished ones is done (marked in `done` (n,), in place)."""
        sentence, rank = finishing.nonzero().unbind(1)  # (hypotheses,) each
        scores = ranked.scores[sentence, rank]
        lengths = torch.full_like(sentence, step + 1)  # tokens with EOS
        normalized = scores / length_penalty(step + 1, self.alpha)
        rows = sentence * width + ranked.beams[sentence, rank]  # (hypotheses,)
        features = [None] * rows.numel() if self.track is None else self.track.ended(
            rows, log_probs[rows, self.eos], lengths)
        complete = torch.ones_like(sentence) if ranked.complete is None else \
            ranked.complete[sentence, rank].long()
        facts = torch.stack([sentence, self.finished.slots[sentence], lengths, complete]).T
        numbers = torch.stack([normalized, scores]).T  # (hypotheses, 2)
        entries = [(i, slot, bool(whole), Hypothesis(row[1: length], normal, score, features=f))
                   for (i, slot, length, whole), row, (normal, score), f in zip(
                       facts.tolist(), tokens[rows].tolist(), numbers.tolist(), features)]
        counts = self.finished.add(entries)
        ended = [i for (i, *_), count in zip(entries, counts) if count >= self.k]
        if ended:
            done[torch.tensor(ended, device=done.device)] = True


def _open_extensions(ranked: Ranked, is_eos: Tensor, k: int
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The first k extensions of each sentence that do not end in EOS (EOS ones sort
    last): their ranks, scores, beams and tokens, each (n, k)."""
    n, extensions = ranked.scores.shape
    if extensions == k:  # no choice: each goes on unless its sentence is done
        ranks = torch.arange(k, device=is_eos.device).expand(n, k)
        return ranks, ranked.scores, ranked.beams, ranked.tokens
    rank = torch.arange(extensions, device=is_eos.device) + is_eos * extensions  # (n, ext)
    keep_rank = rank.topk(k, dim=1, largest=False).indices  # (n, k)
    return (keep_rank, ranked.scores.gather(1, keep_rank), ranked.beams.gather(1, keep_rank),
            ranked.tokens.gather(1, keep_rank))
