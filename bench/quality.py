"""Translation quality for a fixed training budget: the quickstart pipeline, measured.

Prepares a corpus, trains a preset for --minutes, averages the last checkpoints, decodes
the test split with beam 4 and prints one JSON line with the sacreBLEU, chrF and
tokenized BLEU, the training steps, epochs and time, and the settings used.

    python bench/quality.py --corpus multi30k --src de --tgt en \
        --mirror ../shared/data/multi30k --minutes 60 --out runs/quality-m30k
    python bench/quality.py --corpus bible --src en --tgt de --minutes 60 --out runs/quality-bible
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

from transformer_nmt.quickstart import QuickstartOptions, quickstart
from transformer_nmt.training.run import parse_assignment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="bible")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--mirror")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--average-last", type=int, default=QuickstartOptions.average_last)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--out", required=True, help="working directory")
    args = parser.parse_args()

    result = quickstart(QuickstartOptions(
        out=Path(args.out), corpus=args.corpus, src=args.src, tgt=args.tgt, mirror=args.mirror,
        preset=args.preset, minutes=args.minutes, average_last=args.average_last,
        overrides=[parse_assignment(text) for text in args.set], progress=False),
        log=lambda line: print(line, file=sys.stderr))
    scores, train = result["scores"], result["train"]
    print(json.dumps({
        "figure": "test_bleu", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
        "corpus": args.corpus, "pair": f"{args.src}-{args.tgt}", "preset": args.preset,
        "settings": args.set, "train_minutes": round(train.wall / 60, 1), "steps": train.step,
        "epochs": round(train.epoch, 2), "average_last": args.average_last,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "tgt_tok_s": round(train.tgt_tokens / max(train.wall, 1e-9), 1),
        "mfu": round(train.flops / max(train.wall, 1e-9) / train.peak_flops, 4),
        "decode_precision": scores.get("precision"), "sacrebleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2),
        "tokenized_bleu": scores["tokenized_bleu"], "signature": scores["bleu_signature"],
        "command": "python bench/quality.py " + shlex.join(sys.argv[1:]),
    }))


if __name__ == "__main__":
    main()
