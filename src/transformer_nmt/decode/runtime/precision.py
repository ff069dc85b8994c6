"""A model made ready to decode in a precision: fp32 as it is, bf16 weights, or int8
dynamic quantization of the linear layers (the rules of which device takes which
precision are transformer_nmt.runtime's), and the dtype its decoding caches keep keys and
values in."""

from __future__ import annotations

import gc
import warnings

import torch
from torch import nn

from transformer_nmt.decode.attention.kernels import install_kernels
from transformer_nmt.decode.device.layout import (BATCH_INVARIANT_TILE, DECODE_ROW_MULTIPLE,
                                                  ENCODER_TILE, pack_linear_layers,
                                                  tile_linear_rows)
from transformer_nmt.memory import release_free_memory
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.runtime import bf16_supported, compiles_per_shape, resolve_runtime


def prepare_model(model: nn.Module, device: str | torch.device | None, precision: str,
                  batch_invariant: bool = False) -> nn.Module:
    """`model` made ready to decode on `device` in `precision`, in eval mode, in place
    (so that two copies never need memory at once; pass a copy to keep the original).
    On a CPU, fp32 and bf16 keep every linear layer's matrix packed for oneDNN's
    products, their rows padded to a few sizes (layout.pack_linear_layers), or, with
    batch_invariant, the model is made batch-invariant (`make_batch_invariant`);
    batch_invariant changes nothing in int8 or on a GPU. bf16 and int8 on a CPU attend
    with decoding's kernel (decode/attention/kernels.py).

    bf16 converts the weights once rather than using autocast, which casts every
    operation's inputs again at each decoding step and was measured slower on a CPU with
    native bf16. int8: `quantize`, and keys and values cached in
    transformer_nmt.decode.attention.kv_cache's `cache_dtype`.
    """
    device = resolve_runtime(device, precision).device
    if device.type == "cuda":
        leave_out_per_shape_attention()
    if precision in ("fp32", "bf16"):
        dtype = torch.float32 if precision == "fp32" else torch.bfloat16
        model = model.to(device=device, dtype=dtype).eval()
        if device.type == "cpu":
            if batch_invariant:
                make_batch_invariant(model)
            else:
                if compiles_per_shape(device, precision):
                    install_kernels(model)
                pack_linear_layers(model, DECODE_ROW_MULTIPLE)
            release_free_memory()  # the matrices as they were before packing
        return model
    quantized = install_kernels(quantize(model.to("cpu").eval()))
    # The float Linear modules that quantization replaced stay alive in reference cycles
    # (through their qconfig's closures) until a garbage collection: with the base model
    # a sizeable share of a beam search's peak memory.
    gc.collect()
    release_free_memory()
    return quantized


def quantize(model: nn.Module) -> nn.Module:
    """`model` (float, on a CPU) with every nn.Linear, and the pre-softmax projection
    tied to the target embedding, replaced in place by a dynamically quantized one (int8
    weights per output channel, activations quantized per batch)."""
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of the separate torchao package,
        # but still works in this torch; users need not hear about it.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.ao\.")
        for transformer in [m for m in model.modules() if isinstance(m, Transformer)]:
            # The pre-softmax projection, by hand: when tied, project() multiplies by the
            # embedding matrix, which quantize_dynamic cannot see, and at 8000+ rows it is
            # the largest product of a decoding step; the logits bias is not an nn.Linear's
            # either. An int8 copy of the weight (the embedding stays float) with the bias.
            bias = transformer.logits_bias
            projection = nn.Linear(transformer.cfg.d_model, transformer.vocab_size,
                                   bias=bias is not None)
            projection.weight = nn.Parameter(transformer.projection_weight.detach())
            if bias is not None:
                projection.bias = nn.Parameter(bias.detach())
            projection.qconfig = qconfig
            transformer.projector = torch.ao.nn.quantized.dynamic.Linear.from_float(
                projection)
            if transformer.output_proj is not None:  # read through projection_weight only
                transformer.output_proj.qconfig = None
        return torch.ao.quantization.quantize_dynamic(
            model, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)


def make_batch_invariant(model: nn.Module) -> nn.Module:
    """`model` (fp32 or bf16, on a CPU) changed in place so that each row of a decoding batch
    gets the numbers it gets alone: its products in fixed tiles of rows
    (layout.RowTiledLinear), its attention over as many keys as the row has, rounded up
    (kernels.batch_invariant_attention). Everything else a step computes (layer
    norms, softmax, top-k) already works row by row."""
    tile_linear_rows(model, BATCH_INVARIANT_TILE, ENCODER_TILE)
    return install_kernels(model, batch_invariant=True)


def leave_out_per_shape_attention() -> None:
    """Stop SDPA from choosing cuDNN's attention in this process (a GPU decodes).

    cuDNN's attention builds an execution graph for every new shape, and a decoding step
    has a new key length at every step: a bf16 search on a GPU, which PyTorch sent to
    cuDNN, barely progressed, where fp32, which cuDNN's attention does not take, decoded at once. Flash and
    memory-efficient attention take the same inputs with no per-shape cost. The switch is
    process-wide, not a context around the search, because SDPA's backend flags are
    global and the engine decodes from several threads; training leaves cuDNN's
    attention out as well (training/precision.py).
    """
    torch.backends.cuda.enable_cudnn_sdp(False)
