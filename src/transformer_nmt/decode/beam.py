"""The beam search loop that plain and constrained beam search share, with the rule that
ranks each step's extensions pluggable (`Selection`): `TopK`, the likeliest ones, or
constrained search's dynamic beam allocation (transformer_nmt.decode.constrained).

Every step, the loop asks the model for the next token's log-probabilities, lets the
step processors restrict them (transformer_nmt.decode.step_rules), has the selection
rank 2k extensions per sentence, finishes the EOS ones within the first k ranks and
keeps the first k others open; the definitions are transformer_nmt.decode.search's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search_base import (Hypothesis, Seq2Seq, SpecialIds, Stepper,
                                                length_penalty, source_lengths)
from transformer_nmt.decode.search_features import FeatureTrack, probe_layer
from transformer_nmt.decode.selection import top_k
from transformer_nmt.decode.step_rules import Step, StepProcessor, apply_processors


@dataclass
class Ranked:
    """A step's 2k extensions of each of n sentences, in the order the selection prefers."""

    scores: Tensor
    """(n, 2k) log P of each extended prefix; -inf for none."""
    tokens: Tensor
    """(n, 2k) the token each adds."""
    beams: Tensor
    """(n, 2k) the row of its sentence (0 .. width - 1) each extends."""
    complete: Tensor | None = None
    """(n, 2k) whether the hypothesis meets every requirement, as finished ones rank
    first (None: every one does)."""


class Selection(Protocol):
    """How a beam search ranks each step's extensions, and what it keeps of them."""

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        """The 2k extensions per sentence of the open prefixes, scored scores (n, width),
        by the next tokens' log_probs (n * width, vocab)."""

    def keep(self, sentences: Tensor, ranks: Tensor) -> None:
        """The loop goes on with sentences `sentences` (n_next,) of the last `rank`, each
        with its extensions of ranks `ranks` (n_next, k) as its open prefixes."""


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

    def keep(self, sentences: Tensor, ranks: Tensor) -> None:
        """Nothing to keep: the loop holds the prefixes."""


def best_possible_scores(open_log_probs: Tensor, length: int | Tensor, limits: Tensor,
                         alpha: float) -> Tensor:
    """Upper bound (sentences,) on the score of any future hypothesis of each sentence.

    open_log_probs (sentences, beam) are the open hypotheses' log P after `length` tokens
    (one count for all, or each sentence's (sentences,)).
    A completion Y' of one of them has log P' <= log P <= 0 and length+1 <= |Y'| <=
    limit+1, so score(Y') = log P' / lp(|Y'|) <= log P / lp(|Y'|) <= log P / max lp,
    where max lp over that range sits at its upper end when alpha >= 0 and at its lower
    end when alpha < 0 (dividing a non-positive number by a larger lp raises it).
    """
    best = open_log_probs.max(dim=1).values  # (sentences,)
    longest = length_penalty(limits + 1, alpha)
    lengths = length if isinstance(length, Tensor) else torch.full_like(limits, length)
    shortest = length_penalty(lengths + 1, alpha)
    return best / torch.maximum(longest, shortest)


class _Finished:
    """Each sentence's finished hypotheses, and the score of its nbest-th best."""

    def __init__(self, batch: int, nbest: int, device: torch.device) -> None:
        self.nbest = nbest
        self.hypotheses: list[list[tuple[bool, Hypothesis]]] = [[] for _ in range(batch)]
        self.nbest_score = torch.full((batch,), float("-inf"), device=device)  # (active,)

    def add(self, sentence: int, row: int, complete: bool, hypothesis: Hypothesis) -> int:
        """Record a hypothesis of batch sentence `sentence`, active row `row`; returns how
        many that sentence has."""
        found = self.hypotheses[sentence]
        found.append((complete, hypothesis))
        if len(found) >= self.nbest:
            found.sort(key=best_first)  # stable: among equals the one found first stays ahead
            self.nbest_score[row] = found[self.nbest - 1][1].score
        return len(found)

    def best(self) -> list[list[Hypothesis]]:
        """Per sentence its nbest best hypotheses, best first."""
        return [[hyp for _, hyp in sorted(found, key=best_first)][: self.nbest]
                for found in self.hypotheses]


def best_first(pair: tuple[bool, Hypothesis]) -> tuple[bool, float]:
    """Sort key of (complete, hypothesis) pairs: complete ones first, then by score."""
    complete, hypothesis = pair
    return not complete, -hypothesis.score


