"""Linear layers stored transposed for decoding on a CPU (decode/layout.py)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from search_fixtures import random_sources, tiny_transformer
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.layout import TransposedLinear, transpose_linear_layers
from transformer_nmt.decode.precision import prepare_model
from transformer_nmt.decode.search import beam_search, greedy_search


def test_transposed_linear_computes_what_linear_does():
    torch.manual_seed(0)
    for linear in (nn.Linear(12, 7), nn.Linear(12, 7, bias=False)):
        transposed = TransposedLinear(linear.weight, linear.bias)
        assert transposed.weight_t.is_contiguous() and transposed.weight_t.shape == (12, 7)
        assert torch.equal(transposed.weight, linear.weight)
        for x in (torch.randn(5, 12), torch.randn(3, 4, 12), torch.randn(2, 1, 12)[:, 0]):
            torch.testing.assert_close(transposed(x), linear(x))


def test_a_transposed_model_decodes_as_the_original():
    model = tiny_transformer().eval()
    reference = copy.deepcopy(model)
    transpose_linear_layers(model)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    # The projection tied to the target embedding gets a transposed copy of it.
    assert isinstance(model.output_proj, TransposedLinear)
    assert torch.equal(model.projection_weight, reference.tgt_embed.weight)
    src = random_sources(6, model.vocab_size, seed=1)
    tgt = random_sources(6, model.vocab_size, seed=2)
    with torch.inference_mode():
        torch.testing.assert_close(model(src, tgt), reference(src, tgt))
    for cfg in (DecodeConfig(beam=1), DecodeConfig(beam=3)):
        ours = (greedy_search(model, src, cfg) if cfg.beam == 1
                else [best[0] for best in beam_search(model, src, cfg)])
        theirs = (greedy_search(reference, src, cfg) if cfg.beam == 1
                  else [best[0] for best in beam_search(reference, src, cfg)])
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        for a, b in zip(ours, theirs):
            assert abs(a.score - b.score) < 1e-4


def test_fp32_decoding_on_a_cpu_uses_the_transposed_layout():
    model = prepare_model(tiny_transformer(), "cpu", "fp32")
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert isinstance(model.output_proj, TransposedLinear)
