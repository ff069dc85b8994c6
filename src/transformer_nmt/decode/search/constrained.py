"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar 2018):
outputs that contain given phrases (terminology), each a sequence of target token ids.

Every hypothesis tracks which phrases it has produced and how far into one it is; the
number of phrase tokens met so far puts it in a bank (0 .. all phrase tokens of its
sentence). At each step the candidates are every hypothesis' 2k likeliest next tokens
plus the tokens that advance a phrase (the next token of the phrase under way, the
first of each phrase not yet met), and the k kept open are picked from the banks in
turn, best first in each, highest bank first: hypotheses that met more of the phrases
keep a share of the beam although the model ranks them lower. A phrase left halfway
is unmet again. With `word_pieces` (a mask of the tokens that continue a word), a
phrase must end where a word ends: the token after its last may not continue that word,
so that "Haus" is met by "Haus ist" but not by "Hauses". EOS may only follow a
hypothesis that met every phrase, except at the maximum length, where EOS is forced as
in plain beam search (so the search always ends); finished hypotheses rank by whether
they met every phrase, then by score.

The loop and its step are every search's (transformer_nmt.decode.search.beam and
transformer_nmt.decode.search.step), with their definitions (scores, lengths, completion when a
sentence has k finished hypotheses or reaches its maximum length); the selection
(`DynamicBeamAllocation`) and two step processors (`RequirePhrases`, `WordEnds`) are this
module's. There is no early stop, as the bound of plain beam search does not account for
banks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.beam import beam_loop
from transformer_nmt.decode.search.ranking import Ranked
from transformer_nmt.decode.search.base import (Hypothesis, Seq2Seq, SpecialIds, max_lengths,
                                                source_lengths)
from transformer_nmt.decode.search.selection import top_k
from transformer_nmt.decode.search.step_rules import (Step, fit_prefixes, prefix_tensor,
                                                      step_processors)


