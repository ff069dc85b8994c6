"""What training measures on the validation split: its batches, and the BLEU and chrF of a
model's translations of it (which result is better: training/early_stopping.py).

The loss and perplexity of those batches come from `Trainer.evaluate`, which shares the
training step's precision and model; BLEU and chrF need search and text, so they live here.
"""

from __future__ import annotations

from typing import Iterator

import torch

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.batching import TokenBatchSampler
from transformer_nmt.data.collate import Batch, collate
from transformer_nmt.data.binarize import ParallelData
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import search
from transformer_nmt.evaluate import read_text, score
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.precision import autocast


def validation_batches(data: ParallelData, max_tokens: int, max_len: int, *, seed: int,
                       rank: int = 0, world_size: int = 1) -> Iterator[Batch | None]:
    """This process's share of `data` in length-sorted batches of at most `max_tokens`
    tokens a side, sides cut to `max_len` (the model's positions); None where its share
    has run out and another process still has a batch."""
    sampler = TokenBatchSampler(data.src_lengths, data.tgt_lengths, max_tokens, seed=seed,
                                shuffle=False, rank=rank, world_size=world_size)
    for indices in sampler:
        yield collate(data, indices, max_len=max_len) if indices else None


def translation_scores(model: Transformer, data: ParallelData, vocab: Vocab, max_tokens: int,
                       device: torch.device, precision: str, beam: int = 1,
                       sentences: int = 0) -> dict[str, float]:
    """sacreBLEU and chrF of a model's translations of a split against its reference text.

    The first `sentences` pairs (0: all) are translated with beam search of width `beam`
    (1: greedy) in batches of at most `max_tokens` tokens a side, in `precision`; the
    model's training mode is left as it was found.
    """
    count = len(data) if sentences <= 0 else min(sentences, len(data))
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    limit = model.cfg.max_positions
    hypotheses = [""] * count
    sampler = TokenBatchSampler(data.src_lengths[:count], data.tgt_lengths[:count],
                                max_tokens, seed=0, shuffle=False)
    settings = DecodeConfig(beam=beam)
    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        for indices in sampler:
            batch = collate(data, indices, max_len=limit)
            found = search(model, batch.src.to(device), settings, special,
                           max_len_limit=limit - 1)
            for index, best in zip(indices, found):
                hypotheses[index] = vocab.decode(best[0].tokens)
    model.train(was_training)
    result = score(hypotheses, read_text(data.tgt_text_path)[:count])
    return {"bleu": result["bleu"], "chrf": result["chrf"]}
