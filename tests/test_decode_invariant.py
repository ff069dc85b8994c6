"""Batch-invariant decoding in fp32 and bf16 (decode/runtime/precision.py's
make_batch_invariant): a sentence gets the same tokens and scores whatever shares its
batch, bit for bit."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from transformer_nmt.config import DecodeConfig
from transformer_nmt.decode.attention.kernels import batch_invariant_attention
from transformer_nmt.decode.device.layout import PackedLinear, RowTiledLinear
from transformer_nmt.decode.runtime.precision import make_batch_invariant, prepare_model
from transformer_nmt.decode.search.searches import search
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model.attention import MultiHeadAttention
from transformer_nmt.runtime import bf16_supported
from search_fixtures import EOS, PAD, SPECIAL, tiny_transformer

PRECISIONS = ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not bf16_supported(torch.device("cpu")), reason="this CPU has no native bf16"))]

VOCAB = 40


@pytest.mark.parametrize("precision", PRECISIONS)
def test_tiled_products_give_each_row_what_it_gets_alone(precision):
    # An inner dimension of 2048, where oneDNN's products on an AVX-512 BF16 CPU summed a
    # row differently beside 1 and beside 22 other rows, in bf16 and in float32.
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 2048, generator=generator).to(dtype)
    bias = torch.randn(64, generator=generator).to(dtype)
    x = torch.randn(40, 2048, generator=generator).to(dtype)
    tiled = RowTiledLinear(weight, bias, 8)
    alone = torch.cat([tiled(row) for row in x.split(1)])  # (40, 64)
    for rows in (1, 3, 8, 9, 23, 40):
        assert torch.equal(tiled(x[:rows]), alone[:rows])
    assert torch.equal(tiled(x.view(5, 8, 2048)), alone.view(5, 8, 64))
    assert (tiled(x) - F.linear(x, weight, bias)).abs().max() < 0.1  # the same product
    assert tiled(x[:0]).shape == (0, 64)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_batch_invariant_attention_ignores_masked_padding(precision):
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, 8, 8, self_attention=False).to(dtype).eval()
    make_batch_invariant(attention)  # its projections tiled too: fp32's are not otherwise
    lengths = [3, 17, 40, 5]
    memory = torch.randn(len(lengths), 40 + 30, 32).to(dtype)  # padded beyond each length
    mask = torch.arange(memory.size(1)) < torch.tensor(lengths).unsqueeze(1)
    x = torch.randn(len(lengths), 1, 32).to(dtype)
    with torch.inference_mode():
        batch = attention(x, memory, mask=mask[:, None, None, :])[0]
        for row, length in enumerate(lengths):
            alone = attention(x[row: row + 1], memory[row: row + 1, :length],
                              mask=torch.ones(1, 1, 1, length, dtype=torch.bool))[0]
            assert torch.equal(batch[row], alone[0])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_batch_invariant_attention_gives_a_row_its_numbers_on_any_thread(precision):
    # float32's fused kernel on a CPU gave half the rows of a 16-row call other last bits
    # at two threads than alone: the row's numbers depended on the thread computing it.
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(16, 4, 1 if i == 0 else 48, 64, generator=generator).to(dtype)
               for i in range(3))
    mask = torch.ones(16, 1, 1, 48, dtype=torch.bool)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        batch = batch_invariant_attention(q, k, v, mask, whole=False)
        alone = [batch_invariant_attention(q[i: i + 1], k[i: i + 1], v[i: i + 1],
                                           mask[i: i + 1], whole=False) for i in range(16)]
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(batch[i], alone[i][0]) for i in range(16))


def _sentences(count: int, rng: random.Random) -> list[list[int]]:
    return [[rng.randrange(4, VOCAB) for _ in range(rng.randrange(1, 24))] for _ in range(count)]


def _source(batch: list[list[int]]) -> torch.Tensor:
    src = torch.full((len(batch), max(map(len, batch)) + 1), PAD, dtype=torch.long)
    for row, ids in enumerate(batch):
        src[row, : len(ids)] = torch.tensor(ids)
        src[row, len(ids)] = EOS
    return src


def _found(hyps) -> list[tuple[tuple[int, ...], float]]:
    return [(tuple(hyp.tokens), hyp.score) for hyp in hyps]


@pytest.fixture(scope="module", params=PRECISIONS)
def invariant_model(request):
    return prepare_model(tiny_transformer(VOCAB, seed=3), "cpu", request.param,
                         batch_invariant=True)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_sentence_decodes_alike_alone_and_in_any_batch(invariant_model, beam, seed):
    rng = random.Random(seed)
    sentences = _sentences(12, rng)
    cfg = DecodeConfig(beam=beam, nbest=beam, max_len_a=0.0, max_len_b=8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the batches below take every core: as a server's slots vary
    try:
        alone = [_found(search(invariant_model, _source([ids]), cfg, SPECIAL)[0])
                 for ids in sentences]
    finally:
        torch.set_num_threads(threads)
    for _ in range(3):  # the lockstep searches: random compositions and sizes
        order = list(range(len(sentences)))
        rng.shuffle(order)
        while order:
            rows = order[: rng.randrange(2, 9)]
            order = order[len(rows):]
            found = search(invariant_model, _source([sentences[i] for i in rows]), cfg, SPECIAL)
            for row, hyps in zip(rows, found):
                assert _found(hyps) == alone[row], (row, rows)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_without_the_setting_products_are_packed_and_padded(precision):
    model = prepare_model(tiny_transformer(VOCAB), "cpu", precision, batch_invariant=False)
    assert not any(isinstance(m, RowTiledLinear) for m in model.modules())
    assert any(isinstance(m, PackedLinear) for m in model.modules())
    assert not any(getattr(getattr(m, "kernel", None), "batch_invariant", False)
                   for m in model.modules())


def test_int8_is_not_touched_by_the_setting():
    # Its activations are quantized with one scale per product, the batch's largest:
    # no tiling of rows makes a row's numbers its own (bench/RESULTS.md).
    model = prepare_model(tiny_transformer(VOCAB), "cpu", "int8", batch_invariant=True)
    assert not any(isinstance(m, RowTiledLinear) for m in model.modules())
    assert not any(getattr(getattr(m, "kernel", None), "batch_invariant", False)
                   for m in model.modules())


def test_the_confidence_features_are_still_gathered(invariant_model):
    # The search's probe of the encoder-decoder attention works beside batch-invariant attention.
    sentences = _sentences(3, random.Random(5))
    cfg = DecodeConfig(beam=4, nbest=1, max_len_a=0.0, max_len_b=6)
    found = search(invariant_model, _source(sentences), cfg, SPECIAL, features=True)
    assert all(hyps[0].features is not None and len(hyps[0].features) == 4 for hyps in found)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_translator_setting_reaches_the_model(model_file, precision):
    # Off unless asked for (the server asks: serve/server.py's build_app).
    for asked, tiled in ((None, False), (False, False), (True, True)):
        translator = Translator.from_file(model_file, TranslatorOptions(
            precision=precision, batch_invariant=asked))
        assert translator.options.batch_invariant is tiled
        assert any(isinstance(m, RowTiledLinear) for m in translator.model.modules()) is tiled
