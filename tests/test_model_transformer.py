"""Properties the model of sections 3.1-3.5 must have, on tiny models."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_nmt.config import PRESETS, ModelConfig, get_preset
from transformer_nmt.model.attention import scaled_dot_product_attention
from transformer_nmt.errors import UserError
from transformer_nmt.model.transformer import (Transformer, sinusoidal_encodings,
                                               sinusoidal_fairseq_encodings,
                                               sinusoidal_halves_encodings)

VOCAB = 53
PAD = 0


def tiny_config(**changes) -> ModelConfig:
    return replace(get_preset("tiny").model, dropout=0.0, **changes)


def random_batch(batch: int, src_len: int, tgt_len: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (batch, src_len), generator=generator)
    tgt = torch.randint(4, VOCAB, (batch, tgt_len), generator=generator)
    return src, tgt


def shrink(cfg: ModelConfig) -> ModelConfig:
    """The same architecture at 1/16 of the widths, so every preset builds in milliseconds."""
    return replace(cfg, d_model=cfg.d_model // 16, d_ff=cfg.d_ff // 16,
                   d_k=max(1, cfg.d_k // 16), d_v=max(1, cfg.d_v // 16))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_gives_logits_of_the_right_shape(name):
    torch.manual_seed(0)
    model = Transformer(shrink(PRESETS[name].model), VOCAB)
    src, tgt = random_batch(2, 7, 5)
    assert model(src, tgt).shape == (2, 5, VOCAB)


def test_causal_mask_hides_later_target_tokens():
    torch.manual_seed(0)
    model = Transformer(tiny_config(), VOCAB).eval()
    src, tgt = random_batch(2, 6, 8)
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, VOCAB, (2, 4))
    before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(before[:, :4], after[:, :4])
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("pre_norm", [False, True])
def test_padding_leaves_real_positions_unchanged(pre_norm):
    torch.manual_seed(0)
    model = Transformer(tiny_config(pre_norm=pre_norm), VOCAB).eval()
    src, tgt = random_batch(2, 6, 5)
    padded_src = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((2, 4), PAD)], dim=1)
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, :5], model(src, tgt))


def test_positional_encodings_follow_section_3_5():
    d_model = 16
    table = sinusoidal_encodings(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def marian_table(length: int, d_model: int) -> list[list[float]]:
    """Hugging Face's MarianSinusoidalPositionalEmbedding._init_weight, transcribed: the
    angle of column j is pos / 10000^(2 * (j // 2) / d), the sines of the even columns'
    angles fill the first ceil(d / 2) dimensions and the cosines of the odd ones the rest."""
    rows = []
    for pos in range(length):
        angles = [pos / 10000 ** (2 * (j // 2) / d_model) for j in range(d_model)]
        rows.append([math.sin(a) for a in angles[0::2]] + [math.cos(a) for a in angles[1::2]])
    return rows


def test_the_halves_table_holds_sines_then_cosines_of_the_same_angles():
    # d_model = 6, by hand: angles pos / 10000^(0/6), pos / 10000^(2/6), pos / 10000^(4/6).
    table = sinusoidal_halves_encodings(4, 6)
    for pos in range(4):
        angles = [pos, pos / 10000 ** (1 / 3), pos / 10000 ** (2 / 3)]
        expected = [math.sin(a) for a in angles] + [math.cos(a) for a in angles]
        assert table[pos].tolist() == pytest.approx(expected, abs=1e-6)
    # Odd d_model = 5: three sines (angles i = 0, 1, 2), two cosines (i = 0, 1).
    odd = sinusoidal_halves_encodings(4, 5)
    for pos in range(4):
        angles = [pos / 10000 ** (2 * i / 5) for i in range(3)]
        expected = [math.sin(a) for a in angles] + [math.cos(a) for a in angles[:2]]
        assert odd[pos].tolist() == pytest.approx(expected, abs=1e-6)
    for length, d_model in ((4, 6), (4, 5), (300, 32), (9, 7)):
        for ours, theirs in zip(sinusoidal_halves_encodings(length, d_model).tolist(),
                                marian_table(length, d_model)):
            assert ours == pytest.approx(theirs, abs=1e-6)


def fairseq_table(length: int, d_model: int) -> list[list[float]]:
    """fairseq's SinusoidalPositionalEmbedding.get_embedding, from its documented math:
    half = d // 2 frequencies w_i = exp(-i * ln(10000) / (half - 1)), row r holds the
    sines of r * w_i then their cosines (a zero column after them when d is odd), and
    position p is row p + padding_idx + 1 = p + 2. Here in double precision."""
    half = d_model // 2
    frequencies = [math.exp(-i * math.log(10000) / (half - 1)) for i in range(half)]
    return [[math.sin((pos + 2) * w) for w in frequencies]
            + [math.cos((pos + 2) * w) for w in frequencies] + [0.0] * (d_model % 2)
            for pos in range(length)]


def test_the_fairseq_table_holds_fairseqs_rows_from_row_two():
    # d_model = 6, by hand: frequencies 1, 10000^(-1/2), 10000^(-1); position 0 is row 2.
    table = sinusoidal_fairseq_encodings(3, 6)
    for pos in range(3):
        angles = [(pos + 2) * w for w in (1.0, 0.01, 0.0001)]
        expected = [math.sin(a) for a in angles] + [math.cos(a) for a in angles]
        assert table[pos].tolist() == pytest.approx(expected, abs=1e-6)
    for length, d_model in ((4, 6), (4, 5), (300, 32), (9, 7)):
        for ours, theirs in zip(sinusoidal_fairseq_encodings(length, d_model).tolist(),
                                fairseq_table(length, d_model)):
            assert ours == pytest.approx(theirs, abs=2e-5)  # float32 angles up to 301
    assert sinusoidal_fairseq_encodings(4, 5)[:, 4].abs().max() == 0


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal-halves", "sinusoidal-fairseq"])
def test_a_model_uses_its_table_and_extends_it_beyond_max_positions(positional):
    """Positions past max_positions are computed as the table would hold them: a model
    with a short table decodes a long sentence as one with a long table."""
    tables = {"sinusoidal": sinusoidal_encodings,
              "sinusoidal-halves": sinusoidal_halves_encodings,
              "sinusoidal-fairseq": sinusoidal_fairseq_encodings}
    torch.manual_seed(0)
    short = Transformer(tiny_config(positional=positional, max_positions=8), VOCAB).eval()
    long = Transformer(tiny_config(positional=positional, max_positions=32), VOCAB).eval()
    long.load_state_dict(short.state_dict())  # the tables are not in the state dict
    assert torch.equal(short.sinusoids, tables[positional](8, short.cfg.d_model))
    src, tgt = random_batch(2, 12, 11)
    torch.testing.assert_close(short(src, tgt), long(src, tgt))
    enc, cache = short.encode(src), short.new_cache()
    steps = [short.decode(tgt[:, i:i + 1], enc, cache).logits for i in range(11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), long(src, tgt))


def test_explicit_attention_equals_fused_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 6)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False
    explicit, weights = scaled_dot_product_attention(q, k, v, mask)
    fused = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(explicit, fused)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))
    assert weights[0, ..., 5:].abs().max() == 0


def test_weights_path_equals_fused_path_through_the_model():
    torch.manual_seed(0)
    model = Transformer(tiny_config(), VOCAB).eval()
    src, tgt = random_batch(3, 6, 5)
    enc = model.encode(src, need_weights=True)
    out = model.decode(tgt, enc, need_weights=True)
    torch.testing.assert_close(out.logits, model(src, tgt))
    assert len(enc.attention) == 2 and enc.attention[0].shape == (3, 4, 6, 6)
    assert out.self_attention[0].shape == (3, 4, 5, 5)
    assert out.cross_attention[1].shape == (3, 4, 5, 6)
    # Causal: nothing above the diagonal of the decoder's self-attention.
    assert torch.triu(out.self_attention[0], diagonal=1).abs().max() == 0


@pytest.mark.parametrize("changes", [dict(positional="sinusoidal"), dict(positional="learned"),
                                     dict(positional="sinusoidal-halves"),
                                     dict(positional="sinusoidal-fairseq",
                                          scale_embeddings=False),
                                     dict(positional="learned", tie_positions=False,
                                          pre_norm=True),
                                     dict(activation="swish", logits_bias=True),
                                     dict(activation="gelu", logits_bias=True,
                                          tie_embeddings="none")])
def test_cached_incremental_decoding_equals_full_forward(changes):
    torch.manual_seed(0)
    model = with_random_logits_bias(Transformer(tiny_config(**changes), VOCAB).eval())
    src, tgt = random_batch(3, 6, 7)
    full = model(src, tgt)
    enc, cache = model.encode(src), model.new_cache()
    steps = [model.decode(tgt[:, i:i + 1], enc, cache).logits for i in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    # Several new positions at once after a cached prefix.
    cache = model.new_cache()
    first = model.decode(tgt[:, :3], enc, cache).logits
    rest = model.decode(tgt[:, 3:], enc, cache).logits
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full)


def test_cache_reorder_follows_beams():
    torch.manual_seed(0)
    model = Transformer(tiny_config(), VOCAB).eval()
    src, tgt = random_batch(3, 6, 4)
    enc, cache = model.encode(src), model.new_cache()
    for i in range(3):
        model.decode(tgt[:, i:i + 1], enc, cache)
    order = torch.tensor([2, 0, 0])
    cache.reorder(order, sentences=order)
    step = model.decode(tgt[order, 3:4], enc.select(order), cache).logits
    torch.testing.assert_close(step[:, 0], model(src[order], tgt[order])[:, 3])


def test_beams_share_their_sentence_encoder_states():
    """Decoder rows g * r .. g * r + g - 1 attend to encoder row r: the same logits as
    with the encoder output repeated for every row, with and without a cache."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(), VOCAB).eval()
    src, tgt = random_batch(2, 6, 4)
    src[1, 4:] = 0  # padding: the mask must follow the rows too
    beams = torch.tensor([0, 0, 0, 1, 1, 1])
    tgt = torch.cat([tgt[beams][:, :1], torch.randint(4, VOCAB, (6, 3))], dim=1)
    repeated = model.decode(tgt, model.encode(src).select(beams)).logits
    enc = model.encode(src)
    torch.testing.assert_close(model.decode(tgt, enc).logits, repeated)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, i:i + 1], enc, cache).logits for i in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), repeated)
    # A sentence leaves and the beams of the other move around.
    cache = model.new_cache()
    model.decode(tgt[:, :2], enc, cache)
    rows = torch.tensor([5, 3, 3])
    cache.reorder(rows, sentences=torch.tensor([1]))
    step = model.decode(tgt[rows, 2:3], enc.select(torch.tensor([1])), cache).logits
    torch.testing.assert_close(step[:, 0], repeated[rows, 2])


