"""The plain key/value caches of incremental decoding (model/cache.py): memory's keys kept
once and attended as given, and a decoder's caches reordered per hypothesis and per
sentence. Decoding's own caches: tests/test_decode_attention_kv_cache.py."""

from __future__ import annotations

import torch

from transformer_nmt.model.attention import attend, eq1_kernel
from transformer_nmt.model.cache import DecoderCache, KVCache


def test_a_decoder_cache_reorders_cross_attention_only_when_sentences_leave():
    cache = DecoderCache([KVCache(), KVCache()], [KVCache(memory=True), KVCache(memory=True)])
    q = torch.zeros(6, 1, 1, 1)
    for self_cache, cross_cache in zip(cache.self_attention, cache.cross_attention):
        self_cache.attend(q, torch.arange(6.0).view(6, 1, 1, 1), torch.zeros(6, 1, 1, 1),
                          None, True, False, eq1_kernel)
        cross_cache.attend(q, torch.arange(3.0).view(3, 1, 1, 1), torch.zeros(3, 1, 1, 1),
                           None, False, False, eq1_kernel)
    assert cache.length == 1
    cache.reorder(torch.tensor([1, 1, 0, 5, 4, 4]))  # beams move, every sentence stays
    assert cache.self_attention[1].keys.flatten().tolist() == [1, 1, 0, 5, 4, 4]
    assert cache.cross_attention[1].keys.flatten().tolist() == [0, 1, 2]
    cache.reorder(torch.tensor([2, 3]), sentences=torch.tensor([1]))  # one sentence left
    assert cache.self_attention[0].keys.flatten().tolist() == [0, 5]
    assert cache.cross_attention[0].keys.flatten().tolist() == [1]


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

