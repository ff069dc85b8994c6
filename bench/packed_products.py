"""A decoding step's products with their matrices as PyTorch keeps them and packed once for
oneDNN (transformer_nmt.decode.device.layout.PackedProduct), on this CPU (issue 51).

One step of a preset's decoder multiplies by each layer's six matrices (fused QKV,
self-attention output, encoder-decoder query and output, the two feed-forward ones) and
by the pre-softmax projection. Here those matrices are multiplied in turn, so that each
comes from memory as in a real step, at each --rows count and thread count, four ways:

- `fp32_plain`: `torch.addmm` on the matrix stored (in, out), what fp32 decoding did before
  (MKL, which packs the matrix again at every call);
- `fp32_packed`: oneDNN on the matrix packed once;
- `bf16_plain`: `F.linear` on the bf16 matrix (oneDNN, packing at every call);
- `bf16_packed`: oneDNN on the bf16 matrix packed once.

Prints one JSON line per preset, thread count and row count: microseconds per step's
products (best of --repeats) and the packed ways' speed-ups. bf16 is left out on a CPU
without native bf16.

    python bench/packed_products.py [--presets small,base] [--rows 1,4,16,64,256]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from compiled_decoding import decoder_layer_shapes
from transformer_nmt.config import get_preset
from transformer_nmt.decode.device.layout import PackedProduct
from transformer_nmt.runtime import bf16_supported


def step_shapes(preset: str, vocab: int) -> list[tuple[int, int]]:
    """(out, in) of every product of one decoder step of `preset`."""
    cfg = get_preset(preset).model
    return (decoder_layer_shapes(cfg.d_model, cfg.d_ff) * cfg.decoder_layers
            + [(vocab, cfg.d_model)])


def best_microseconds(apply, inputs: dict[int, torch.Tensor], widths: list[int],
                      repeats: int) -> float:
    """Best time of one pass over every matrix, `apply(i, x)` multiplying the i-th."""
    for i, width in enumerate(widths):  # first calls choose kernels
        apply(i, inputs[width])
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i, width in enumerate(widths):
            apply(i, inputs[width])
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="small,base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--rows", default="1,4,16,64,256")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    bf16 = bf16_supported(torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    for preset in args.presets.split(","):
        shapes = step_shapes(preset, args.vocab_size)
        widths = [inner for _, inner in shapes]
        weights = [torch.randn(out, inner, generator=generator) * inner ** -0.5
                   for out, inner in shapes]
        biases = [torch.randn(out, generator=generator) for out, _ in shapes]
        transposed = [w.t().contiguous() for w in weights]
        packed = [PackedProduct(w, b) for w, b in zip(weights, biases)]
        ways = {
            "fp32_plain": lambda i, x: torch.addmm(biases[i], x, transposed[i]),
            "fp32_packed": lambda i, x: packed[i](x),
        }
        if bf16:
            bf16_weights = [(w.bfloat16(), b.bfloat16()) for w, b in zip(weights, biases)]
            bf16_packed = [PackedProduct(w, b) for w, b in bf16_weights]
            ways["bf16_plain"] = lambda i, x: F.linear(x, *bf16_weights[i])
            ways["bf16_packed"] = lambda i, x: bf16_packed[i](x)
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for rows in (int(r) for r in args.rows.split(",")):
                times = {}
                with torch.inference_mode():
                    for name, apply in ways.items():
                        dtype = torch.bfloat16 if name.startswith("bf16") else torch.float32
                        inputs = {width: torch.randn(rows, width, generator=generator).to(dtype)
                                  for width in set(widths)}
                        times[name] = best_microseconds(apply, inputs, widths, args.repeats)
                speedups = {f"{p}_packed_speedup": round(times[f"{p}_plain"] / times[f"{p}_packed"], 2)
                            for p in ("fp32", "bf16") if f"{p}_plain" in times}
                print(json.dumps(dict(figure="step_products", preset=preset, threads=threads,
                                      rows=rows, **{f"{k}_us": round(v) for k, v in times.items()},
                                      **speedups)), flush=True)


if __name__ == "__main__":
    main()
