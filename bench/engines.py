"""The runtimes and precisions on one trained model, back to back: `nmt evaluate` on a
data directory's split for each ENGINE/PRECISION case, then the same in another order.

Prints one JSON line per run (BLEU, chrF, the confidence's Pearson correlation with
sentence chrF where the model is calibrated, sentences and subword tokens per second,
model loading excluded) and, per case, the medians over --rounds with sentences/s against
the first case's. What it answers: which precision `auto` should take on CTranslate2
(the fastest whose BLEU stays within 0.2 of float32's), how much faster CTranslate2 is
than the PyTorch search here, and whether the confidence, fitted on the PyTorch search's
outputs, still ranks CTranslate2's.

    python bench/engines.py --model quickstart/model.pt --data quickstart/data/bible-en-de \\
        [--cases torch/auto,ctranslate2/fp32,ctranslate2/int8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def evaluate(args: argparse.Namespace, engine: str, precision: str, work: Path) -> dict:
    """One `nmt evaluate` of the split: its scores and speed."""
    scores = work / f"{engine}-{precision}.json"
    done = subprocess.run(
        [sys.executable, "-m", "transformer_nmt.cli", "evaluate", "--model", str(args.model),
         "--data", str(args.data), "--split", args.split, "--engine", engine, "--precision",
         precision, "--output", str(work / f"{engine}-{precision}.hyp"), "--json",
         str(scores)], capture_output=True, text=True, check=True)
    match = re.search(r"translated (\d+) lines \((\d+) subword tokens\).* in ([\d.]+) s",
                      done.stderr)
    lines, tokens, seconds = int(match[1]), int(match[2]), float(match[3])
    result = json.loads(scores.read_text())
    confidence = result.get("confidence") or {}
    return dict(bleu=round(result["bleu"], 2), chrf=round(result["chrf"], 2),
                pearson_chrf=confidence.get("pearson_chrf"),
                sentences_per_s=round(lines / seconds, 2),
                tokens_per_s=round(tokens / seconds, 1), seconds=round(seconds, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cases", default="torch/auto,ctranslate2/fp32,ctranslate2/int8",
                        help="comma-separated ENGINE/PRECISION; the first is the reference")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds over the cases, every other one in reverse order")
    args = parser.parse_args()
    cases = [tuple(case.split("/")) for case in args.cases.split(",")]
    runs: dict[tuple, list[dict]] = {case: [] for case in cases}
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.rounds):
            for engine, precision in (cases if round_ % 2 == 0 else cases[::-1]):
                result = evaluate(args, engine, precision, Path(workdir))
                runs[(engine, precision)].append(result)
                figure(figure="evaluate", engine=engine, precision=precision, round=round_,
                       split=args.split, **result)
    reference = statistics.median(r["sentences_per_s"] for r in runs[cases[0]])
    for (engine, precision), results in runs.items():
        speed = statistics.median(r["sentences_per_s"] for r in results)
        figure(figure="median", engine=engine, precision=precision,
               bleu=results[0]["bleu"], chrf=results[0]["chrf"],
               pearson_chrf=results[0]["pearson_chrf"], sentences_per_s=speed,
               against_first=round(speed / reference, 2))


if __name__ == "__main__":
    main()
