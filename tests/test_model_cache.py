"""The key/value caches of incremental decoding (model/cache.py): one allocation when the
capacity is known, memory's keys kept once and attended as given, and a decoder's caches
reordered per hypothesis and per sentence. Through growth and reorders with spare
buffers: tests/test_decode_attention_kv_cache.py."""

from __future__ import annotations

import torch

from transformer_nmt.model.attention import attend, eq1_kernel
from transformer_nmt.model.cache import DecoderCache, KVCache


def test_kv_cache_with_a_capacity_allocates_once_then_grows_past_it():
    cache = KVCache(capacity=20)
    chunk = torch.randn(3, 2, 1, 4)
    cache.append(chunk, chunk)
    buffer = cache.keys.data_ptr()
    for _ in range(19):
        cache.append(chunk, chunk)
    assert cache.length == 20 and cache.keys.data_ptr() == buffer  # no growth, no copy
    keys, _ = cache.append(chunk, chunk)
    assert cache.length == 21 and keys.shape == (3, 2, 21, 4)
    torch.testing.assert_close(keys[:, :, -1:], chunk)


def test_a_decoder_cache_reorders_cross_attention_only_when_sentences_leave():
    cache = DecoderCache.plain(layers=2, max_length=8)
    for self_cache, cross_cache in zip(cache.self_attention, cache.cross_attention):
        self_cache.append(torch.arange(6.0).view(6, 1, 1, 1), torch.zeros(6, 1, 1, 1))
        cross_cache.append(torch.arange(3.0).view(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    assert cache.length == 1
    cache.reorder(torch.tensor([1, 1, 0, 5, 4, 4]))  # beams move, every sentence stays
    assert cache.self_attention[1].keys.flatten().tolist() == [1, 1, 0, 5, 4, 4]
    assert cache.cross_attention[1].keys.flatten().tolist() == [0, 1, 2]
    cache.reorder(torch.tensor([2, 3]), sentences=torch.tensor([1]))  # one sentence left
    assert cache.self_attention[0].keys.flatten().tolist() == [0, 5]
    assert cache.cross_attention[0].keys.flatten().tolist() == [1]


def test_plain_caches_keep_plain_tensors_through_growth_and_reorders():
    torch.manual_seed(0)
    cache, plain, batch = KVCache(), None, 4
    for step in range(20):
        if step % 7 == 3:
            index = torch.randint(0, batch, (batch - 1,))
            batch = index.numel()
            cache.reorder(index)
            plain = tuple(t[index] for t in plain)
        new = torch.randn(batch, 2, 1, 3), torch.randn(batch, 2, 1, 5)
        plain = new if plain is None else tuple(
            torch.cat([old, part], dim=2) for old, part in zip(plain, new))
        keys, values = cache.append(*new)
        assert torch.equal(keys, plain[0]) and torch.equal(values, plain[1])


def test_a_memory_cache_keeps_memory_once_and_attends_as_a_cacheless_layer_does():
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 2, 1, 3), torch.randn(2, 2, 6, 3), torch.randn(2, 2, 6, 5)
    cache = KVCache(memory=True)
    assert not cache.holds_memory
    first, _ = cache.attend(q, k, v, None, False, False, eq1_kernel)
    assert cache.holds_memory and cache.length == 6
    again, _ = cache.attend(q, None, None, None, False, False, eq1_kernel)
    expected, _ = attend(q, k, v, None, False, False)
    assert torch.equal(first, expected) and torch.equal(again, expected)

