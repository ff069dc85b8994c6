"""The key/value caches of incremental decoding (model/cache.py): the same keys and values
as plain concatenated tensors through growth and reorders, one allocation when the
capacity is known, and a decoder's caches reordered per hypothesis and per sentence."""

from __future__ import annotations

import torch

from transformer_nmt.model.cache import DecoderCache, KVCache, SparePool


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


def test_kv_cache_matches_plain_tensors_through_growth_and_reorders():
    """Appends past the growth step, reorders with repeats and shrinking batches, and two
    caches sharing one pool of spare buffers: always the same as concatenated tensors."""
    torch.manual_seed(0)
    pool = SparePool()
    caches, plain = [KVCache(pool), KVCache(pool)], [None, None]
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


def test_a_decoder_cache_reorders_cross_attention_only_when_sentences_leave():
    cache = DecoderCache(layers=2, max_length=8)
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
