"""Training on real batches (a new shape almost every step): with and without cuDNN's
attention, and with the batches padded to a few shapes (`shape_buckets`), eager or
compiled one static graph per shape.

Trains a preset on a prepared data directory for --seconds per case, each in its own
process: "ours", the trainer's own kernel choice (training/precision.py leaves cuDNN's
attention out on a GPU); "pytorch", PyTorch's own choice (cuDNN's where it takes the
inputs); "bucketed", ours on shape_buckets batches; "bucketed-compiled", the same
compiled (dynamic=False). Prints one JSON line per case: steps, target tokens/s over the
whole run, and, timed per step, the steps that met a new shape (where a compiled case
compiles) against the steps on shapes seen before (its steady rate), then the ratios.
No validation, no checkpoints until the end: the training loop alone.

    python bench/gpu_attention_shapes.py --data DATA_DIR [--seconds 40] [--preset small]
        [--cases ours,pytorch,bucketed,bucketed-compiled]
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
         "pytorch": "PyTorch's own choice of attention kernel",
         "bucketed": "ours on batches of a few shapes (shape_buckets)",
         "bucketed-compiled": "ours on shape_buckets batches, one static compiled graph each"}
CASE_OVERRIDES = {"bucketed": [("shape_buckets", True)],
                  "bucketed-compiled": [("shape_buckets", True), ("compile", True)]}


class StepTimes:
    """Wraps Trainer.train_step to time every step (to the GPU's end) and note whether
    its batches' shapes were new."""

    def __init__(self, trainer_class) -> None:
        self.seen: set[tuple] = set()
        self.new = [0, 0.0, 0]  # steps, seconds, target tokens
        self.old = [0, 0.0, 0]
        original = trainer_class.train_step

        def timed(trainer, batches, *args, **kwargs):
            import time

            import torch

            shapes = {(len(b), b.src.size(1), b.tgt_in.size(1)) for b in batches}
            start = time.perf_counter()
            result = original(trainer, batches, *args, **kwargs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            record = self.new if shapes - self.seen else self.old
            self.seen |= shapes
            record[0] += 1
            record[1] += time.perf_counter() - start
            record[2] += sum(b.tgt_tokens for b in batches)
            return result

        trainer_class.train_step = timed

    def figures(self) -> dict:
        steps, seconds, tokens = self.old
        return {"shapes": len(self.seen), "new_shape_steps": self.new[0],
                "new_shape_s": round(self.new[1], 1), "seen_shape_steps": steps,
                "seen_shape_tgt_tok_s": round(tokens / seconds, 1) if seconds else None}


def run_case(case: str, args: argparse.Namespace) -> dict:
    """Train one case in this process; its figures."""
    import torch

    from transformer_nmt.training import trainer
    from transformer_nmt.training.session import train

    if case == "pytorch":
        trainer.attention_kernels = lambda device, precision, length: contextlib.nullcontext()
    times = StepTimes(trainer.Trainer)
    with tempfile.TemporaryDirectory() as out:
        summary = train(out=Path(out) / "run", data=args.data, preset=args.preset,
                        device=args.device, progress=False,
                        overrides=[("max_time", args.seconds), ("valid_every", 10 ** 6),
                                   ("save_every", 10 ** 6), ("save_every_minutes", 10 ** 6),
                                   ("precision", args.precision),
                                   *CASE_OVERRIDES.get(case, [])])
    return {"bench": "gpu_attention_shapes", "case": case, "what": CASES[case],
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "preset": args.preset, "precision": args.precision, "steps": summary.step,
            "seconds": round(summary.wall, 1),
            "steps_per_s": round(summary.step / summary.wall, 2),
            "tgt_tok_s": round(summary.tgt_tokens / summary.wall, 1), **times.figures()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a data directory of `nmt prepare`")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", default="ours,pytorch",
                        help=f"comma-separated, of {', '.join(CASES)} (default ours,pytorch)")
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args)), flush=True)
        return
    results = {}
    for case in args.cases.split(","):
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--case", case],
                               capture_output=True, text=True)
        lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode or not lines:
            print(json.dumps({"bench": "gpu_attention_shapes", "case": case, "failed":
                              child.returncode, "stderr": child.stderr[-1500:]}), flush=True)
            continue
        print(lines[-1], flush=True)
        results[case] = json.loads(lines[-1])
    for ours, other in (("ours", "pytorch"), ("bucketed", "ours"), ("bucketed-compiled", "ours")):
        if ours in results and other in results:
            print(json.dumps({"bench": "gpu_attention_shapes", "ratio": f"{ours}/{other}",
                              "tgt_tok_s": round(results[ours]["tgt_tok_s"]
                                                 / results[other]["tgt_tok_s"], 3)}))


if __name__ == "__main__":
    main()
