"""Layer normalization whose backward pass needs its output, not its input.

In the post-norm Transformer, every LayerNorm's output is the input of a linear layer
(the next sub-layer's projections), which autograd keeps for backward anyway; the
standard LayerNorm also keeps its own input, the residual sum. Recovering the
normalized input from the output, x_hat = (y - bias) / weight, lets backward do without
it: one tensor of (tokens, d_model) less per LayerNorm of a training step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _LayerNormFromOutput(torch.autograd.Function):
    """y = LayerNorm(x) over the last dimension, saving y and 1/std for backward."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        y, _, rstd = torch.native_layer_norm(x, (x.size(-1),), weight, bias, eps)
        ctx.save_for_backward(y, rstd, weight, bias)  # rstd: (*batch, 1)
        return y

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        y, rstd, weight, bias = ctx.saved_tensors
        x_hat = (y - bias).div_(weight)  # (*batch, d): the normalized input
        # native_layer_norm_backward normalizes its input with the mean and 1/std given;
        # x_hat already is normalized (mean 0, 1/std 1), and the true 1/std scales only
        # the input's gradient.
        grad_x, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
            grad_y.contiguous(), x_hat, (y.size(-1),), torch.zeros_like(rstd),
            torch.ones_like(rstd), weight, bias,
            list(ctx.needs_input_grad[:3]))
        if grad_x is not None:
            grad_x.mul_(rstd)
        return grad_x, grad_weight, grad_bias, None


class OutputSavingLayerNorm(nn.LayerNorm):
    """nn.LayerNorm (same parameters and state dict) that saves less for backward.

    The output-saving path is taken where it pays and is exact: in float32 training
    outside autocast (under autocast the next layer keeps its own reduced-precision
    copy, so the output is not shared), while no weight is zero (x_hat would be 0 / 0
    there), on the CPU, where checking that costs no device synchronization, and
    outside torch.compile, which plans its own memory. Otherwise it is the standard
    LayerNorm.
    """

    def forward(self, x: Tensor) -> Tensor:
        if (torch.is_grad_enabled() and x.requires_grad and x.dtype == torch.float32
                and not torch.compiler.is_compiling()
                and not torch.is_autocast_enabled(x.device.type) and x.device.type == "cpu"
                and bool(self.weight.ne(0).all())):
            return _LayerNormFromOutput.apply(x, self.weight, self.bias, self.eps)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