@torch.inference_mode()
def beam_loop(model: Seq2Seq, src: Tensor, limits: Tensor, cfg: DecodeConfig,
              special: SpecialIds, processors: list[StepProcessor], selection: Selection,
              use_cache: bool = True, early_stop: bool = True,
              features: bool = False) -> list[list[Hypothesis]]:
    """Beam search of width cfg.beam for a batch of sources (batch, src_len) with maximum
    output lengths `limits` (batch,): per sentence its cfg.nbest best finished hypotheses
    (those meeting the selection's requirements first), best first. early_stop: stop a
    sentence once no open hypothesis can beat its nbest-th finished one (a bound that
    only holds for `TopK`). features: each hypothesis gets Hypothesis.features (the model
    a Transformer)."""
    k = cfg.beam
    batch, device = src.size(0), src.device
    # Every sentence starts with one empty prefix: step 0 decodes one row per sentence
    # (and computes the encoder-decoder keys/values once), later steps k rows.
    longest = int(limits.max())
    track = FeatureTrack(source_lengths(src, special.pad)) if features else None
    stepper = Stepper(model, model.encode(src), use_cache, longest + 1,
                      probe_layer(len(model.decoder_layers)) if features else None)
    width = 1  # rows per sentence in the current step
    # (active * width, BOS + tokens + EOS), row = sentence * width + beam
    tokens = torch.full((batch, longest + 2), special.bos, dtype=torch.long, device=device)
    scores = torch.zeros(batch, 1, device=device)  # (active, width) log P of each open prefix
    active = torch.arange(batch, device=device)  # batch index of each active sentence
    finished = _Finished(batch, cfg.nbest, device)
    step = 0
    while active.numel():
        n = active.numel()
        log_probs = stepper.log_probs(tokens, step, special)  # (n * width, vocab)
        if track is not None:
            track.observe(log_probs, stepper.probed)
        apply_processors(processors, log_probs, Step(
            step, tokens[:, : step + 1], active, width, limits.repeat_interleave(width) == step))
        ranked = selection.rank(scores, log_probs, width, k)
        is_eos = ranked.tokens.eq(special.eos)
        done = limits.le(step)
        # EOS within the first k ranks finishes a hypothesis.
        finishing = is_eos[:, :k] & ranked.scores[:, :k].isfinite()  # (n, k)
        if finishing.any():
            normalized = ranked.scores[:, :k] / length_penalty(step + 1, cfg.alpha)
            pairs = finishing.nonzero()  # (finishing, 2): sentence, rank
            ending_rows = pairs[:, 0] * width + ranked.beams[pairs[:, 0], pairs[:, 1]]
            gathered = [None] * pairs.size(0) if track is None else track.ended(
                ending_rows, log_probs[ending_rows, special.eos],
                torch.full_like(ending_rows, step + 1))
            for (i, rank), row, found in zip(pairs.tolist(), ending_rows.tolist(), gathered):
                complete = ranked.complete is None or bool(ranked.complete[i, rank])
                count = finished.add(int(active[i]), i, complete, Hypothesis(
                    tokens[row, 1: step + 1].tolist(), float(normalized[i, rank]),
                    float(ranked.scores[i, rank]), features=found))
                if count >= k:
                    done[i] = True

        # The first k candidates not ending in EOS stay open; EOS ones sort last.
        rank = torch.arange(2 * k, device=device) + is_eos * (2 * k)  # (n, 2k)
        keep_rank = rank.topk(k, dim=1, largest=False).indices  # (n, k)
        scores = ranked.scores.gather(1, keep_rank)  # (n, k)
        next_beam = ranked.beams.gather(1, keep_rank)
        next_token = ranked.tokens.gather(1, keep_rank)
        if early_stop:
            done |= finished.nbest_score >= best_possible_scores(scores, step + 1, limits,
                                                                 cfg.alpha)
        done |= scores.isinf().all(dim=1)

        keep = (~done).nonzero().squeeze(1)  # (n_next,)
        selection.keep(keep, keep_rank[keep])
        rows = ((keep * width).unsqueeze(1) + next_beam[keep]).view(-1)  # (n_next * k,) source rows
        if track is not None:
            track.advance(rows, log_probs[rows, next_token[keep].view(-1)])
        tokens = tokens[rows]
        tokens[:, step + 1] = next_token[keep].view(-1)
        scores, limits, active = scores[keep], limits[keep], active[keep]
        finished.nbest_score = finished.nbest_score[keep]
        if active.numel():
            # The encoder rows (one per sentence, shared by its beams) change only when
            # sentences leave.
            stepper.reorder(rows, keep if keep.numel() < n else None)
        width = k
        step += 1
    return finished.best()
