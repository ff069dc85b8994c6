"""The position-wise FFN and the encoder and decoder layers (model/layers.py), one by one."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from transformer_nmt.config import ModelConfig, get_preset
from transformer_nmt.model.cache import KVCache
from transformer_nmt.model.layers import DecoderLayer, EncoderLayer, FeedForward

BATCH, SRC_LEN, TGT_LEN = 2, 5, 4


def config(**changes) -> ModelConfig:
    """The tiny preset without dropout, heads whose keys and values differ in width."""
    return replace(get_preset("tiny").model, dropout=0.0, heads=3, d_k=6, d_v=10, **changes)


def inputs(cfg: ModelConfig, seed: int = 0):
    """Decoder input (batch, tgt_len, d), encoder memory (batch, src_len, d), memory mask
    (batch, 1, 1, src_len) with the last source position of the second row padding."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, TGT_LEN, cfg.d_model, generator=generator)
    memory = torch.randn(BATCH, SRC_LEN, cfg.d_model, generator=generator)
    mask = torch.ones(BATCH, 1, 1, SRC_LEN, dtype=torch.bool)
    mask[1, ..., -1] = False
    return x, memory, mask


def with_random_norms(layer: torch.nn.Module) -> torch.nn.Module:
    """Layer norms away from their identity initialisation, so that they count."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            if ".norm." in f".{name}":
                parameter.copy_(1 + 0.5 * torch.randn(parameter.shape, generator=generator))
    return layer.eval()


def test_ffn_is_equation_2_on_hand_computed_numbers():
    ffn = FeedForward(d_model=2, d_ff=3)
    with torch.no_grad():
        ffn.linear1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]))
        ffn.linear1.bias.copy_(torch.tensor([0.0, -1.0, 0.5]))
        ffn.linear2.weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]]))
        ffn.linear2.bias.copy_(torch.tensor([0.25, -0.5]))
    x = torch.tensor([[[2.0, 3.0], [-1.0, 1.0]]])  # (batch 1, len 2, d_model 2)
    # Position 1: x W1 + b1 = (2, 3 - 1, 2 - 3 + 0.5) = (2, 2, -0.5) -> ReLU (2, 2, 0)
    #             then W2 + b2: (2 + 4 + 0 + 0.25, -2 + 0 + 0 - 0.5) = (6.25, -2.5).
    # Position 2: x W1 + b1 = (-1, 0, -1.5) -> ReLU (0, 0, 0) -> b2 = (0.25, -0.5).
    expected = torch.tensor([[[6.25, -2.5], [0.25, -0.5]]])
    assert torch.equal(ffn(x), expected)
    assert torch.equal(x, torch.tensor([[[2.0, 3.0], [-1.0, 1.0]]]))  # input untouched


def test_ffn_equals_max_0_x_w1_b1_w2_b2_and_acts_on_each_position_alone():
    torch.manual_seed(0)
    ffn = FeedForward(d_model=8, d_ff=16)
    x = torch.randn(3, 5, 8)
    w1, b1 = ffn.linear1.weight.T, ffn.linear1.bias
    w2, b2 = ffn.linear2.weight.T, ffn.linear2.bias
    expected = torch.maximum(torch.zeros(()), x @ w1 + b1) @ w2 + b2
    torch.testing.assert_close(ffn(x), expected)
    order = torch.tensor([4, 0, 3, 1, 2])
    torch.testing.assert_close(ffn(x[:, order]), ffn(x)[:, order])


# Each activation written out from its definition: swish(h) = h * sigmoid(h) (Marian's),
# gelu(h) = h * Phi(h) with Phi the standard normal CDF, exact (Hugging Face's "gelu").
FORMULAS = {
    "relu": lambda h: max(h, 0.0),
    "swish": lambda h: h / (1 + math.exp(-h)),
    "gelu": lambda h: h * 0.5 * (1 + math.erf(h / math.sqrt(2))),
}


@pytest.mark.parametrize("activation", sorted(FORMULAS))
def test_each_activation_is_its_formula_on_hand_computed_numbers(activation):
    ffn = FeedForward(d_model=1, d_ff=4, activation=activation)
    with torch.no_grad():  # hidden = x W1 + b1 = (-2x, -x, x, 2x) + (0, 0.5, 0, -0.5)
        ffn.linear1.weight.copy_(torch.tensor([[-2.0], [-1.0], [1.0], [2.0]]))
        ffn.linear1.bias.copy_(torch.tensor([0.0, 0.5, 0.0, -0.5]))
        ffn.linear2.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
        ffn.linear2.bias.zero_()
    x = torch.tensor([[[0.75], [-1.5]]])  # (batch 1, len 2, d_model 1)
    expected = []
    for value in (0.75, -1.5):
        hidden = (-2 * value, 0.5 - value, value, 2 * value - 0.5)
        expected.append(sum(weight * FORMULAS[activation](h)
                            for weight, h in zip((1.0, 2.0, 3.0, 4.0), hidden)))
    # float32 against float64: far closer than GELU's tanh approximation (1e-4 here)
    torch.testing.assert_close(ffn(x), torch.tensor([[[expected[0]], [expected[1]]]]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_the_layers_ffn_takes_the_configured_activation(layer_class):
    x = torch.linspace(-3, 3, 7)
    expected = {"relu": torch.relu(x), "swish": x * torch.sigmoid(x),
                "gelu": x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))}
    for activation, values in expected.items():
        ffn = layer_class(config(activation=activation)).ffn
        torch.testing.assert_close(ffn.activation(x.clone()), values)
    assert len({tuple(values.tolist()) for values in expected.values()}) == 3


def test_encoder_layer_shapes_and_weights_over_real_keys_only():
    cfg = config()
    torch.manual_seed(0)
    layer = EncoderLayer(cfg).eval()
    _, x, mask = inputs(cfg)
    out, weights = layer(x, mask)
    assert out.shape == (BATCH, SRC_LEN, cfg.d_model) and weights is None
    out_with_weights, weights = layer(x, mask, need_weights=True)
    assert weights.shape == (BATCH, cfg.heads, SRC_LEN, SRC_LEN)
    torch.testing.assert_close(out_with_weights, out)
    torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, cfg.heads, SRC_LEN))
    assert torch.all(weights[1, :, :, -1] == 0) and torch.all(weights[0, :, :, -1] > 0)


def test_decoder_layer_shapes():
    cfg = config()
    torch.manual_seed(0)
    layer = DecoderLayer(cfg).eval()
    x, memory, mask = inputs(cfg)
    out, self_weights, cross_weights = layer(x, memory, mask)
    assert out.shape == (BATCH, TGT_LEN, cfg.d_model)
    assert self_weights is None and cross_weights is None
    out_with_weights, self_weights, cross_weights = layer(x, memory, mask, need_weights=True)
    torch.testing.assert_close(out_with_weights, out)
    assert self_weights.shape == (BATCH, cfg.heads, TGT_LEN, TGT_LEN)
    assert cross_weights.shape == (BATCH, cfg.heads, TGT_LEN, SRC_LEN)
    # Causal: no query attends to a later position; padding: no query attends to it.
    allowed = torch.ones(TGT_LEN, TGT_LEN, dtype=torch.bool).tril()
    assert torch.all(self_weights[..., ~allowed] == 0) and torch.all(self_weights[..., allowed] > 0)
    assert torch.all(cross_weights[1, ..., -1] == 0)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_wraps_each_sublayer_as_section_3_1_says(pre_norm):
    cfg = config(pre_norm=pre_norm)
    torch.manual_seed(0)
    layer = with_random_norms(EncoderLayer(cfg))
    _, x, mask = inputs(cfg)
    attend = lambda h: layer.self_attn(h, mask=mask)[0]  # noqa: E731
    norm1, norm2 = layer.attn_block.norm, layer.ffn_block.norm
    if pre_norm:  # x + Sublayer(LayerNorm(x))
        h = x + attend(norm1(x))
        expected = h + layer.ffn(norm2(h))
    else:  # LayerNorm(x + Sublayer(x))
        h = norm1(x + attend(x))
        expected = norm2(h + layer.ffn(h))
    torch.testing.assert_close(layer(x, mask)[0], expected)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_wraps_each_sublayer_as_section_3_1_says(pre_norm):
    cfg = config(pre_norm=pre_norm)
    torch.manual_seed(0)
    layer = with_random_norms(DecoderLayer(cfg))
    x, memory, mask = inputs(cfg)
    attend_self = lambda h: layer.self_attn(h, causal=True)[0]  # noqa: E731
    attend_memory = lambda h: layer.cross_attn(h, memory, mask=mask)[0]  # noqa: E731
    norms = (layer.self_attn_block.norm, layer.cross_attn_block.norm, layer.ffn_block.norm)
    h = x
    for norm, sublayer in zip(norms, (attend_self, attend_memory, layer.ffn)):
        h = h + sublayer(norm(h)) if pre_norm else norm(h + sublayer(h))
    torch.testing.assert_close(layer(x, memory, mask)[0], h)


def test_post_norm_output_is_normalized_and_pre_norm_keeps_the_residual_stream():
    _, x, mask = inputs(config())
    x = 5 * x + 3  # far from normalized
    for pre_norm in (False, True):
        torch.manual_seed(0)
        layer = EncoderLayer(config(pre_norm=pre_norm)).eval()
        with torch.no_grad():  # sub-layers that output nothing
            for linear in (layer.self_attn.out_proj, layer.ffn.linear2):
                linear.weight.zero_()
                linear.bias.zero_()
        out = layer(x, mask)[0]
        if pre_norm:
            assert torch.equal(out, x)
        else:
            torch.testing.assert_close(out.mean(-1), torch.zeros(out.shape[:-1]),
                                       atol=1e-5, rtol=0)
            torch.testing.assert_close(out.var(-1, unbiased=False),
                                       torch.ones(out.shape[:-1]), atol=1e-3, rtol=0)


@pytest.mark.parametrize("chunks", [[1, 1, 1, 1], [2, 2], [1, 3]],
                         ids=["one-at-a-time", "pairs", "one-then-three"])
@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_cached_incremental_steps_equal_the_full_causal_pass(chunks, pre_norm):
    cfg = config(pre_norm=pre_norm)
    torch.manual_seed(0)
    layer = DecoderLayer(cfg).eval()
    x, memory, mask = inputs(cfg)
    full, full_self, full_cross = layer(x, memory, mask, need_weights=True)
    self_cache, cross_cache = KVCache(), KVCache(memory=True)
    outputs, start = [], 0
    for size in chunks:
        step, step_self, step_cross = layer(x[:, start: start + size], memory, mask,
                                            self_cache=self_cache, cross_cache=cross_cache,
                                            need_weights=True)
        torch.testing.assert_close(step_self, full_self[:, :, start: start + size,
                                                         : start + size])
        torch.testing.assert_close(step_cross, full_cross[:, :, start: start + size])
        outputs.append(step)
        start += size
    assert self_cache.length == TGT_LEN and cross_cache.length == SRC_LEN
    torch.testing.assert_close(torch.cat(outputs, dim=1), full)


def test_a_later_target_position_does_not_change_earlier_outputs():
    cfg = config()
    torch.manual_seed(0)
    layer = DecoderLayer(cfg).eval()
    x, memory, mask = inputs(cfg)
    changed = x.clone()
    changed[:, -1] += 10
    before, after = layer(x, memory, mask)[0], layer(changed, memory, mask)[0]
    torch.testing.assert_close(after[:, :-1], before[:, :-1])
    assert not torch.allclose(after[:, -1], before[:, -1])


@pytest.mark.parametrize("rate", ["dropout", "attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_each_dropout_is_off_in_eval_mode_and_on_in_training(layer_class, rate):
    noisy = replace(config(), **{rate: 0.3})
    torch.manual_seed(0)
    layer = layer_class(noisy)
    quiet = layer_class(config())
    quiet.load_state_dict(layer.state_dict())
    x, memory, mask = inputs(noisy)
    run = ((lambda m: m(memory, mask)[0]) if layer_class is EncoderLayer
           else (lambda m: m(x, memory, mask)[0]))

    layer.eval()
    with torch.no_grad():
        first, second = run(layer), run(layer)
        assert torch.equal(first, second)
        torch.testing.assert_close(first, run(quiet.eval()))

        layer.train()
        torch.manual_seed(1)
        trained_once = run(layer)
        torch.manual_seed(2)
        assert not torch.allclose(trained_once, run(layer))
        assert not torch.allclose(trained_once, first)
