"""Where a training step's time goes, by operator family: matrix products, casts,
attention, normalization, the loss, the optimizer and the rest.

Trains the base preset on the throughput benchmark's random batches (4000 target tokens,
lengths 20, 25 and 32, vocabulary 8000) through `Trainer.train_step`, warms up one step
per shape, then profiles --steps steps with torch.profiler and prints JSON lines: each
family's share of the operators' own (self) CPU time, then the --top operators. The
families are matched on operator names; the ones left over say what the list misses.

    python bench/train_step_profile.py [--precision bf16] [--steps 6] [--top 20]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from train_throughput import make_batches

from transformer_nmt.config import get_preset
from transformer_nmt.model.transformer import Transformer
from transformer_nmt.training.distributed import init_distributed
from transformer_nmt.training.trainer import Trainer

FAMILIES = [
    ("matrix products", ("mm", "addmm", "bmm", "matmul", "linear", "mkldnn", "onednn")),
    ("casts and copies", ("_to_copy", "aten::to", "copy_", "clone", "contiguous")),
    ("attention", ("scaled_dot_product", "_softmax_backward", "_flash_attention")),
    ("layer norm", ("layer_norm",)),
    ("loss", ("log_softmax", "nll_loss", "logsumexp", "gather", "scatter")),
    ("optimizer", ("adam", "_foreach", "norm", "clip")),
    ("dropout", ("dropout", "bernoulli", "random_", "rand")),
    ("elementwise", ("add", "mul", "div", "sub", "where", "masked_fill", "relu", "sum",
                     "fill_", "zero_", "exp", "neg", "rsub", "threshold")),
    ("layout", ("view", "reshape", "transpose", "permute", "expand", "slice", "select",
                "split", "cat", "stack", "unsqueeze", "t", "as_strided", "empty")),
]


def family(name: str) -> str:
    """The family of an operator name (the first whose patterns it contains)."""
    short = name.removeprefix("aten::")
    for label, patterns in FAMILIES:
        if any(pattern in name or short.startswith(pattern) for pattern in patterns):
            return label
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    preset = get_preset("base")
    trainer = Trainer(Transformer(preset.model, 8000), preset.train, init_distributed("cpu"),
                      args.precision)
    batches = make_batches(4000)
    for batch in batches:
        trainer.train_step([batch])
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for i in range(args.steps):
            trainer.train_step([batches[i % len(batches)]])
    events = [event for event in profiler.key_averages()
              if not event.key.startswith(("ProfilerStep", "autograd::engine",
                                           "Optimizer.step"))]
    total = sum(event.self_cpu_time_total for event in events)
    shares: dict[str, float] = defaultdict(float)
    for event in events:
        shares[family(event.key)] += event.self_cpu_time_total
    for label, value in sorted(shares.items(), key=lambda item: -item[1]):
        print(json.dumps({"bench": "train_step_profile", "precision": args.precision,
                          "family": label, "share": round(value / total, 4),
                          "ms_per_step": round(value / 1000 / args.steps, 1)}))
    for event in sorted(events, key=lambda event: -event.self_cpu_time_total)[:args.top]:
        print(json.dumps({"bench": "train_step_profile", "precision": args.precision,
                          "op": event.key, "family": family(event.key),
                          "calls_per_step": round(event.count / args.steps, 1),
                          "share": round(event.self_cpu_time_total / total, 4),
                          "ms_per_step": round(event.self_cpu_time_total / 1000 / args.steps,
                                               1)}))


if __name__ == "__main__":
    main()