def with_random_logits_bias(model: Transformer, seed: int = 5) -> Transformer:
    """`model` with its logits bias, where it has one, set to random values, so that it
    counts (it starts as zeros)."""
    if model.logits_bias is not None:
        generator = torch.Generator().manual_seed(seed)
        model.logits_bias.copy_(torch.randn(VOCAB, generator=generator))
    return model


@pytest.mark.parametrize("tie_embeddings", ["all", "none"])
def test_the_logits_bias_shifts_every_logit_by_exactly_its_value(tie_embeddings):
    torch.manual_seed(0)
    biased = Transformer(tiny_config(logits_bias=True, tie_embeddings=tie_embeddings),
                         VOCAB).eval()
    assert torch.equal(biased.logits_bias, torch.zeros(VOCAB))  # zeros until set
    plain = Transformer(tiny_config(tie_embeddings=tie_embeddings), VOCAB).eval()
    plain.load_state_dict({k: v for k, v in biased.state_dict().items() if k != "logits_bias"})
    with_random_logits_bias(biased)
    src, tgt = random_batch(2, 6, 5)
    torch.testing.assert_close(biased(src, tgt) - plain(src, tgt),
                               biased.logits_bias.expand(2, 5, VOCAB))
    states = biased(src, tgt, project=False)
    torch.testing.assert_close(F.linear(states, biased.projection_weight, biased.logits_bias),
                               biased(src, tgt))


