"""A distilled student's greedy search against its teacher's beam search, as `nmt distill`'s
report serves them (CTranslate2 int8 where it runs, each model's shortlist where it has
one, the same lines in the same batches), timed in alternating rounds in one process: the
report measures each model once, in a process of its own, where the ratio moved by a third
from one run to the next.

Prints one JSON line per timed pass, then one with each side's median sentences/s, its
BLEU, and the ratio (the issue's goal: the student's greedy at least 4x the teacher's
beam 4).

    python bench/student_speed.py --teacher quickstart/model.pt --student distill/student.pt \\
        --data quickstart/data/bible-en-de [--beam 4] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.manifest import text_path
from transformer_nmt.decode.text.translator import Translator
from transformer_nmt.distill.measure import WARM_UP_LINES, served_options
from transformer_nmt.evaluate import read_text, score, split_languages


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--beam", type=int, default=4, help="the teacher's beam")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    src, tgt = split_languages(args.data, None, None)
    lines = read_text(text_path(args.data, args.split, src))
    references = read_text(text_path(args.data, args.split, tgt))
    base = served_options(args.beam)  # both in the teacher's beam's batches, as the report
    sides = {"teacher": Translator.from_file(args.teacher, replace(
                 base, decode=DecodeConfig(beam=args.beam))),
             "student": Translator.from_file(args.student, replace(
                 base, decode=DecodeConfig(beam=1)))}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    found: dict[str, list] = {}
    for name, translator in sides.items():
        list(translator.translate(lines[:WARM_UP_LINES]))
    for round_number in range(args.rounds):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for name in order:
            started = time.perf_counter()
            found[name] = list(sides[name].translate(lines))
            rate = len(lines) / (time.perf_counter() - started)
            rates[name].append(rate)
            figure(figure="pass", side=name, round=round_number,
                   sentences_per_s=round(rate, 1))
    summary = {}
    for name, translator in sides.items():
        scores = score(found[name], references, tgt)
        summary[name] = {"runtime": translator.runtime,
                         "shortlist": bool(translator.ctranslate2
                                           and translator.ctranslate2.use_vmap),
                         "sentences_per_s": round(statistics.median(rates[name]), 1),
                         "bleu": round(scores["bleu"], 2)}
    figure(figure="median", lines=len(lines), batch_sentences=base.batch_size,
           teacher_beam=args.beam, **summary,
           student_greedy_over_teacher_beam=round(
               summary["student"]["sentences_per_s"] / summary["teacher"]["sentences_per_s"], 2),
           bleu_difference=round(summary["teacher"]["bleu"] - summary["student"]["bleu"], 2))


if __name__ == "__main__":
    main()
