"""Linear layers laid out for decoding on a CPU (decode/device/layout.py): stored transposed in
float32, their rows padded to a few sizes in bf16."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from search_fixtures import random_sources, tiny_transformer
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.device.layout import (DECODE_ROW_MULTIPLE, RowPaddedLinear,
                                           TransposedLinear, pad_linear_rows, padded_rows,
                                           transpose_linear_layers)
from transformer_nmt.decode.device.precision import prepare_model
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.runtime import bf16_supported


def best_hypotheses(model, src, cfg):
    """Each source's best hypothesis: greedy for beam 1, else beam search's first."""
    if cfg.beam == 1:
        return greedy_search(model, src, cfg)
    return [best[0] for best in beam_search(model, src, cfg)]


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
        ours, theirs = best_hypotheses(model, src, cfg), best_hypotheses(reference, src, cfg)
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        for a, b in zip(ours, theirs):
            assert abs(a.score - b.score) < 1e-4


def test_fp32_decoding_on_a_cpu_uses_the_transposed_layout():
    model = prepare_model(tiny_transformer(), "cpu", "fp32")
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert isinstance(model.output_proj, TransposedLinear)


def test_padded_rows_come_in_few_sizes_and_add_at_most_an_eighth():
    sizes = {padded_rows(count, 16) for count in range(1, 4097)}
    assert len(sizes) <= 48  # against 4096 unpadded
    for count in range(1, 4097):
        padded = padded_rows(count, 16)
        assert padded % 16 == 0 and count <= padded
        assert padded - count < max(16, count / 8)


def test_row_padded_linear_computes_what_linear_does_on_the_same_weights():
    torch.manual_seed(0)
    for linear in (nn.Linear(12, 7), nn.Linear(12, 7, bias=False)):
        padded = RowPaddedLinear(linear.weight, linear.bias, 16)
        assert padded.weight is linear.weight and padded.bias is linear.bias
        for x in (torch.randn(5, 12), torch.randn(3, 7, 12), torch.randn(33, 12)):
            torch.testing.assert_close(padded(x), linear(x))


def test_a_row_padded_model_decodes_as_the_original():
    model = tiny_transformer().eval()
    reference = copy.deepcopy(model)
    pad_linear_rows(model, 16)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    # The projection tied to the target embedding multiplies by the embedding itself.
    assert model.output_proj.weight is model.tgt_embed.weight
    src = random_sources(6, model.vocab_size, seed=1)
    for cfg in (DecodeConfig(beam=1), DecodeConfig(beam=3)):
        ours, theirs = best_hypotheses(model, src, cfg), best_hypotheses(reference, src, cfg)
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]


@pytest.mark.skipif(not bf16_supported(torch.device("cpu")), reason="no native bf16")
def test_bf16_decoding_on_a_cpu_multiplies_a_few_row_counts_only(monkeypatch):
    model = prepare_model(tiny_transformer(), "cpu", "bf16")
    assert isinstance(model.output_proj, RowPaddedLinear)
    rows_seen = set()
    linear = F.linear

    def counting(x, weight, bias=None):
        rows_seen.add(x.reshape(-1, x.size(-1)).size(0))
        return linear(x, weight, bias)

    monkeypatch.setattr(F, "linear", counting)
    for seed, count in enumerate((1, 2, 3, 5, 7, 11, 13)):
        greedy_search(model, random_sources(count, model.vocab_size, seed=seed),
                      DecodeConfig(beam=1))
        beam_search(model, random_sources(count, model.vocab_size, seed=seed),
                    DecodeConfig(beam=3))
    assert rows_seen and all(rows == padded_rows(rows, DECODE_ROW_MULTIPLE)
                             for rows in rows_seen)
