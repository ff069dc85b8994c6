"""Teacher forcing: given outputs decoded in one pass, as the searches would have scored
them: the log P of every token (`teacher_forced`, which `nmt score` and the confidence
read), and the attention and token scores a search's chosen hypotheses get afterwards
(`attach_details`), so that the search itself keeps no per-token bookkeeping.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.decode.search.base import Hypothesis, Seq2Seq, SpecialIds


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
    transformer_nmt.decode.attention.probe.ATTENTION_LAYER, averaged over heads) and/or
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
