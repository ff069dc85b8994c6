"""The caches of rows at their own positions (decode/continuous/row_cache.py) through the model's one
decoder loop: each row's logits those of the plain cache's lockstep decoding, the
logits bias and untied learned positions included. How rows are cut into spans:
tests/test_decode_continuous_engine.py."""

from __future__ import annotations

from dataclasses import replace

import torch

from transformer_nmt.config import get_preset
from transformer_nmt.decode.attention.probe import install_probe
from transformer_nmt.decode.continuous.row_cache import RowCache, new_row_cache
from transformer_nmt.model.transformer import Transformer

VOCAB = 53


def tiny_model(seed: int = 0, **changes) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(replace(get_preset("tiny").model, dropout=0.0, **changes), VOCAB).eval()


def random_batch(batch: int, src_len: int, tgt_len: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (batch, src_len), generator=generator)
    tgt = torch.randint(4, VOCAB, (batch, tgt_len), generator=generator)
    return src, tgt


def decode_rows(model: Transformer, cache: RowCache, tgt: torch.Tensor) -> torch.Tensor:
    """Logits (rows, len, vocab) of tgt (rows, len) fed one position per step."""
    steps = []
    for i in range(tgt.size(1)):
        cache.start_step(torch.full((tgt.size(0),), i))
        steps.append(model.decode(tgt[:, i:i + 1], None, cache).logits)
    return torch.cat(steps, dim=1)


def test_rows_at_their_own_positions_decode_as_the_cache_does():
    """Rows at their own positions project through the same project(), logits bias
    included."""
    model = tiny_model(logits_bias=True, activation="swish")
    generator = torch.Generator().manual_seed(5)
    model.logits_bias.copy_(torch.randn(VOCAB, generator=generator))
    src, tgt = random_batch(2, 6, 5)
    full = model(src, tgt)
    cache = new_row_cache(model, 1)
    cache.join(model, model.encode(src))
    torch.testing.assert_close(decode_rows(model, cache, tgt), full)


def test_rows_read_the_decoders_learned_table_when_positions_are_untied():
    model = tiny_model(positional="learned", tie_positions=False)
    src, tgt = random_batch(2, 6, 5)
    with torch.no_grad():
        model.src_positions.weight.add_(1.0)
    cache = new_row_cache(model, 1)
    cache.join(model, model.encode(src))
    torch.testing.assert_close(decode_rows(model, cache, tgt), model(src, tgt))


def test_rows_joining_later_decode_as_alone_and_a_probe_records_their_attention():
    model = tiny_model()
    src, tgt = random_batch(2, 6, 4, seed=1)
    cache = new_row_cache(model, 1)
    probe = install_probe(cache, 1)
    with torch.inference_mode():
        cache.join(model, model.encode(src[:1]))
        cache.start_step(torch.tensor([0]))
        first = model.decode(tgt[:1, :1], None, cache).logits
        cache.join(model, model.encode(src[1:]))  # the second sentence joins a step later
        cache.start_step(torch.tensor([1, 0]))
        both = model.decode(torch.stack([tgt[0, 1:2], tgt[1, :1]]), None, cache).logits
        expected = model.decode(tgt[:, :2], model.encode(src), need_weights=True)
    torch.testing.assert_close(first[:, 0], expected.logits[0, :1])
    torch.testing.assert_close(both[0, 0], expected.logits[0, 1])
    torch.testing.assert_close(both[1, 0], expected.logits[1, 0])
    torch.testing.assert_close(probe.weights[1], expected.cross_attention[1][1, :, :1].float())
