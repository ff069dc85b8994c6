"""Forward+backward throughput of the base model on this CPU, fp32 and bf16 autocast.

Prints one JSON line per figure: the machine's measured matrix-product rate per precision,
then target tokens/s and the fraction of that rate the model achieves (FLOPs counted
analytically by transformer_nmt.training.flops).

    python bench/model_forward.py [--preset base] [--steps 3] [--tokens 4000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch
import torch.nn.functional as F

from transformer_nmt.config import get_preset
from transformer_nmt.runtime import bf16_supported
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.flops import train_step_flops


def autocast(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def matmul_rate(precision: str, size: int = 2048, repeats: int = 10) -> float:
    """Sustained FLOP/s of a large square matrix product in `precision`."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size ** 3 * repeats / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence, each side")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    cfg = get_preset(args.preset).model
    model = Transformer(cfg, args.vocab_size).train()
    sentences = args.tokens // args.length
    src = torch.randint(4, args.vocab_size, (sentences, args.length))
    tgt = torch.randint(4, args.vocab_size, (sentences, args.length))
    flops = train_step_flops(cfg, args.vocab_size, args.length, args.length, sentences)
    for precision in ("fp32", "bf16"):
        if precision == "bf16" and not bf16_supported(torch.device("cpu")):
            # Emulated bf16 runs ~100 times slower than fp32: a base step would take hours.
            print(json.dumps({"figure": "skipped", "precision": precision,
                              "why": "this CPU has no native bf16"}))
            continue
        rate = matmul_rate(precision)
        print(json.dumps({"figure": "matmul_flops_per_s", "precision": precision, "value": rate}))
        timings = []
        for step in range(args.steps + 1):  # the first step warms up and is not counted
            start = time.perf_counter()
            with autocast(precision):
                logits = model(src, tgt)
            loss = F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten())
            loss.backward()
            model.zero_grad(set_to_none=True)
            if step:
                timings.append(time.perf_counter() - start)
        seconds = sum(timings) / len(timings)
        print(json.dumps({"figure": "forward_backward", "preset": args.preset,
                          "precision": precision, "target_tokens": sentences * args.length,
                          "target_tokens_per_s": round(sentences * args.length / seconds, 1),
                          "model_flops_per_s": flops / seconds,
                          "fraction_of_matmul_rate": round(flops / seconds / rate, 3)}))


if __name__ == "__main__":
    main()
