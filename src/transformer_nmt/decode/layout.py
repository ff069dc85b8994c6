"""Weights laid out for decoding on a CPU: every linear layer's matrix stored transposed.

nn.Linear keeps its weight as (out, in) and multiplies by its transpose. MKL's products
of the few dozen rows a decoding step has run faster when the matrix is stored
(in, out) instead (bench/RESULTS.md, "CPU decoding"), and so does beam search, every
translation unchanged. The results agree to float32 rounding: MKL may sum
in another order for some shapes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer_nmt.model.transformer import Transformer


class TransposedLinear(nn.Module):
    """y = x W^T + b, as nn.Linear, with W kept as its transpose (in, out), contiguous."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        """weight (out, in), as nn.Linear holds it; bias (out,) or None."""
        super().__init__()
        self.weight_t = nn.Parameter(weight.detach().t().contiguous(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.in_features, self.out_features = self.weight_t.shape

    @property
    def weight(self) -> Tensor:
        """(out, in) the matrix as nn.Linear holds it (a view)."""
        return self.weight_t.t()

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        rows = x.reshape(-1, self.in_features)  # (positions, in)
        if self.bias is None:
            out = rows @ self.weight_t
        else:
            out = torch.addmm(self.bias, rows, self.weight_t)
        return out.view(*x.shape[:-1], self.out_features)  # (..., out)


def transpose_linear_layers(model: nn.Module) -> nn.Module:
    """`model` with every nn.Linear replaced, in place, by a TransposedLinear, and each
    Transformer's pre-softmax projection tied to its target embedding given a transposed
    copy of its own (the embedding keeps its rows for looking tokens up: V × d_model more
    floats). For decoding on a CPU in float32.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, TransposedLinear(child.weight, child.bias))
    for transformer in [m for m in model.modules() if isinstance(m, Transformer)]:
        if transformer.output_proj is None:
            transformer.output_proj = TransposedLinear(transformer.tgt_embed.weight, None)
    return model
