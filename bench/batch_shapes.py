"""How many batch shapes an epoch meets, and the padding they cost, per way of batching.

A compiled or captured training step (torch.compile with static shapes, CUDA graphs) is
built once per (sentences, source length, target length). This counts, over one epoch of
a prepared data directory's train split, the distinct shapes and the share of padded
tokens (padding and empty rows, both sides) for: exact lengths (what an eager step
trains on), lengths padded to multiples of 8 (bf16 on a CPU), and the fixed shapes of
`shape_buckets` (data/shapes.py). --resample draws that many pairs, with replacement and a
seed, from the split's length pairs: a small sample's batches span wide length ranges,
and a WMT-sized corpus (4.5M pairs) fills each shape's batches far better.

    python bench/batch_shapes.py --data DATA_DIR [--max-tokens 12500,25000] [--resample 1000000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from transformer_nmt.data.batching import TokenBatchSampler, round_up
from transformer_nmt.data.binarize import load_split
from transformer_nmt.data.shapes import BatchShapes


def epoch_shapes(src: np.ndarray, tgt: np.ndarray, max_tokens: int, multiple: int,
                 shapes: BatchShapes | None) -> dict:
    """Batches, distinct shapes and the padded share of one epoch's tokens."""
    sampler = TokenBatchSampler(src, tgt, max_tokens, seed=1, length_multiple=multiple,
                                shapes=shapes)
    seen = set()
    for number in range(sampler.num_batches):
        batch = sampler.batch(number)
        src_len = round_up(int(src[batch].max()) + 1, multiple)
        tgt_len = round_up(int(tgt[batch].max()) + 1, multiple)
        rows = len(batch)
        if shapes is not None:
            src_len, tgt_len = shapes.padded(src_len), shapes.padded(tgt_len)
            rows = shapes.rows(src_len, tgt_len)
        seen.add((rows, src_len, tgt_len))
    return {"batches": sampler.num_batches, "shapes": len(seen),
            "padding": round(1 - sampler.padding_efficiency(), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    parser.add_argument("--max-tokens", default="12500,25000",
                        help="comma-separated budgets per side of one batch")
    parser.add_argument("--resample", type=int, default=0,
                        help="pairs drawn from the split's lengths (0: the split itself)")
    args = parser.parse_args()
    data = load_split(args.data, "train")
    src, tgt = np.asarray(data.src_lengths), np.asarray(data.tgt_lengths)
    if args.resample:
        pick = np.random.default_rng(0).integers(0, len(src), args.resample)
        src, tgt = src[pick], tgt[pick]
    longest = int(max(src.max(), tgt.max())) + 1
    for max_tokens in (int(value) for value in args.max_tokens.split(",")):
        for name, multiple, shapes in (
                ("exact", 1, None), ("multiple-8", 8, None),
                ("shape-buckets", 1, BatchShapes.for_lengths(longest, max_tokens))):
            print(json.dumps({"bench": "batch_shapes", "data": args.data.name,
                              "pairs": len(src), "max_tokens": max_tokens, "batching": name,
                              **epoch_shapes(src, tgt, max_tokens, multiple, shapes)}))


if __name__ == "__main__":
    main()
