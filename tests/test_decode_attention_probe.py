"""The probe on one layer's encoder-decoder attention (decode/attention/probe.py): the layer's
output exactly as without it, the weights beside, as a cache of its own, wrapping a
layer's cache, and through the whole model."""

from __future__ import annotations

import torch

from search_fixtures import SPECIAL, random_sources, tiny_transformer
from transformer_nmt.decode.attention.kv_cache import step_cache
from transformer_nmt.decode.attention.probe import Probe, Unkept, install_probe
from transformer_nmt.model.attention import MultiHeadAttention
from transformer_nmt.model.cache import KVCache

D_MODEL, HEADS, D_K, D_V = 12, 3, 4, 5


def module(self_attention: bool, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(D_MODEL, HEADS, D_K, D_V, self_attention=self_attention).eval()


def test_probe_gives_the_fused_output_and_the_weights_beside():
    attention = module(self_attention=False)
    x, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 6, D_MODEL)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 3:] = False
    probe = Probe()
    with torch.no_grad():
        fused, none = attention(x, memory, mask=mask)
        probed, hidden = attention(x, memory, mask=mask, cache=probe)
        _, explicit = attention(x, memory, mask=mask, need_weights=True)
    assert none is None and hidden is None
    assert torch.equal(probed, fused)
    assert probe.weights.dtype == torch.float32
    torch.testing.assert_close(probe.weights, explicit)


def test_a_probe_on_a_cache_keeps_what_the_cache_keeps_and_records_each_step():
    attention = module(self_attention=False)
    group = 2
    x, memory = torch.randn(2 * group, 3, D_MODEL), torch.randn(2, 6, D_MODEL)
    probe = Probe(KVCache(memory=True))
    with torch.no_grad():
        _, explicit = attention(x, memory, need_weights=True)
        first, _ = attention(x[:, :1], memory, cache=probe)
        assert probe.holds_memory and probe.length == 6  # the inner cache's
        torch.testing.assert_close(probe.weights, explicit[:, :, :1])
        second, _ = attention(x[:, 1:2], None, cache=probe)
        torch.testing.assert_close(probe.weights, explicit[:, :, 1:2])
        plain, _ = attention(x[:, 1:2], memory)
    assert torch.equal(second, plain)


def test_a_probed_layer_leaves_the_output_as_it_is_and_gives_its_weights():
    model = tiny_transformer()
    src = random_sources(3, 40, seed=1)
    tgt = torch.tensor([[SPECIAL.bos, 5, 6, 7]] * 3)
    with torch.inference_mode():
        enc = model.encode(src)
        plain = model.decode(tgt, enc)
        cache = Unkept(len(model.decoder_layers))
        probe = install_probe(cache, 0)
        probed = model.decode(tgt, enc, cache)
        weighed = model.decode(tgt, enc, need_weights=True)
    assert torch.equal(probed.logits, plain.logits)
    assert probe.weights.shape == (3, model.cfg.heads, 4, src.size(1))
    torch.testing.assert_close(probe.weights, weighed.cross_attention[0].float())


def test_a_step_cache_probes_with_and_without_keeping_keys():
    model = tiny_transformer()
    src = random_sources(2, 40, seed=2)
    tgt = torch.tensor([[SPECIAL.bos, 5, 6]] * 2)
    with torch.inference_mode():
        enc = model.encode(src)
        weighed = model.decode(tgt, enc, need_weights=True).cross_attention[1].float()
        cache, probe = step_cache(model, True, 8, probe_layer=1)
        for i in range(3):
            model.decode(tgt[:, i: i + 1], enc, cache)
            torch.testing.assert_close(probe.weights, weighed[:, :, i: i + 1])
        unkept, probe = step_cache(model, False, 8, probe_layer=1)
        model.decode(tgt, enc, unkept)
        torch.testing.assert_close(probe.weights, weighed)
    assert step_cache(model, False, 8) == (None, None)
