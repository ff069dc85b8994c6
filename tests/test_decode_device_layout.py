"""Linear layers laid out for decoding on a CPU (decode/device/layout.py): matrices packed
once for oneDNN's products, in float32 and bf16, their rows padded to a few sizes."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from search_fixtures import random_sources, tiny_transformer
from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.device import layout
from transformer_nmt.decode.device.layout import (DECODE_ROW_MULTIPLE, PackedLinear,
                                                  PackedProduct, pack_linear_layers,
                                                  padded_rows)
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.runtime import bf16_supported

PRECISIONS = ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not bf16_supported(torch.device("cpu")), reason="no native bf16"))]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def best_hypotheses(model, src, cfg):
    """Each source's best hypothesis: greedy for beam 1, else beam search's first."""
    if cfg.beam == 1:
        return greedy_search(model, src, cfg)
    return [best[0] for best in beam_search(model, src, cfg)]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_packed_linear_computes_what_linear_does(precision):
    torch.manual_seed(0)
    dtype = DTYPES[precision]
    tolerance = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else {}
    for linear in (nn.Linear(12, 7), nn.Linear(12, 7, bias=False)):
        linear = linear.to(dtype)
        packed = PackedLinear(linear.weight, linear.bias, 16)
        assert (packed.product.packed is not None) is layout.packing_available()
        for x in (torch.randn(5, 12), torch.randn(3, 7, 12), torch.randn(33, 12),
                  torch.randn(0, 12)):
            x = x.to(dtype)
            torch.testing.assert_close(packed(x), linear(x), **tolerance)


def test_the_plain_product_serves_where_nothing_can_pack(monkeypatch):
    monkeypatch.setattr(layout, "packing_available", lambda: False)
    linear = nn.Linear(12, 7)
    product = PackedProduct(linear.weight, linear.bias)
    assert product.packed is None
    x = torch.randn(4, 12)
    assert torch.equal(product(x), linear(x))


@pytest.mark.skipif(not layout.packing_available(), reason="this torch has no oneDNN: "
                    "products run on the plain matrices")
def test_this_torch_packs_matrices_with_its_private_reorder():
    assert layout.packed_weight(torch.randn(7, 12)) is not None, (
        f"torch {torch.__version__} has oneDNN but its torch.ops.mkldnn."
        "_reorder_linear_weight(weight, None) is gone or fails: decoding on a CPU now "
        "multiplies the plain matrices, packing them again at every step; find the op "
        "that reorders a matrix for torch.ops.mkldnn._linear_pointwise in this torch and "
        "call it in decode/device/layout.py's packed_weight")


def refusing(*args):
    raise RuntimeError("no such reorder")


def missing(*args):
    raise AttributeError("'_OpNamespace' 'mkldnn' object has no attribute "
                         "'_reorder_linear_weight'")


@pytest.mark.parametrize("op", [refusing, missing], ids=["refused", "missing"])
def test_without_torch_s_reorder_the_plain_matrices_compute_what_linear_does(monkeypatch,
                                                                              op):
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", op)
    torch.manual_seed(0)
    for linear in (nn.Linear(12, 7), nn.Linear(12, 7, bias=False)):
        product = PackedProduct(linear.weight, linear.bias)
        assert product.packed is None and product.weight is not None
        packed = PackedLinear(linear.weight, linear.bias, 16)
        for x in (torch.randn(5, 12), torch.randn(3, 7, 12), torch.randn(0, 12)):
            assert torch.equal(product(x.reshape(-1, 12)), linear(x).reshape(-1, 7))
            torch.testing.assert_close(packed(x), linear(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_packed_model_decodes_as_the_original(precision):
    dtype = DTYPES[precision]
    model = tiny_transformer().eval().to(dtype)
    reference = copy.deepcopy(model)
    pack_linear_layers(model, 16)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    # The projection tied to the target embedding gets a packed copy; the embedding
    # keeps its rows for looking tokens up.
    assert isinstance(model.projector, PackedLinear)
    assert torch.equal(model.tgt_embed.weight, reference.tgt_embed.weight)
    src = random_sources(6, model.vocab_size, seed=1)
    tgt = random_sources(6, model.vocab_size, seed=2)
    if dtype == torch.float32:
        with torch.inference_mode():
            torch.testing.assert_close(model(src, tgt), reference(src, tgt),
                                       atol=1e-4, rtol=1e-4)
    for cfg in (DecodeConfig(beam=1), DecodeConfig(beam=3)):
        ours, theirs = best_hypotheses(model, src, cfg), best_hypotheses(reference, src, cfg)
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        if dtype == torch.float32:
            for a, b in zip(ours, theirs):
                assert abs(a.score - b.score) < 1e-4


def test_padded_rows_come_in_few_sizes_and_add_at_most_an_eighth():
    sizes = {padded_rows(count, 16) for count in range(1, 4097)}
    assert len(sizes) <= 48  # against 4096 unpadded
    for count in range(1, 4097):
        padded = padded_rows(count, 16)
        assert padded % 16 == 0 and count <= padded
        assert padded - count < max(16, count / 8)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_decoding_on_a_cpu_multiplies_packed_matrices_at_a_few_row_counts(precision,
                                                                          monkeypatch):
    model = prepare_model(tiny_transformer(), "cpu", precision)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert isinstance(model.projector, PackedLinear)
    rows_seen = set()
    product = PackedProduct.__call__

    def counting(self, rows):
        rows_seen.add(rows.size(0))
        return product(self, rows)

    monkeypatch.setattr(PackedProduct, "__call__", counting)
    for seed, count in enumerate((1, 2, 3, 5, 7, 11, 13)):
        greedy_search(model, random_sources(count, model.vocab_size, seed=seed),
                      DecodeConfig(beam=1))
        beam_search(model, random_sources(count, model.vocab_size, seed=seed),
                    DecodeConfig(beam=3))
    assert rows_seen and all(rows == padded_rows(rows, DECODE_ROW_MULTIPLE)
                             for rows in rows_seen)


def test_int8_keeps_its_quantized_products():
    # Only prepare_model's fp32 and bf16 pack; int8's layers are quantized instead.
    model = prepare_model(tiny_transformer(), "cpu", "int8")
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