def phrase_tensors(constraints: list[list[list[int]]], device: torch.device
                   ) -> tuple[Tensor, Tensor]:
    """(sentences, most phrases, longest phrase) token ids, -1 padding, and
    (sentences, most phrases) phrase lengths, 0 for padding; empty phrases dropped."""
    constraints = [[phrase for phrase in phrases if phrase] for phrases in constraints]
    most = max([len(phrases) for phrases in constraints] + [1])
    longest = max([len(phrase) for phrases in constraints for phrase in phrases] + [1])
    tokens = torch.full((len(constraints), most, longest), -1, dtype=torch.long)
    lengths = torch.zeros(len(constraints), most, dtype=torch.long)
    for row, phrases in enumerate(constraints):
        for column, phrase in enumerate(phrases):
            tokens[row, column, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
            lengths[row, column] = len(phrase)
    return tokens.to(device), lengths.to(device)


class _PhraseState:
    """Per open hypothesis: phrases met, the phrase under way and how far into it."""

    def __init__(self, rows: int, phrases: int, device: torch.device) -> None:
        self.met = torch.zeros(rows, phrases, dtype=torch.bool, device=device)  # (rows, M)
        self.current = torch.full((rows,), -1, dtype=torch.long, device=device)  # phrase or -1
        self.depth = torch.zeros(rows, dtype=torch.long, device=device)  # its tokens produced
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)  # a phrase just met

    def unfinished(self, lengths: Tensor) -> Tensor:
        """(rows,) True where some phrase (lengths (rows, M)) is not met yet."""
        return self.current.ge(0) | (~self.met & lengths.gt(0)).any(dim=1)

    def wanted(self, phrases: Tensor, lengths: Tensor) -> Tensor:
        """(rows, 1 + M) tokens that advance a phrase, -1 for none: the next of the phrase
        under way, then the first of each phrase not met."""
        rows = torch.arange(phrases.size(0), device=phrases.device)
        following = phrases[rows, self.current.clamp(min=0),
                            self.depth.clamp(max=phrases.size(2) - 1)]
        following = following.masked_fill(self.current.lt(0), -1)  # (rows,)
        firsts = phrases[:, :, 0].masked_fill(self.met | lengths.eq(0), -1)  # (rows, M)
        return torch.cat([following.unsqueeze(1), firsts], dim=1)

    def advanced(self, candidates: Tensor, phrases: Tensor, lengths: Tensor
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The state after each candidate token (rows, W): met (rows, W, M), current,
        depth and ended (rows, W), and the bank (rows, W): phrase tokens met."""
        rows, count = phrases.size(0), phrases.size(1)
        index = torch.arange(rows, device=phrases.device)
        current = self.current.clamp(min=0)
        following = phrases[index, current, self.depth.clamp(max=phrases.size(2) - 1)]
        going_on = self.current.ge(0).unsqueeze(1) & candidates.eq(following.unsqueeze(1))
        completes = going_on & (self.depth + 1).eq(lengths[index, current]).unsqueeze(1)
        firsts = phrases[:, :, 0].masked_fill(self.met | lengths.eq(0), -1)  # (rows, M)
        starts = candidates.unsqueeze(2).eq(firsts.unsqueeze(1)) & ~going_on.unsqueeze(2)
        starting = starts.any(dim=2)  # (rows, W)
        started = starts.int().argmax(dim=2)  # (rows, W) the first phrase it starts
        whole = starting & lengths.gather(1, started).eq(1)  # a one-token phrase, met at once
        met = self.met.unsqueeze(1) \
            | (completes.unsqueeze(2) & F.one_hot(current, count).bool().unsqueeze(1)) \
            | (whole.unsqueeze(2) & F.one_hot(started, count).bool())  # (rows, W, M)
        under_way = going_on & ~completes
        opening = starting & ~whole
        new_current = torch.where(under_way, self.current.unsqueeze(1),
                                  torch.where(opening, started, -1))
        new_depth = torch.where(under_way, (self.depth + 1).unsqueeze(1),
                                opening.long())
        bank = (met * lengths.unsqueeze(1)).sum(dim=2) + new_depth
        return met, new_current, new_depth, completes | whole, bank

    def take(self, met: Tensor, current: Tensor, depth: Tensor, ended: Tensor,
             chosen: Tensor) -> None:
        """Keep the states of candidates `chosen` (flat indices into (rows * W))."""
        self.met = met.flatten(0, 1)[chosen]
        self.current, self.depth = current.flatten()[chosen], depth.flatten()[chosen]
        self.ended = ended.flatten()[chosen]


def _bank_order(scores: Tensor, banks: Tensor, top_bank: int) -> Tensor:
    """Candidates (n, K) in the order DBA keeps them: the best of each bank in turn,
    highest bank first, then the second best of each, ...; -inf ones last. Returns
    (n, K) indices into K."""
    by_score = scores.argsort(dim=1, descending=True)  # (n, K)
    sorted_banks = banks.gather(1, by_score)
    in_bank = F.one_hot(sorted_banks, top_bank + 1)  # (n, K, banks)
    rank = (in_bank.cumsum(dim=1) * in_bank).sum(dim=2) - 1  # rank within its bank
    key = rank * (top_bank + 1) + (top_bank - sorted_banks)
    key = key.masked_fill(scores.gather(1, by_score).isinf(), torch.iinfo(torch.long).max)
    return by_score.gather(1, key.argsort(dim=1, stable=True))


class DynamicBeamAllocation:
    """Constrained search's selection: the likeliest extensions and those that advance a
    phrase, taken from the banks in turn (`_bank_order`); keeps each open hypothesis'
    phrase state."""

    _ranked: tuple[tuple[Tensor, Tensor, Tensor, Tensor], Tensor, int, int]
    """Set by `rank` for `keep`: the candidates' phrase states, their order, the width
    and the candidates per row."""

    def __init__(self, phrases: Tensor, lengths: Tensor) -> None:
        self.phrases, self.lengths = phrases, lengths  # (active, M, L), (active, M)
        self.state = _PhraseState(phrases.size(0), phrases.size(1), phrases.device)
        self.top_bank = int(lengths.sum(1).max())

    def unfinished(self, width: int) -> Tensor:
        """(rows,) True for the open hypotheses (width per sentence) that have not met
        every phrase of their sentence."""
        return self.state.unfinished(self.lengths.repeat_interleave(width, dim=0))

    def rank(self, scores: Tensor, log_probs: Tensor, width: int, k: int) -> Ranked:
        n = scores.size(0)
        row_phrases = self.phrases.repeat_interleave(width, dim=0)  # (rows, M, L)
        row_lengths = self.lengths.repeat_interleave(width, dim=0)  # (rows, M)
        best = top_k(log_probs, min(2 * k, log_probs.size(1)))[1]  # (rows, 2k)
        wanted = self.state.wanted(row_phrases, row_lengths)  # (rows, 1 + M)
        repeated = wanted.unsqueeze(2).eq(best.unsqueeze(1)).any(dim=2) | torch.tril(
            wanted.unsqueeze(2).eq(wanted.unsqueeze(1)), diagonal=-1).any(dim=2)
        extra = wanted.lt(0) | repeated  # (rows, 1 + M) not a new candidate
        candidates = torch.cat([best, wanted.clamp(min=0)], dim=1)  # (rows, W)
        cand_scores = scores.view(-1, 1) + log_probs.gather(1, candidates)
        cand_scores[:, best.size(1):] = cand_scores[:, best.size(1):].masked_fill(
            extra, float("-inf"))
        met, current, depth, ended, banks = self.state.advanced(candidates, row_phrases,
                                                                row_lengths)
        per_row = candidates.size(1)
        flat_scores = cand_scores.view(n, width * per_row)
        order = _bank_order(flat_scores, banks.view(n, width * per_row),
                            self.top_bank)[:, : 2 * k]  # (n, 2k) indices into width * W
        top_beam = order // per_row
        all_met = ~self.state.unfinished(row_lengths).view(n, width).gather(1, top_beam)
        self._ranked = (met, current, depth, ended), order, width, per_row
        return Ranked(flat_scores.gather(1, order), candidates.view(n, -1).gather(1, order),
                      top_beam, all_met)

    def keep(self, sentences: Tensor | None, ranks: Tensor) -> None:
        advanced, order, width, per_row = self._ranked
        if sentences is None:
            sentences = torch.arange(order.size(0), device=order.device)
        chosen = order[sentences].gather(1, ranks)  # (n_next, k) indices into width * W
        self.state.take(*advanced, ((sentences * width * per_row).unsqueeze(1)
                                    + chosen).view(-1))
        self.phrases, self.lengths = self.phrases[sentences], self.lengths[sentences]


class RequirePhrases:
    """EOS only after every phrase, except at the maximum length (EOS is forced there)."""

    def __init__(self, selection: DynamicBeamAllocation, eos: int) -> None:
        self.selection, self.eos = selection, eos

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        unfinished = self.selection.unfinished(step.width)
        log_probs[unfinished & ~step.at_limit, self.eos] = float("-inf")


class WordEnds:
    """A phrase ends where a word ends: the token after its last may not continue it."""

    def __init__(self, selection: DynamicBeamAllocation, word_pieces: Tensor) -> None:
        self.selection = selection
        self.word_pieces = word_pieces  # (vocab,) True for pieces that continue a word

    def __call__(self, log_probs: Tensor, step: Step) -> None:
        log_probs.masked_fill_(self.selection.state.ended.unsqueeze(1)
                               & self.word_pieces.unsqueeze(0), float("-inf"))


@torch.inference_mode()
def constrained_beam_search(model: Seq2Seq, src: Tensor, constraints: list[list[list[int]]],
                            cfg: DecodeConfig = DecodeConfig(),
                            special: SpecialIds = SpecialIds(),
                            max_len_limit: int | None = None, use_cache: bool = True,
                            prefixes: list[list[int]] | None = None,
                            word_pieces: Tensor | None = None, features: bool = False
                            ) -> list[list[Hypothesis]]:
    """Beam search of width cfg.beam for a batch of sources (batch, src_len) whose outputs
    must contain constraints[i] (phrases of token ids) for sentence i.

    Returns, per sentence, its cfg.nbest best finished hypotheses: those with every
    phrase first, then by score. A sentence's maximum length is raised to its phrases'
    total length where that is longer (capped by max_len_limit: phrases that cannot fit
    are missed, which the caller should warn about). `prefixes` as in beam_search.
    word_pieces (vocab,) bool marks the tokens that continue a word (None: phrases may
    end inside a word). features as in beam_search.
    """
    phrases, lengths = phrase_tensors(constraints, src.device)  # (batch, M, L), (batch, M)
    prefix = prefix_tensor(prefixes, src.device)
    limits = fit_prefixes(max_lengths(src, cfg, special.pad, max_len_limit), prefix)
    limits = torch.maximum(limits, lengths.sum(1))
    if max_len_limit is not None:
        limits = limits.clamp(max=max_len_limit)
    selection = DynamicBeamAllocation(phrases, lengths)
    own = [RequirePhrases(selection, special.eos)]
    if word_pieces is not None:
        own.append(WordEnds(selection, word_pieces))
    return beam_loop(model, model.encode(src), limits, cfg, special,
                     step_processors(cfg, special.eos, prefix, own), selection, cfg.beam,
                     use_cache=use_cache, early_stop=False,
                     source_tokens=source_lengths(src, special.pad) if features else None)
