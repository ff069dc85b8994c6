"""Linear layers laid out for decoding on a CPU: in float32 every matrix stored
transposed; in bf16 every product's rows padded to a few sizes, or, for batch-invariant
decoding, computed in tiles of a fixed number of rows.

nn.Linear keeps its weight as (out, in) and multiplies by its transpose. MKL's products
of the few dozen rows a decoding step has run faster when the matrix is stored
(in, out) instead (bench/RESULTS.md, "CPU decoding"), and so does beam search, every
translation unchanged. The results agree to float32 rounding: MKL may sum
in another order for some shapes.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
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
    Transformer's pre-softmax projection by one that adds its logits bias (one tied to the
    target embedding gets a transposed copy of its own: the embedding keeps its rows for
    looking tokens up, V × d_model more floats). For decoding on a CPU in float32.
    """
    return _replace_linear_layers(model, TransposedLinear)


def _replace_linear_layers(model: nn.Module,
                           make: Callable[[Tensor, Tensor | None], nn.Module]) -> nn.Module:
    """`model` with each Transformer's pre-softmax projection, tied or not, replaced by
    make(its weight, its logits bias), and every other nn.Linear, in place, by
    make(weight, bias)."""
    for transformer in [m for m in model.modules() if isinstance(m, Transformer)]:
        transformer.output_proj = make(transformer.projection_weight,
                                       transformer.projection_bias)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, make(child.weight, child.bias))
    return model


DECODE_ROW_MULTIPLE = 4
"""What decoding's bf16 products on a CPU pad their rows to a multiple of, at least: a
lone sentence's beam of 4 is never padded (a multiple of 16 kept fewer kernels but made
such a beam's products slower; bench/RESULTS.md)."""


def padded_rows(count: int, multiple: int) -> int:
    """`count` rounded up to a multiple of `multiple`, or of an eighth of the power of two
    at or below `count` where that is larger: at most 8 sizes per doubling, at most 1/8
    of the rows added."""
    step = max(multiple, 1 << max(count.bit_length() - 4, 0))
    return -(-count // step) * step


class RowPaddedLinear(nn.Module):
    """y = x W^T + b, as nn.Linear (sharing its weight and bias), computed on the rows of x
    padded with zeros to `padded_rows(rows, multiple)`.

    A bf16 product on a CPU keeps a kernel for every new number of rows
    (transformer_nmt.runtime.compiles_per_shape); a decoding step's rows change with every
    sentence that finishes or joins, so a long run met hundreds of sizes and its memory
    grew with them. Padded, a run meets a few dozen; the extra rows cost little where a
    step's few rows leave the product bound by reading the weights (bench/RESULTS.md,
    "bf16 decoding's kernels").
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, multiple: int) -> None:
        """weight (out, in) and bias (out,) or None, shared as they are."""
        super().__init__()
        self.weight, self.bias = weight, bias
        self.multiple = multiple
        self.out_features, self.in_features = self.weight.shape

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        rows = x.reshape(-1, self.in_features)  # (positions, in)
        count = rows.size(0)
        padding = padded_rows(count, self.multiple) - count
        if padding:
            rows = F.pad(rows, (0, 0, 0, padding))  # (positions + padding, in)
        out = F.linear(rows, self.weight, self.bias)[:count]  # (positions, out)
        return out.view(*x.shape[:-1], self.out_features)  # (..., out)


def pad_linear_rows(model: nn.Module, multiple: int) -> nn.Module:
    """`model` with every nn.Linear replaced, in place, by a RowPaddedLinear of the same
    weights, and each Transformer's pre-softmax projection by one over its weight (the
    embedding's matrix when tied: shared, not copied) and its logits bias. For decoding
    in bf16 on a CPU."""
    return _replace_linear_layers(
        model, lambda weight, bias: RowPaddedLinear(weight, bias, multiple))


BATCH_INVARIANT_TILE = 16
"""Rows of every bf16 product of batch-invariant decoding in the decoder: a lone beam of
4 padded to 16 decoded as fast as to 8, and a step of many rows makes half the calls
(bench/RESULTS.md, "Batch-invariant decoding")."""
ENCODER_TILE = 64
"""The same in the encoder, whose products take every source token of a batch at once:
larger tiles, fewer calls."""


class RowTiledLinear(nn.Module):
    """y = x W^T + b, as nn.Linear (sharing its weight and bias), computed on the rows of x
    padded with zeros to a multiple of `tile`, one product of exactly `tile` rows at a time.

    oneDNN's bf16 products on a CPU choose their blocking of the inner dimension, and so
    the order of each row's sums, by the number of rows: a row's result changed with the
    rows computed beside it (bench/RESULTS.md, "Batch-invariant decoding"). Within a
    product of a fixed number of rows, a row's result depends on that row alone (checked
    by tests/test_decode_invariant.py), so every row gets the same sums whatever its
    batch. One product shape per layer also keeps oneDNN's per-shape kernels to one.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, tile: int) -> None:
        """weight (out, in) and bias (out,) or None, shared as they are."""
        super().__init__()
        self.weight, self.bias = weight, bias
        self.tile = tile
        self.out_features, self.in_features = self.weight.shape

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        rows = x.reshape(-1, self.in_features)  # (positions, in)
        count = rows.size(0)
        padding = -count % self.tile
        if padding:
            rows = F.pad(rows, (0, 0, 0, padding))  # (positions + padding, in)
        tiles = rows.split(self.tile) or (rows,)  # no rows: one empty product
        out = torch.cat([F.linear(tile, self.weight, self.bias)
                         for tile in tiles])[:count]  # (positions, out)
        return out.view(*x.shape[:-1], self.out_features)  # (..., out)


def tile_linear_rows(model: nn.Module, tile: int, encoder_tile: int) -> nn.Module:
    """`model` with every nn.Linear, and each Transformer's pre-softmax projection,
    replaced in place by a RowTiledLinear of the same weights, of `encoder_tile` rows in
    the encoder's layers and `tile` elsewhere: bf16 products whose rows' results do not
    depend on the other rows of the batch."""
    for transformer in [m for m in model.modules() if isinstance(m, Transformer)]:
        _replace_linear_layers(transformer.encoder_layers,
                               lambda weight, bias: RowTiledLinear(weight, bias, encoder_tile))
    return _replace_linear_layers(model, lambda weight, bias: RowTiledLinear(weight, bias, tile))
