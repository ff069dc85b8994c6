"""Which recipe buys the most translation in the quickstart's budget: candidates trained
back to back on the same prepared data, each judged on the validation split.

Each candidate is the quickstart's training (`quickstart.training_overrides`: its budget,
checkpoint spacing, validation, batch, warm-up and recipe) with a few fields set on top. After
each run the last 1, 2, 3 and 5 checkpoints (or --average) are averaged and decoded with beam 4 in fp32
(the same output on every CPU, whatever the batch) on the validation split, which is what
chooses, and on the test split, which is only reported. One JSON line per (candidate,
averaging) and one per candidate with its validation curve (greedy BLEU against
training time). Nothing else may run on the machine meanwhile: the budget is time.

    nmt prepare --corpus bible --src en --tgt de --out runs/bible-en-de
    python bench/quickstart_recipe.py --data runs/bible-en-de --out runs/recipes \\
        --recipe quickstart: --recipe dropout03:dropout=0.3 --recipe dropout0:dropout=0
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import shlex
import sys
import time
from pathlib import Path

from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.evaluate import evaluate_model
from transformer_nmt.model_file import save_model_file
from transformer_nmt.quickstart import QuickstartOptions, training_overrides
from transformer_nmt.training.checkpoint import average_checkpoints, checkpoints_to_average
from transformer_nmt.training.metrics import read_metrics
from transformer_nmt.training.run import parse_assignment
from transformer_nmt.training.session import train

AVERAGED = "1,2,3,5"


def parse_recipe(text: str) -> tuple[str, list[tuple[str, str]]]:
    """'NAME:FIELD=VALUE,FIELD=VALUE' → (NAME, [(FIELD, VALUE), ...]); 'NAME:' sets nothing."""
    name, _, settings = text.partition(":")
    return name, [parse_assignment(item) for item in settings.split(",") if item]


def validation_curve(run_dir: Path) -> list[dict]:
    """(training seconds, step, greedy valid BLEU) at every validation of the run."""
    return [{"wall": round(r["wall"]), "step": r["step"], "bleu": r.get("bleu")}
            for r in read_metrics(run_dir / "metrics.jsonl") if r["event"] == "valid"]


def score_averages(run_dir: Path, data: Path, averaged: list[int]) -> list[dict]:
    """Valid and test sacreBLEU/chrF of the last k checkpoints averaged, for each k."""
    decoding = TranslatorOptions(precision="fp32")  # DecodeConfig: beam 4, alpha 0.6
    rows = []
    for count in averaged:
        model = run_dir / f"average-{count}.pt"
        save_model_file(average_checkpoints(checkpoints_to_average([run_dir], count)), model)
        row = {"average_last": count}
        for split in ("valid", "test"):
            scores = evaluate_model(model, data, split, decoding)
            row[f"{split}_bleu"] = round(scores["bleu"], 2)
            row[f"{split}_chrf"] = round(scores["chrf"], 2)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    parser.add_argument("--out", type=Path, required=True, help="one run directory per recipe")
    parser.add_argument("--recipe", action="append", required=True, metavar="NAME:F=V,F=V",
                        help="a candidate: its name and the fields it sets (repeatable)")
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--average", default=AVERAGED, metavar="K,K",
                        help=f"the counts of last checkpoints averaged and scored "
                        f"(default {AVERAGED})")
    args = parser.parse_args()

    # Each candidate trains in a process of its own: a third run in one process trained at
    # 0.8x the rate of the first two (kernels and memory kept from the runs before it).
    spawn = multiprocessing.get_context("spawn")
    for name, settings in map(parse_recipe, args.recipe):
        child = spawn.Process(target=run_recipe, args=(args, name, settings))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"recipe {name} failed (exit code {child.exitcode})")


def run_recipe(args: argparse.Namespace, name: str, settings: list[tuple[str, str]]) -> None:
    """Train one candidate for the budget, then print its curve and its scores."""
    run_dir = args.out / name
    options = QuickstartOptions(minutes=args.minutes, preset=args.preset, overrides=settings)
    summary = train(out=run_dir, data=args.data, preset=args.preset,
                    overrides=training_overrides(options), command="bench/quickstart_recipe.py",
                    progress=False)
    common = {"recipe": name, "settings": [f"{f}={v}" for f, v in settings],
              "steps": summary.step, "epochs": round(summary.epoch, 2),
              "train_minutes": round(summary.wall / 60, 1),
              "tgt_tok_s": round(summary.tgt_tokens / max(summary.wall, 1e-9), 1)}
    print(json.dumps({"figure": "valid_curve", **common,
                      "curve": validation_curve(run_dir)}), flush=True)
    for row in score_averages(run_dir, args.data, [int(k) for k in args.average.split(",")]):
        print(json.dumps({"figure": "recipe", "date": time.strftime("%Y-%m-%d"),
                          "machine": platform.machine(), **common, **row,
                          "command": "python bench/quickstart_recipe.py "
                                     + shlex.join(sys.argv[1:])}), flush=True)


if __name__ == "__main__":
    main()
