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
  beat the nbest-th finished one (transformer_nmt.decode.beam.best_possible_scores).
- PAD and BOS are never generated.

Beyond the model, every search obeys the same step rules, a list of step processors
(transformer_nmt.decode.step_rules): EOS at the maximum length, a forced prefix, no
repeated n-grams. Every search runs transformer_nmt.decode.beam's loop, whose step
(transformer_nmt.decode.step) the continuous-batching engine takes too: beam search with
the `TopK` selection, greedy search as beam 1 with `Likeliest`, terminology constraints
with their own (transformer_nmt.decode.constrained). `sample` draws tokens instead of
choosing the likeliest (`Draw`, beam 1 per sample), one seeded generator per sentence;
scoring given outputs is `teacher_forced`. The model protocol, `SpecialIds`, `Hypothesis` and the
length rules are transformer_nmt.decode.search_base's, imported here as well.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.beam import beam_loop
from transformer_nmt.decode.ranking import Draw, Likeliest, TopK
from transformer_nmt.decode.search_base import (  # noqa: F401 (length_penalty imported from here)
    Hypothesis, Seq2Seq, SpecialIds, length_penalty, max_lengths, source_lengths)
from transformer_nmt.decode.search_features import probe_layer
from transformer_nmt.decode.step_rules import fit_prefixes, prefix_tensor, step_processors


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


def _target_batch(sequences: list[list[int]], special: SpecialIds, device: torch.device
                  ) -> Tensor:
    """(len(sequences), longest + 1) decoder input: BOS, the tokens, PAD after them."""
    length = max(len(tokens) for tokens in sequences) + 1
    tgt = torch.full((len(sequences), length), special.pad, dtype=torch.long, device=device)
    tgt[:, 0] = special.bos
    for row, tokens in enumerate(sequences):
        tgt[row, 1: len(tokens) + 1] = torch.tensor(tokens, dtype=torch.long)
    return tgt


@torch.inference_mode()
def teacher_forced(model: Seq2Seq, src: Tensor, owners: Tensor, sequences: list[list[int]],
                   special: SpecialIds = SpecialIds(), need_weights: bool = False
                   ) -> tuple[list[list[float]], list[Tensor]]:
    """log P of every token of each target sequence (tokens without BOS and EOS, EOS
    scored last) given source row owners[i] (sequences,) of src (batch, src_len), from
    one teacher-forced decoder pass; and the per-layer encoder-decoder attention
    (sequences, heads, longest + 1, src_len) when need_weights.

    The log-probabilities are those the searches sum, PAD and BOS excluded.
    """
    _, picked, cross_attention = teacher_forced_pass(model, src, owners, sequences, special,
                                                     need_weights)
    scores = [picked[row, : len(tokens) + 1].tolist() for row, tokens in enumerate(sequences)]
    return scores, cross_attention


def teacher_forced_pass(model: Seq2Seq, src: Tensor, owners: Tensor,
                        sequences: list[list[int]], special: SpecialIds = SpecialIds(),
                        need_weights: bool = False) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The teacher-forced decoder pass of `teacher_forced`, as tensors: every position's
    log-probabilities (sequences, longest + 1, vocab; PAD and BOS at -inf, as the searches
    see them), those of each sequence's own next token (sequences, longest + 1; EOS after
    the last token, padding beyond), and the per-layer cross-attention when need_weights."""
    tgt = _target_batch(sequences, special, src.device)  # (sequences, longest + 1)
    out = model.decode(tgt, model.encode(src).select(owners), need_weights=need_weights)
    log_probs = torch.log_softmax(out.logits.float(), dim=-1)  # (sequences, longest + 1, vocab)
    log_probs[..., special.pad] = float("-inf")
    log_probs[..., special.bos] = float("-inf")
    following = torch.cat([tgt[:, 1:], tgt.new_full((tgt.size(0), 1), special.pad)], dim=1)
    for row, tokens in enumerate(sequences):
        following[row, len(tokens)] = special.eos
    picked = log_probs.gather(2, following.unsqueeze(2)).squeeze(2)  # (sequences, longest + 1)
    return log_probs, picked, out.cross_attention


def attach_details(model: Seq2Seq, src: Tensor, results: list[list[Hypothesis]],
                   special: SpecialIds = SpecialIds(), attention: bool = True,
                   token_scores: bool = False) -> None:
    """Fill Hypothesis.attention (the encoder-decoder attention of decoder layer
    transformer_nmt.decode.search_features.ATTENTION_LAYER, averaged over heads) and/or
    Hypothesis.token_scores by decoding every final hypothesis once more, teacher-forced.

    Re-running the decoder on the chosen hypotheses costs one pass and keeps the search
    itself free of attention and per-token bookkeeping.
    """
    owners = [i for i, hyps in enumerate(results) for _ in hyps]
    hyps = [hyp for sentence in results for hyp in sentence]
    if not hyps:
        return
    scores, cross = teacher_forced(model, src, torch.tensor(owners, device=src.device),
                                   [hyp.tokens for hyp in hyps], special, need_weights=attention)
    if token_scores:
        for hyp, token_scores_of_hyp in zip(hyps, scores):
            hyp.token_scores = token_scores_of_hyp
    if not attention:
        return
    weights = cross[probe_layer(len(cross))].float().mean(dim=1)  # (hyps, length, src_len)
    src_lengths = src.ne(special.pad).sum(1).tolist()
    for row, (owner, hyp) in enumerate(zip(owners, hyps)):
        hyp.attention = weights[row, : len(hyp.tokens) + 1, : src_lengths[owner]].cpu()
