"""The caches the searches decode with (decode/attention/kv_cache.py): one allocation when the
capacity is known, memory's keys kept once and attended as given, the same keys and values as
plain concatenated tensors through growth and reorders into shared spare buffers
(decode/attention/spare_pool.py), keys and values stored in bf16 where asked, and the cache each
model gets."""

from __future__ import annotations

from dataclasses import replace

import torch

from search_fixtures import tiny_transformer
from transformer_nmt.config import get_preset
from transformer_nmt.decode.search.ensemble import Ensemble, EnsembleCache
from transformer_nmt.decode.attention.kv_cache import StoredKVCache, decoder_cache, stored_decoder_cache
from transformer_nmt.decode.attention.spare_pool import SparePool
from transformer_nmt.model.attention import eq1_kernel
from transformer_nmt.model.cache import KVCache
from transformer_nmt.model.transformer import Transformer

VOCAB = 53


def test_kv_cache_with_a_capacity_allocates_once_then_grows_past_it():
    cache = StoredKVCache(SparePool(), capacity=20)
    chunk = torch.randn(3, 2, 1, 4)
    cache.append(chunk, chunk)
    buffer = cache.keys.data_ptr()
    for _ in range(19):
        cache.append(chunk, chunk)
    assert cache.length == 20 and cache.keys.data_ptr() == buffer  # no growth, no copy
    keys, _ = cache.append(chunk, chunk)
    assert cache.length == 21 and keys.shape == (3, 2, 21, 4)
    torch.testing.assert_close(keys[:, :, -1:], chunk)


def test_a_memory_cache_keeps_memory_once_and_attends_as_the_models_plain_cache():
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 2, 1, 3), torch.randn(2, 2, 6, 3), torch.randn(2, 2, 6, 5)
    stored, plain = StoredKVCache(SparePool(), memory=True), KVCache(memory=True)
    assert not stored.holds_memory
    for keys, values in ((k, v), (None, None)):  # memory given once, then attended as kept
        got, _ = stored.attend(q, keys, values, None, False, False, eq1_kernel)
        want, _ = plain.attend(q, keys, values, None, False, False, eq1_kernel)
        assert torch.equal(got, want)
        assert stored.holds_memory and stored.length == plain.length == 6


def test_kv_cache_matches_plain_tensors_through_growth_and_reorders():
    """Appends past the growth step, reorders with repeats and shrinking batches, and two
    caches sharing one pool of spare buffers: always the same as concatenated tensors."""
    torch.manual_seed(0)
    pool = SparePool()
    caches, plain = [StoredKVCache(pool), StoredKVCache(pool)], [None, None]
    batch = 6
    for step in range(40):
        if step % 7 == 3:  # hypotheses move between beams, some sentences leave
            index = torch.randint(0, batch, (batch - (step % 2),))
            batch = index.numel()
            for i, cache in enumerate(caches):
                cache.reorder(index)
                plain[i] = tuple(t[index] for t in plain[i])
        for i, cache in enumerate(caches):
            new = torch.randn(batch, 2, 1, 3), torch.randn(batch, 2, 1, 5)
            plain[i] = new if plain[i] is None else tuple(
                torch.cat([old, part], dim=2) for old, part in zip(plain[i], new))
            keys, values = cache.append(*new)
            assert torch.equal(keys, plain[i][0]) and torch.equal(values, plain[i][1])
    assert caches[0].length == 40


def test_a_bf16_cache_stores_bf16_and_decodes_close_to_the_full_forward():
    torch.manual_seed(0)
    model = Transformer(replace(get_preset("tiny").model, dropout=0.0), VOCAB).eval()
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (3, 6), generator=generator)
    tgt = torch.randint(4, VOCAB, (3, 7), generator=generator)
    full = model(src, tgt)  # no cache: float32 throughout
    enc = model.encode(src)
    cache = stored_decoder_cache(len(model.decoder_layers), dtype=torch.bfloat16)
    steps = torch.cat([model.decode(tgt[:, i:i + 1], enc, cache).logits for i in range(7)], 1)
    assert cache.self_attention[0].keys.dtype == torch.bfloat16
    assert cache.cross_attention[0].values.dtype == torch.bfloat16
    assert steps.dtype == torch.float32  # only keys and values are narrowed
    # bf16 keeps 8 bits of mantissa: logits within a few hundredths, not bit-equal.
    torch.testing.assert_close(steps, full, atol=0.05, rtol=0.05)
    assert not torch.equal(steps, full)


def test_a_transformer_gets_stored_caches_and_other_models_their_own():
    model = tiny_transformer()
    cache = decoder_cache(model, 8)
    assert all(isinstance(c, StoredKVCache) for c in cache.self_attention + cache.cross_attention)
    assert all(c.memory for c in cache.cross_attention)
    ensemble = decoder_cache(Ensemble([model, tiny_transformer(seed=1)]), 8)
    assert isinstance(ensemble, EnsembleCache) and len(ensemble.members) == 2
