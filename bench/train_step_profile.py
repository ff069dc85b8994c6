"""Where a training step's time goes, by operator family: matrix products, casts,
attention, normalization, the loss, the optimizer and the rest.

Trains the base preset (or --preset) on the throughput benchmark's random batches (4000 target tokens,
lengths 20, 25 and 32, vocabulary 8000) through `Trainer.train_step`, warms up one step
per shape, then profiles --steps steps with torch.profiler and prints JSON lines: each
family's share of the operators' own (self) time, then the --top operators. The time is
the CPU's, or with --device cuda the GPU's kernels' (with the launches per step, which
bound a GPU's step where its kernels are short). The families are matched on operator
names; the ones left over say what the list misses.

    python bench/train_step_profile.py [--device cuda] [--precision bf16] [--steps 6] [--top 20]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from train_throughput import make_batches

from transformer_nmt.config import get_preset
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training.trainer import Trainer

FAMILIES = [
    ("matrix products", ("mm", "addmm", "bmm", "matmul", "linear", "mkldnn", "onednn",
                         "nvjet", "gemm", "cutlass_80_tensorop", "sm90_xmma")),
    ("attention", ("scaled_dot_product", "_softmax_backward", "_flash_attention",
                   "_efficient_attention", "flash_fwd", "flash_bwd", "fmha")),
    ("casts and copies", ("_to_copy", "aten::to", "copy_", "clone", "contiguous", "copy_kernel",
                          "Memcpy")),
    ("layer norm", ("layer_norm", "GammaBeta")),
    ("loss", ("log_softmax", "nll_loss", "logsumexp", "gather", "scatter")),
    ("optimizer", ("adam", "_foreach", "norm", "clip")),
    ("dropout", ("dropout", "bernoulli", "random_", "rand")),
    ("elementwise", ("add", "mul", "div", "sub", "where", "masked_fill", "relu", "sum",
                     "fill_", "zero_", "exp", "neg", "rsub", "threshold", "elementwise",
                     "reduce_kernel")),
    ("layout", ("view", "reshape", "transpose", "permute", "expand", "slice", "select",
                "split", "cat", "stack", "unsqueeze", "t", "as_strided", "empty")),
]


def family(name: str) -> str:
    """The family of an operator or kernel name (the first whose patterns it contains;
    patterns of three letters or fewer only as the name's start, since "t" or "mm" occur
    inside unrelated kernel names)."""
    short = name.removeprefix("aten::")
    for label, patterns in FAMILIES:
        if any(short.startswith(pattern) or (len(pattern) > 3 and pattern in name)
               for pattern in patterns):
            return label
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--preset", default="base", help="the model's preset (default: base)")
    args = parser.parse_args()
    preset = get_preset(args.preset)
    trainer = Trainer(Transformer(preset.model, 8000), preset.train,
                      init_distributed(args.device), args.precision)
    batches = make_batches(args.tokens)
    for batch in batches:
        trainer.train_step([batch])
    gpu = args.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    wall = time.perf_counter()
    with profile(activities=activities) as profiler:
        for i in range(args.steps):
            trainer.train_step([batches[i % len(batches)]])
        if gpu:
            torch.cuda.synchronize()
    wall = time.perf_counter() - wall
    events = [event for event in profiler.key_averages()
              if not event.key.startswith(("ProfilerStep", "autograd::engine",
                                           "Optimizer.step"))]
    launches = sum(event.count for event in events if event.key == "cudaLaunchKernel")
    if gpu:  # the kernels alone: an operator's device time repeats its kernels'
        events = [event for event in events if event.device_type == DeviceType.CUDA]

    def own_time(event) -> float:  # microseconds
        return event.self_device_time_total if gpu else event.self_cpu_time_total

    total = sum(own_time(event) for event in events)
    common = {"bench": "train_step_profile", "device": args.device, "preset": args.preset,
              "precision": args.precision, "tokens": args.tokens}
    print(json.dumps({**common, "wall_ms_per_step": round(wall * 1000 / args.steps, 1),
                      "own_ms_per_step": round(total / 1000 / args.steps, 1),
                      "kernel_launches_per_step": round(launches / args.steps)}))
    shares: dict[str, float] = defaultdict(float)
    for event in events:
        shares[family(event.key)] += own_time(event)
    for label, value in sorted(shares.items(), key=lambda item: -item[1]):
        print(json.dumps({**common, "family": label, "share": round(value / total, 4),
                          "ms_per_step": round(value / 1000 / args.steps, 1)}))
    for event in sorted(events, key=lambda event: -own_time(event))[:args.top]:
        print(json.dumps({**common, "op": event.key, "family": family(event.key),
                          "calls_per_step": round(event.count / args.steps, 1),
                          "share": round(own_time(event) / total, 4),
                          "ms_per_step": round(own_time(event) / 1000 / args.steps, 1)}))


if __name__ == "__main__":
    main()
