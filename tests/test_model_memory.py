"""What a training step keeps for backward: less than with the standard modules, whose
gradients it has, in one traced graph. (The dropout and the LayerNorm themselves:
tests/test_model_dropout.py, tests/test_model_layer_norm.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_nmt.config import get_preset
from transformer_nmt.model import layers, transformer
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