def test_the_new_fields_default_to_the_paper_and_add_no_weights():
    cfg = tiny_config()
    assert (cfg.activation, cfg.positional, cfg.logits_bias) == ("relu", "sinusoidal", False)
    keys = set(Transformer(cfg, VOCAB).state_dict())
    assert "logits_bias" not in keys
    for changes in (dict(activation="gelu"), dict(positional="sinusoidal-halves")):
        assert set(Transformer(tiny_config(**changes), VOCAB).state_dict()) == keys
    biased = Transformer(tiny_config(logits_bias=True), VOCAB)
    assert set(biased.state_dict()) == keys | {"logits_bias"}
    # A buffer: stored, never trained, and not counted among the parameters.
    assert not biased.logits_bias.requires_grad
    assert all(parameter is not biased.logits_bias for parameter in biased.parameters())
    assert Transformer(cfg, VOCAB).logits_bias is None


def test_tied_weights_are_one_tensor():
    model = Transformer(tiny_config(), VOCAB)
    assert model.src_embed.weight is model.tgt_embed.weight
    assert model.output_proj is None
    names = [name for name, _ in model.named_parameters()]
    assert sum("embed" in name for name in names) == 1
    decoder_only = Transformer(tiny_config(tie_embeddings="decoder"), VOCAB)
    assert decoder_only.src_embed.weight is not decoder_only.tgt_embed.weight
    untied = Transformer(tiny_config(tie_embeddings="none"), VOCAB)
    assert untied.output_proj.weight is not untied.tgt_embed.weight


def test_embeddings_are_scaled_by_sqrt_d_model_unless_told_not_to():
    model = Transformer(tiny_config(), VOCAB).eval()
    tokens = torch.tensor([[5, 6]])
    expected = model.tgt_embed(tokens) * math.sqrt(32) + sinusoidal_encodings(2, 32)
    torch.testing.assert_close(model._embed(model.tgt_embed, None, tokens), expected)
    unscaled = Transformer(tiny_config(scale_embeddings=False), VOCAB).eval()
    expected = unscaled.tgt_embed(tokens) + sinusoidal_encodings(2, 32)
    torch.testing.assert_close(unscaled._embed(unscaled.tgt_embed, None, tokens), expected)


