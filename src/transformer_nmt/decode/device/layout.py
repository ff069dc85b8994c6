"""Linear layers laid out for decoding on a CPU: every matrix reordered once into
oneDNN's blocked layout for its products (`PackedLinear`), their rows padded to a few
sizes, or, for batch-invariant decoding, computed in tiles of a fixed number of rows.

nn.Linear keeps its weight as (out, in), and a product through it (MKL's in float32,
oneDNN's in bf16) packs the matrix into the kernel's blocked layout again at every call:
at a decoding step's few rows that copy costs more than the arithmetic, and the matrices
come from memory at every step. Packed once, the copy is gone from every step, in both
precisions. The results agree with nn.Linear's to float32 rounding: the kernels sum in
another order. A tied pre-softmax projection gets a packed copy of the embedding's
matrix, whose rows the embedding keeps for looking tokens up.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.model.transformer import Transformer


def packing_available() -> bool:
    """Whether this build of torch can pack matrices for oneDNN's products (x86 and ARM
    builds with oneDNN; elsewhere products run on the plain matrix)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


def packed_weight(weight: Tensor) -> Tensor | None:
    """weight (out, in) reordered into oneDNN's blocked layout for its products, a copy;
    None where it cannot be, and the plain matrix serves: no oneDNN in this build of
    torch, a matrix off the CPU, or a torch whose private reorder op is gone or fails
    (torch has no public one; tests/test_decode_device_layout.py says which path this
    torch takes)."""
    if not (packing_available() and weight.device.type == "cpu"):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
    except (AttributeError, RuntimeError):  # missing from torch.ops, or refused
        return None


