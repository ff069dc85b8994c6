"""Greedy and beam search with the GNMT length penalty (section 6.1 of the paper).

Both searches are batched over sentences and beams, encode each batch once, decode
incrementally with the model's key/value cache, and drop finished sentences from the
batch so that they stop costing compute. They need only the small `Seq2Seq` protocol
(encode / new_cache / decode), so an ensemble that averages probabilities can plug in.

Definitions used throughout:

- A hypothesis Y is the list of generated tokens after BOS, ending with EOS; |Y| counts
  those tokens including the EOS. The tokens returned exclude EOS.
- score(Y) = log P(Y | X) / lp(Y), with the GNMT length penalty
  lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14; alpha = 0 gives raw log P).
- The maximum output length of a sentence is floor(max_len_a * src_len + max_len_b)
  tokens before EOS, src_len counting the source tokens without EOS and padding
  (the paper: input length + 50). At that length EOS is forced, so |Y| <= max_len + 1.
- Beam search keeps `beam` open hypotheses per sentence at every step: of the 2 * beam
  best extensions (by log P), those ending in EOS within the first `beam` ranks are
  finished, and the first `beam` that do not end in EOS stay open. A sentence is complete
  once it has `beam` finished hypotheses (fairseq's rule, so beam 1 is exactly greedy
  search; tensor2tensor's runs until the bound below) or reaches its maximum length.
  It stops earlier, without changing the result, when no open hypothesis can still
  beat the nbest-th finished one (transformer_nmt.decode.search.step.best_possible_scores).
- PAD and BOS are never generated.

Beyond the model, every search obeys the same step rules, a list of step processors
(transformer_nmt.decode.search.step_rules): EOS at the maximum length, a forced prefix, no
repeated n-grams. Every search runs transformer_nmt.decode.search.beam's loop and its step
(transformer_nmt.decode.search.step): beam search
with the `TopK` selection, greedy search as beam 1 with `Likeliest`, terminology constraints
with their own (transformer_nmt.decode.search.constrained). `sample` draws tokens instead of
choosing the likeliest (`Draw`, beam 1 per sample), one seeded generator per sentence;
scoring given outputs is transformer_nmt.decode.search.teacher_forced's. The model protocol,
`SpecialIds`, `Hypothesis` and the length rules are transformer_nmt.decode.search.base's,
imported here as well.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.search.beam import beam_loop
from transformer_nmt.decode.search.ranking import Draw, Likeliest, TopK
from transformer_nmt.decode.search.base import (Hypothesis, Seq2Seq, SpecialIds, max_lengths,
                                                source_lengths)
from transformer_nmt.decode.search.step_rules import fit_prefixes, prefix_tensor, step_processors


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: Tensor, cfg: DecodeConfig = DecodeConfig(),
                  special: SpecialIds = SpecialIds(), max_len_limit: int | None = None,
                  use_cache: bool = True, prefixes: list[list[int]] | None = None,
                  features: bool = False) -> list[Hypothesis]:
    """The most probable next token at every step, for a batch of sources (batch, src_len).

    Returns one Hypothesis per sentence, in order, scored like beam search's. Each
    output starts with the sentence's token ids in `prefixes`, when given (at most
    max_len_limit each). features: each gets Hypothesis.features (a Transformer's).
    """
    prefix = prefix_tensor(prefixes, src.device)
    limits = fit_prefixes(max_lengths(src, cfg, special.pad, max_len_limit), prefix)
    found = beam_loop(model, model.encode(src), limits, cfg, special,
                      step_processors(cfg, special.eos, prefix), Likeliest(), 1, use_cache,
                      source_tokens=source_lengths(src, special.pad) if features else None)
    return [hypotheses[0] for hypotheses in found]


@torch.inference_mode()
def sample(model: Seq2Seq, src: Tensor, cfg: DecodeConfig, seeds: list[int],
           special: SpecialIds = SpecialIds(), max_len_limit: int | None = None,
           prefixes: list[list[int]] | None = None, features: bool = False
           ) -> list[list[Hypothesis]]:
    """cfg.nbest random outputs per source sentence of src (batch, src_len), each token
    drawn from the model's distribution as cfg's temperature, top-k and top-p shape it.

    Sentence i draws from its own generator seeded with (cfg.seed, seeds[i]), so its
    samples do not depend on the other sentences of the batch. Scores are the model's
    own (untempered) log-probabilities, normalized as beam search's; each sentence's
    samples come best first. `prefixes` and `features` as in greedy_search.
    """
    batch, count = src.size(0), cfg.nbest
    owner = torch.arange(batch, device=src.device).repeat_interleave(count)  # (batch * count,)
    prefix = prefix_tensor(prefixes, src.device)
    limits = max_lengths(src, cfg, special.pad, max_len_limit)
    if prefix is not None:
        prefix = prefix[owner]
    limits = fit_prefixes(limits[owner], prefix)
    # Drawn step by step (steps as rows), so that a sample's numbers do not depend on
    # the longest output its batch allows.
    uniforms = torch.cat([
        torch.rand(int(limits.max()) + 1, count, dtype=torch.float64,
                   generator=torch.Generator().manual_seed(_sentence_seed(cfg.seed, seed))).T
        for seed in seeds]).to(src.device)  # (batch * count, longest + 1)
    found = beam_loop(model, model.encode(src).select(owner), limits, cfg, special,
                      step_processors(cfg, special.eos, prefix), Draw(uniforms, cfg), 1,
                      source_tokens=source_lengths(src, special.pad)[owner] if features else None)
    return [sorted((hypotheses[0] for hypotheses in found[i * count: (i + 1) * count]),
                   key=lambda hyp: -hyp.score) for i in range(batch)]


def _sentence_seed(seed: int, sentence: int) -> int:
    """A 32-bit seed for one sentence's generator (torch's CPU generator keeps only 32
    bits of a seed): a hash of both numbers, so that neighbouring pairs get unrelated
    streams."""
    digest = hashlib.blake2b(f"{seed}:{sentence}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, cfg: DecodeConfig = DecodeConfig(),
                special: SpecialIds = SpecialIds(), max_len_limit: int | None = None,
                use_cache: bool = True, early_stop: bool = True,
                prefixes: list[list[int]] | None = None, features: bool = False
                ) -> list[list[Hypothesis]]:
    """Beam search of width cfg.beam for a batch of sources (batch, src_len).

    Returns, per sentence in order, its cfg.nbest best finished hypotheses, best first.
    early_stop=False runs every sentence until it is complete (see the module docstring);
    the result is the same, which the tests check. `prefixes` and `features` as in
    greedy_search.
    """
    prefix = prefix_tensor(prefixes, src.device)
    limits = fit_prefixes(max_lengths(src, cfg, special.pad, max_len_limit), prefix)
    return beam_loop(model, model.encode(src), limits, cfg, special,
                     step_processors(cfg, special.eos, prefix), TopK(), cfg.beam, use_cache,
                     early_stop, source_lengths(src, special.pad) if features else None)


@torch.inference_mode()
def search(model: Seq2Seq, src: Tensor, cfg: DecodeConfig = DecodeConfig(),
           special: SpecialIds = SpecialIds(), max_len_limit: int | None = None,
           prefixes: list[list[int]] | None = None,
           seeds: list[int] | None = None, features: bool = False) -> list[list[Hypothesis]]:
    """Translate a batch of sources (batch, src_len): greedy for beam 1, else beam search,
    or with cfg.sampling, cfg.nbest samples (`sample`, seeded per sentence with `seeds`,
    default its row number).

    Returns per sentence its cfg.nbest best hypotheses. Outputs start with `prefixes`
    when given (token ids per sentence, at most max_len_limit each). With features, each
    hypothesis gets what the confidence needs (Hypothesis.features; a Transformer's only);
    `attach_details` adds attention and token scores afterwards.
    """
    if cfg.sampling:
        seeds = list(range(src.size(0))) if seeds is None else seeds
        results = sample(model, src, cfg, seeds, special, max_len_limit, prefixes, features)
    elif cfg.beam == 1:
        results = [[hyp] for hyp in greedy_search(model, src, cfg, special, max_len_limit,
                                                  prefixes=prefixes, features=features)]
    else:
        results = beam_search(model, src, cfg, special, max_len_limit, prefixes=prefixes,
                              features=features)
    return results
