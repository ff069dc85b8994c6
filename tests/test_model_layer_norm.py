"""The LayerNorm that keeps its output for backward instead of its input
(model/layer_norm.py): nn.LayerNorm's outputs and gradients, and nn.LayerNorm's own path
where a zero weight would leave its input unrecoverable."""

from __future__ import annotations

import torch
from torch import nn

from transformer_nmt.model.layer_norm import OutputSavingLayerNorm


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
