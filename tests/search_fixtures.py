"""Helpers of the search tests: a toy model written against the search protocol, a
tiny random Transformer, random sources, a teacher-forced reference score, and every
output of a toy vocabulary scored, the reference of exhaustive search.

`ToyModel` is a small recurrent model whose EOS becomes likelier past the source length,
so that hypotheses finish at different steps, as a trained model's do.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.model.transformer import Transformer

PAD, BOS, EOS = 0, 2, 3
SPECIAL = SpecialIds(PAD, BOS, EOS)


@dataclass
class ToyEncoderOut:
    states: Tensor  # (batch, hidden)
    lengths: Tensor  # (batch,) source tokens without EOS

    def select(self, index: Tensor) -> "ToyEncoderOut":
        return ToyEncoderOut(self.states[index], self.lengths[index])


@dataclass
class ToyCache:
    state: Tensor | None = None  # (batch, hidden)
    length: int = 0

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        self.state = self.state[index]


@dataclass
class ToyOut:
    logits: Tensor
    cross_attention: list[Tensor] = field(default_factory=list)


class ToyModel:
    """An RNN over the whole target prefix, so a wrongly reordered cache changes the output."""

    def __init__(self, vocab: int = 12, hidden: int = 16, scale: float = 3.0,
                 eos_slope: float = 0.7, eos_bias: float = 0.0, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.embed = torch.randn(vocab, hidden, generator=generator)
        self.recur = torch.randn(hidden, hidden, generator=generator) / hidden ** 0.5
        self.out = torch.randn(hidden, vocab, generator=generator) * scale / hidden ** 0.5
        self.eos_slope, self.eos_bias = eos_slope, eos_bias

    def encode(self, src: Tensor) -> ToyEncoderOut:
        mask = src.ne(PAD).unsqueeze(-1)
        states = torch.tanh((self.embed[src] * mask).sum(1))
        return ToyEncoderOut(states, src.ne(PAD).sum(1) - 1)

    def new_cache(self, max_length: int = 0) -> ToyCache:
        return ToyCache()

    def decode(self, tgt: Tensor, enc: ToyEncoderOut, cache: ToyCache | None = None,
               need_weights: bool = False) -> ToyOut:
        start = 0 if cache is None else cache.length
        group = tgt.size(0) // enc.states.size(0)  # hypotheses per source sentence
        lengths = enc.lengths.repeat_interleave(group)
        state = (enc.states.repeat_interleave(group, dim=0)
                 if cache is None or cache.state is None else cache.state)
        logits = []
        for i in range(tgt.size(1)):
            state = torch.tanh(state @ self.recur + self.embed[tgt[:, i]])
            step_logits = state @ self.out
            step_logits[:, EOS] += self.eos_slope * (start + i - lengths) + self.eos_bias
            logits.append(step_logits)
        if cache is not None:
            cache.state, cache.length = state, start + tgt.size(1)
        return ToyOut(torch.stack(logits, dim=1))


def random_sources(batch: int, vocab: int, seed: int = 0, min_len: int = 2,
                   max_len: int = 7) -> Tensor:
    """(batch, longest + 1) sources of random lengths: ids >= 4, EOS, PAD padding."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=generator)
    src = torch.full((batch, int(lengths.max()) + 1), PAD)
    for row, length in enumerate(lengths.tolist()):
        src[row, :length] = torch.randint(4, vocab, (length,), generator=generator)
        src[row, length] = EOS
    return src


def tiny_transformer(vocab: int = 40, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(replace(get_preset("tiny").model, dropout=0.0), vocab).eval()
    with torch.no_grad():  # sharper distributions: beams diverge instead of tying
        model.tgt_embed.weight.mul_(4)
    return model


def sequence_log_prob(model, src: Tensor, tokens: list[int]) -> float:
    """log P(tokens + EOS | src) by one teacher-forced decode without cache."""
    tgt = torch.tensor([[BOS] + tokens + [EOS]])
    with torch.inference_mode():
        logits = model.decode(tgt[:, :-1], model.encode(src.unsqueeze(0))).logits
    return float(torch.log_softmax(logits.float(), -1)[0].gather(1, tgt[0, 1:, None]).sum())


def unpadded(src: Tensor, row: int) -> Tensor:
    """Row `row` of a padded batch as a batch of one, without padding."""
    return src[row, : int(src[row].ne(PAD).sum())].unsqueeze(0)

VOCAB = 6
"""The toy vocabulary of the exhaustive searches: PAD 0 and BOS 2 are never generated;
outputs use WORDS, then EOS 3."""
WORDS = (1, 4, 5)
LIMIT = 3
"""The most words of an output in the exhaustive searches."""


def lp(length: int, alpha: float) -> float:
    """GNMT's length penalty of an output of `length` tokens, EOS counted."""
    return ((5 + length) / 6) ** alpha


def every_output(model, src: Tensor, alpha: float) -> list[tuple[float, list[int]]]:
    """(score, tokens) of every output of at most LIMIT of WORDS, best first."""
    found = []
    for length in range(LIMIT + 1):
        for tokens in itertools.product(WORDS, repeat=length):
            log_p = sequence_log_prob(model, src, list(tokens))
            found.append((log_p / lp(length + 1, alpha), list(tokens)))
    return sorted(found, key=lambda pair: -pair[0])


def searches_with_and_without_cache(model, src, beam: int):
    """The n-best lists (beam of them; one for greedy search, beam 1) of `src`'s sentences
    searched with the key/value cache and without it."""
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_b=5)
    if beam == 1:
        return ([[hyp] for hyp in greedy_search(model, src, cfg, SPECIAL)],
                [[hyp] for hyp in greedy_search(model, src, cfg, SPECIAL, use_cache=False)])
    return (beam_search(model, src, cfg, SPECIAL),
            beam_search(model, src, cfg, SPECIAL, use_cache=False))
