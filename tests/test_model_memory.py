"""What a training step keeps for backward: bool dropout masks, LayerNorms that keep
their output instead of their input, and the same gradients as the standard modules."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_nmt.config import get_preset
from transformer_nmt.model import layers, transformer
from transformer_nmt.model.dropout import bool_mask_dropout
from transformer_nmt.model.layer_norm import OutputSavingLayerNorm
from transformer_nmt.model.transformer import Transformer

VOCAB = 53


def saved_bytes(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd keeps for backward, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(src, tgt, project=False)
    return sum(storages.values())


@pytest.fixture
def standard_modules(monkeypatch):
    """Swap in F.dropout and nn.LayerNorm's forward, as a model built from torch.nn has."""
    def use() -> None:
        monkeypatch.setattr(layers, "bool_mask_dropout", F.dropout)
        monkeypatch.setattr(transformer, "bool_mask_dropout", F.dropout)
        monkeypatch.setattr(OutputSavingLayerNorm, "forward", nn.LayerNorm.forward)
    return use


def test_layer_norm_keeping_its_output_has_the_standard_gradients():
    torch.manual_seed(0)
    standard, ours = nn.LayerNorm(16), OutputSavingLayerNorm(16)
    with torch.no_grad():  # weights of both signs, none zero, and a bias
        standard.weight.copy_(torch.randn(16).sign() * (0.5 + torch.rand(16)))
        standard.bias.normal_()
    ours.load_state_dict(standard.state_dict())
    x = (3 * torch.randn(4, 5, 16) + 1).requires_grad_()
    grad = torch.randn(4, 5, 16)
    results = []
    for norm in (standard, ours):
        x.grad = None
        y = norm(x)
        y.backward(grad)
        results.append((y, x.grad, norm.weight.grad, norm.bias.grad))
    assert "NativeLayerNorm" not in type(results[1][0].grad_fn).__name__  # the new path ran
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_layer_norm_with_a_zero_weight_takes_the_standard_path():
    norm = OutputSavingLayerNorm(8)
    with torch.no_grad():
        norm.weight[3] = 0.0
    y = norm(torch.randn(2, 8, requires_grad=True))
    assert type(y.grad_fn).__name__ == "NativeLayerNormBackward0"


def test_dropout_zeroes_a_fraction_p_scales_the_rest_and_masks_the_gradient():
    torch.manual_seed(0)
    x = torch.rand(3000, 500) + 1.0  # no zeros of its own; more than one chunk of draws
    x.requires_grad_()
    y = bool_mask_dropout(x, 0.1, training=True)
    dropped = y.eq(0).view(-1, 4).float()  # every mask element's 16-bit lane of a word
    for lane in range(4):
        assert abs(dropped[:, lane].mean().item() - 0.1) < 0.005
    assert abs(y.view(-1)[2**20:].eq(0).float().mean().item() - 0.1) < 0.005  # second chunk
    kept = y.ne(0)
    scale = 65536 / round(0.9 * 65536)  # p rounded to a multiple of 1/65536
    torch.testing.assert_close(y[kept], x[kept] * scale)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * scale)
    assert bool_mask_dropout(x, 0.1, training=False) is x
    assert bool_mask_dropout(x, 0.0, training=True) is x


def test_dropout_masks_are_bool_and_follow_the_seed():
    x = torch.ones(3, 1000, requires_grad=True)
    saved: list[torch.Tensor] = []
    torch.manual_seed(1)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        first = bool_mask_dropout(x, 0.3, training=True)
    assert [(t.dtype, t.shape) for t in saved] == [(torch.bool, x.shape)]
    torch.manual_seed(1)
    assert torch.equal(first, bool_mask_dropout(x, 0.3, training=True))
    # p outside the 16-bit grid takes the exact path.
    assert bool_mask_dropout(x, 1.0, training=True).eq(0).all()


def test_a_training_forward_traces_as_one_graph():
    """torch.compile sees the whole training forward, dropout included: the CPU's mask
    draw (an in-place random fill) would split the graph at every dropout."""
    import torch._dynamo

    cfg = replace(get_preset("tiny").model, dropout=0.1)
    model = Transformer(cfg, VOCAB).train()
    src, tgt = torch.randint(4, VOCAB, (2, 5)), torch.randint(4, VOCAB, (2, 4))
    explained = torch._dynamo.explain(model)(src, tgt)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), \
        [b.reason for b in explained.break_reasons]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1,), (2, 3), (5, 4, 9)])
def test_dropout_of_any_size_dtype_and_layout_masks_consistently(dtype, shape):
    torch.manual_seed(0)
    x = (torch.rand(shape) + 1.0).to(dtype)
    for source in (x, x.transpose(0, -1)):  # contiguous, and (when 2-D or more) not
        source = source.detach().requires_grad_()
        y = bool_mask_dropout(source, 0.5, training=True)
        assert y.shape == source.shape and y.dtype == dtype
        kept = y.ne(0)
        torch.testing.assert_close(y[kept], source[kept] * 2)
        y.float().sum().backward()
        torch.testing.assert_close(source.grad, kept.to(dtype) * 2)


def test_a_training_forward_keeps_less_for_backward_than_the_standard_modules(standard_modules):
    cfg = replace(get_preset("tiny").model, dropout=0.1)
    torch.manual_seed(0)
    model = Transformer(cfg, VOCAB).train()
    batch, length = 3, 7
    src = torch.randint(4, VOCAB, (batch, length))
    tgt = torch.randint(4, VOCAB, (batch, length))
    ours = saved_bytes(model, src, tgt)
    standard_modules()
    standard = saved_bytes(model, src, tgt)
    activation = batch * length * cfg.d_model  # elements of one (batch, len, d_model)
    norms = 2 * cfg.encoder_layers + 3 * cfg.decoder_layers
    dropouts = norms + 2  # every sub-layer's output and both embeddings
    # Each LayerNorm input (4 bytes an element) but the decoder's last, whose output no
    # later layer keeps, and 3 of each dropout mask's 4 bytes.
    assert standard - ours >= activation * (4 * (norms - 1) + 3 * dropouts)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_model_gradients_equal_the_standard_modules_ones(standard_modules, pre_norm):
    cfg = replace(get_preset("tiny").model, dropout=0.0, pre_norm=pre_norm)
    torch.manual_seed(0)
    model = Transformer(cfg, VOCAB).train()
    for parameter in model.parameters():  # LayerNorms away from their identity init
        parameter.data.add_(0.05 * torch.randn_like(parameter))
    src = torch.randint(4, VOCAB, (2, 6))
    tgt = torch.randint(4, VOCAB, (2, 5))

    def gradients() -> list[torch.Tensor]:
        model.zero_grad()
        model(src, tgt).logsumexp(-1).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    ours = gradients()
    standard_modules()
    for a, b in zip(ours, gradients()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