class PackedProduct:
    """x W^T + b, with W (out, in) reordered once into oneDNN's layout for its
    products (float32 or bf16, on a CPU); the plain product where it cannot be."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        """weight (out, in) and bias (out,) or None; the packed matrix is a copy, so the
        caller's weight may be freed (or stay shared, for a tied embedding)."""
        weight = weight.detach()
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else bias.detach()
        self.packed = packed_weight(weight)
        self.weight = weight if self.packed is None else None

    def __call__(self, rows: Tensor) -> Tensor:
        """(rows, in) -> (rows, out)."""
        if self.packed is None:
            return F.linear(rows, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")


def _replace_linear_layers(model: nn.Module,
                           make: Callable[[Tensor, Tensor | None], nn.Module]) -> nn.Module:
    """`model` with each Transformer's pre-softmax projection, tied or not, computed by
    make(its weight, its logits bias) (the Transformer's `projector`), and every other
    nn.Linear replaced, in place, by make(weight, bias)."""
    transformers = [m for m in model.modules() if isinstance(m, Transformer)]
    for transformer in transformers:
        transformer.projector = make(transformer.projection_weight,
                                     transformer.logits_bias)
    # An untied projection's own layer is read through projection_weight only now.
    projections = {id(transformer.output_proj) for transformer in transformers}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and id(child) not in projections:
                setattr(parent, name, make(child.weight, child.bias))
    return model


DECODE_ROW_MULTIPLE = 4
"""What decoding's bf16 products on a CPU pad their rows to a multiple of, at least: a
lone sentence's beam of 4 is never padded (a multiple of 16 would keep fewer kernels, but
multiply four times the rows such a beam needs)."""


def padded_rows(count: int, multiple: int) -> int:
    """`count` rounded up to a multiple of `multiple`, or of an eighth of the power of two
    at or below `count` where that is larger: at most 8 sizes per doubling, at most 1/8
    of the rows added."""
    step = max(multiple, 1 << max(count.bit_length() - 4, 0))
    return -(-count // step) * step


class PackedLinear(nn.Module):
    """y = x W^T + b, as nn.Linear, by a PackedProduct of its matrix, on the rows of x
    padded with zeros to `padded_rows(rows, multiple)`.

    oneDNN keeps a kernel for every new number of rows it multiplies, in float32 as in
    bf16 (as transformer_nmt.runtime.compiles_per_shape says of the plain bf16 products
    elsewhere); a decoding step's rows change with every sentence that finishes or joins,
    so a long run meets a great many sizes and its memory grows with them. Padded, a run
    meets a few dozen; the extra rows cost little where a step's few rows leave the
    product bound by reading the weights.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, multiple: int) -> None:
        """weight (out, in) and bias (out,) or None; see PackedProduct."""
        super().__init__()
        self.product = PackedProduct(weight, bias)
        self.multiple = multiple
        self.out_features, self.in_features = self.product.out_features, self.product.in_features

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        rows = x.reshape(-1, self.in_features)  # (positions, in)
        count = rows.size(0)
        padding = self._padded(count) - count
        if padding:
            rows = F.pad(rows, (0, 0, 0, padding))  # (positions + padding, in)
        out = self._multiply(rows)[:count]  # (positions, out)
        return out.view(*x.shape[:-1], self.out_features)  # (..., out)

    def _padded(self, count: int) -> int:
        """The rows `count` rows are padded to: a few sizes (`padded_rows`)."""
        return padded_rows(count, self.multiple)

    def _multiply(self, rows: Tensor) -> Tensor:
        """(padded rows, in) -> (padded rows, out), one product."""
        return self.product(rows)


def pack_linear_layers(model: nn.Module, multiple: int) -> nn.Module:
    """`model` with every nn.Linear replaced, in place, by a PackedLinear of its weights,
    and each Transformer's pre-softmax projection by one of its weight (a packed copy of
    the embedding's matrix when tied: the embedding keeps its rows for looking tokens up)
    and its logits bias. For decoding in float32 or bf16 on a CPU."""
    return _replace_linear_layers(
        model, lambda weight, bias: PackedLinear(weight, bias, multiple))


BATCH_INVARIANT_TILE = 16
"""Rows of every product of batch-invariant decoding in the decoder: a few rows cost
about what one does, the product being bound by reading the weights, so a lone beam's
padding is nearly free, and a step of many rows makes few calls."""
ENCODER_TILE = 64
"""The same in the encoder, whose products take every source token of a batch at once:
larger tiles, fewer calls."""


class RowTiledLinear(PackedLinear):
    """y = x W^T + b, as nn.Linear, by a PackedProduct of its matrix, on the rows of x
    padded with zeros to a multiple of `tile`, one product of exactly `tile` rows at a time.

    oneDNN's and MKL's products on a CPU choose their blocking of the inner dimension, and
    so the order of each row's sums, by the number of rows: a row's result changes with
    the rows computed beside it. Within a product of a fixed number of rows, a row's
    result depends on that row alone (checked by tests/test_decode_invariant.py), so
    every row gets the same sums whatever its batch. One product shape per layer also
    keeps oneDNN's per-shape kernels to one.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, tile: int) -> None:
        """weight (out, in) and bias (out,) or None; see PackedProduct."""
        super().__init__(weight, bias, tile)
        self.tile = tile

    def _padded(self, count: int) -> int:
        """A multiple of the tile."""
        return count + -count % self.tile

    def _multiply(self, rows: Tensor) -> Tensor:
        """(tiles * tile, in) -> (tiles * tile, out), one product per tile."""
        tiles = rows.split(self.tile) or (rows,)  # no rows: one empty product
        return torch.cat([self.product(tile) for tile in tiles])


def tile_linear_rows(model: nn.Module, tile: int, encoder_tile: int) -> nn.Module:
    """`model` with every nn.Linear, and each Transformer's pre-softmax projection,
    replaced in place by a RowTiledLinear of the same weights, of `encoder_tile` rows in
    the encoder's layers and `tile` elsewhere: products whose rows' results do not
    depend on the other rows of the batch."""
    for transformer in [m for m in model.modules() if isinstance(m, Transformer)]:
        _replace_linear_layers(transformer.encoder_layers,
                               lambda weight, bias: RowTiledLinear(weight, bias, encoder_tile))
    return _replace_linear_layers(model, lambda weight, bias: RowTiledLinear(weight, bias, tile))