def test_learned_positions_take_a_table_per_stack_when_untied():
    """fairseq's encoder and decoder learn a position table each: the encoder adds
    src_positions, the decoder (and decoding row by row) positions; tied, one table."""
    torch.manual_seed(0)
    tied = Transformer(tiny_config(positional="learned"), VOCAB).eval()
    assert tied.src_positions is None and tied.source_positions is tied.positions
    model = Transformer(tiny_config(positional="learned", tie_positions=False), VOCAB).eval()
    assert set(model.state_dict()) == set(tied.state_dict()) | {"src_positions.weight"}
    src, tgt = random_batch(2, 6, 5)
    full = model(src, tgt)
    with torch.no_grad():
        model.src_positions.weight.add_(1.0)
    assert not torch.allclose(model(src, tgt), full)
    enc, cache = model.encode(src), model.new_cache()
    steps = [model.decode(tgt[:, i:i + 1], enc, cache).logits for i in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(src, tgt))
    with pytest.raises(UserError, match="tie_positions False needs learned positions"):
        tiny_config(tie_positions=False)


def copy_into_torch_transformer(model: Transformer) -> tuple[nn.Module, nn.Module]:
    """torch.nn's post-norm encoder and decoder stacks holding `model`'s weights."""
    cfg = model.cfg
    enc_layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, dropout=0.0,
                                           batch_first=True)
    dec_layer = nn.TransformerDecoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, dropout=0.0,
                                           batch_first=True)
    encoder = nn.TransformerEncoder(enc_layer, cfg.encoder_layers, enable_nested_tensor=False)
    decoder = nn.TransformerDecoder(dec_layer, cfg.decoder_layers)
    with torch.no_grad():
        for ours, theirs in zip(model.encoder_layers, encoder.layers):
            theirs.self_attn.in_proj_weight.copy_(ours.self_attn.qkv_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.self_attn.qkv_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.self_attn.out_proj.state_dict())
            theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.attn_block.norm.state_dict())
            theirs.norm2.load_state_dict(ours.ffn_block.norm.state_dict())
        for ours, theirs in zip(model.decoder_layers, decoder.layers):
            theirs.self_attn.in_proj_weight.copy_(ours.self_attn.qkv_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.self_attn.qkv_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.self_attn.out_proj.state_dict())
            cross = ours.cross_attn
            theirs.multihead_attn.in_proj_weight.copy_(
                torch.cat([cross.q_proj.weight, cross.kv_proj.weight]))
            theirs.multihead_attn.in_proj_bias.copy_(
                torch.cat([cross.q_proj.bias, cross.kv_proj.bias]))
            theirs.multihead_attn.out_proj.load_state_dict(cross.out_proj.state_dict())
            theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.self_attn_block.norm.state_dict())
            theirs.norm2.load_state_dict(ours.cross_attn_block.norm.state_dict())
            theirs.norm3.load_state_dict(ours.ffn_block.norm.state_dict())
    return encoder.eval(), decoder.eval()


def test_matches_torch_nn_transformer_with_the_same_weights():
    torch.manual_seed(0)
    cfg = tiny_config(d_k=8, d_v=8)  # torch.nn needs d_k = d_v = d_model / h
    model = Transformer(cfg, VOCAB).eval()
    for parameter in model.parameters():  # LayerNorms away from their identity init
        parameter.data.add_(0.05 * torch.randn_like(parameter))
    encoder, decoder = copy_into_torch_transformer(model)
    src, tgt = random_batch(2, 6, 5)
    src[1, 4:] = PAD
    ours = model(src, tgt)
    memory = encoder(model._embed(model.src_embed, None, src), src_key_padding_mask=src.eq(PAD))
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    hidden = decoder(model._embed(model.tgt_embed, None, tgt), memory, tgt_mask=causal,
                     memory_key_padding_mask=src.eq(PAD))
    torch.testing.assert_close(ours, model.project(hidden), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("tie_embeddings", ["all", "none"])
def test_unprojected_forward_is_the_decoder_output_before_the_projection(tie_embeddings):
    torch.manual_seed(0)
    model = Transformer(tiny_config(tie_embeddings=tie_embeddings), VOCAB).eval()
    src, tgt = random_batch(2, 6, 5)
    states = model(src, tgt, project=False)  # (2, 5, d_model)
    assert states.shape == (2, 5, model.cfg.d_model)
    torch.testing.assert_close(F.linear(states, model.projection_weight), model(src, tgt))

