"""The lockstep search loop that beam search, greedy search (beam 1), sampling and
constrained search share: every sentence of a batch at the same step, the batch shrinking
as sentences end.

Every step, the loop asks the model for the next token's log-probabilities, lets the
step processors restrict them (transformer_nmt.decode.search.step_rules), and takes the one
step of every search (transformer_nmt.decode.search.step): the selection (transformer_nmt.decode.search.ranking) ranks the extensions, the
EOS ones within the first k ranks finish, the first k others stay open. The definitions
are transformer_nmt.decode.search.searches's. Between two steps a search whose every
request went away stops (transformer_nmt.decode.search.withdrawal).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.ranking import Selection
from transformer_nmt.decode.search.base import EncoderState, Hypothesis, Seq2Seq, SpecialIds
from transformer_nmt.decode.search.stepper import Stepper
from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.decode.search.feature_track import FeatureTrack
from transformer_nmt.decode.search.step import SearchStep
from transformer_nmt.decode.search.step_rules import Step, StepProcessor, apply_processors
from transformer_nmt.decode.search.withdrawal import stop_if_withdrawn


@torch.inference_mode()
def beam_loop(model: Seq2Seq, enc: EncoderState, limits: Tensor, cfg: DecodeConfig,
              special: SpecialIds, processors: list[StepProcessor], selection: Selection,
              k: int, use_cache: bool = True, early_stop: bool = True,
              source_tokens: Tensor | None = None) -> list[list[Hypothesis]]:
    """A search of width k for the sentences of enc (its rows) with maximum output lengths
    `limits` (sentences,): per sentence its cfg.nbest best finished hypotheses (those
    meeting the selection's requirements first), best first. early_stop: stop a sentence
    once no open hypothesis can beat its nbest-th finished one (a bound that only holds
    for `TopK`). source_tokens (sentences,), each source's length: each hypothesis gets
    Hypothesis.features (the model a Transformer)."""
    batch, device = limits.size(0), limits.device
    # Every sentence starts with one empty prefix: step 0 decodes one row per sentence
    # (and computes the encoder-decoder keys/values once), later steps k rows.
    longest = int(limits.max())
    track = None if source_tokens is None else FeatureTrack(source_tokens)
    stepper = Stepper(model, enc, use_cache, longest + 1,
                      None if track is None else probe_layer(len(model.decoder_layers)))
    searching = SearchStep(selection, k, cfg.nbest, cfg.alpha, special.eos, device,
                           early_stop, track)
    searching.finished.open(batch)  # slot = batch index
    width = 1  # rows per sentence in the current step
    # (open * width, BOS + tokens + EOS), row = sentence * width + beam
    tokens = torch.full((batch, longest + 2), special.bos, dtype=torch.long, device=device)
    scores = torch.zeros(batch, 1, device=device)  # (open, width) log P of each open prefix
    results: list[list[Hypothesis]] = [[] for _ in range(batch)]
    step = 0
    while limits.numel():
        stop_if_withdrawn()
        log_probs = stepper.log_probs(tokens, step, special)  # (open * width, vocab)
        if track is not None:
            track.observe(log_probs, stepper.probed)
        apply_processors(processors, log_probs, Step(
            step, tokens[:, : step + 1], searching.finished.slots, width,
            limits.repeat_interleave(width) == step))
        outcome = searching.take(log_probs, scores, width, step, limits, tokens)
        for slot in outcome.ended:
            results[slot] = searching.finished.close(slot)
        if outcome.rows is not None:
            tokens = tokens[outcome.rows]
        tokens[:, step + 1] = outcome.tokens
        scores = outcome.scores
        if outcome.keep is not None:
            limits = limits[outcome.keep]
        if limits.numel() and outcome.rows is not None:
            # The encoder rows (one per sentence, shared by its beams) change only when
            # sentences leave.
            stepper.reorder(outcome.rows, outcome.keep)
        width = k
        step += 1
    return results
