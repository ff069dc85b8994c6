"""Training on real batches (a new shape almost every step) with and without cuDNN's
attention: does its per-shape graph building explain a slow GPU training step?

Trains the small preset on a prepared data directory for --seconds, once with the
trainer's own kernel choice (training/precision.py leaves cuDNN's attention out on a
GPU) and once with PyTorch's own choice (cuDNN's where it takes the inputs), each in its
own process, and prints one JSON line per case: steps, target tokens/s, and the ratio.
No validation, no checkpoints until the end: the training loop alone.

    python bench/gpu_attention_shapes.py --data DATA_DIR [--seconds 40] [--preset small]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {"ours": "cuDNN's attention left out (the trainer's choice)",
         "pytorch": "PyTorch's own choice of attention kernel"}


def run_case(case: str, args: argparse.Namespace) -> dict:
    """Train one case in this process; its figures."""
    import torch

    from transformer_nmt.training import trainer
    from transformer_nmt.training.session import train

    if case == "pytorch":
        trainer.attention_kernels = lambda device, precision, length: contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as out:
        summary = train(out=Path(out) / "run", data=args.data, preset=args.preset,
                        device=args.device, progress=False,
                        overrides=[("max_time", args.seconds), ("valid_every", 10 ** 6),
                                   ("save_every", 10 ** 6), ("save_every_minutes", 10 ** 6),
                                   ("precision", args.precision)])
    return {"bench": "gpu_attention_shapes", "case": case, "what": CASES[case],
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "preset": args.preset, "precision": args.precision, "steps": summary.step,
            "seconds": round(summary.wall, 1),
            "steps_per_s": round(summary.step / summary.wall, 2),
            "tgt_tok_s": round(summary.tgt_tokens / summary.wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a data directory of `nmt prepare`")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args)), flush=True)
        return
    results = {}
    for case in CASES:
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--case", case],
                               capture_output=True, text=True)
        lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode or not lines:
            print(json.dumps({"bench": "gpu_attention_shapes", "case": case, "failed":
                              child.returncode, "stderr": child.stderr[-1500:]}), flush=True)
            continue
        print(lines[-1], flush=True)
        results[case] = json.loads(lines[-1])
    if len(results) == 2:
        print(json.dumps({"bench": "gpu_attention_shapes", "ratio": "ours/pytorch",
                          "tgt_tok_s": round(results["ours"]["tgt_tok_s"]
                                             / results["pytorch"]["tgt_tok_s"], 3)}))


if __name__ == "__main__":
    main()
