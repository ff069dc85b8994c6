"""The distilled student against the same student trained on the references (Kim & Rush's
comparison), beside the teacher: the measurement of `nmt distill`'s goals.

Given a finished `nmt distill` directory, trains the student's preset on --data's own
references with the same --set overrides (the same time limit, so the same time), averages
the same number of last checkpoints, and measures that model exactly as the distill
report measured teacher and student (`distill.measure.measure`: the test split, greedy and
beam search, as served, in a fresh process; the reference-trained student has no shortlist,
unlike the distilled one). Prints one JSON line per model (the teacher's and the
student's from DIR/report.json, the reference-trained student's measured here), then the
goals' figures: BLEU of the distilled student minus the reference-trained one's (goal
> 0), the student's greedy sentences/s over the teacher's beam sentences/s (goal >= 4),
and the teacher's beam BLEU minus the student's greedy BLEU (goal <= 1.5); then the table.
The run's training and measuring must have the CPU to themselves, as the distillation's
report did.

    python bench/distill_vs_references.py --distill DIR --data DATA_DIR [--out REF_DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformer_nmt.data.manifest import text_path
from transformer_nmt.distill.measure import format_report, measure, served_options
from transformer_nmt.distill.pipeline import average_last_checkpoints
from transformer_nmt.distill.state import DistillState
from transformer_nmt.evaluate import split_languages
from transformer_nmt.training.session import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--distill", type=Path, required=True,
                        help="a directory where `nmt distill` has finished its report")
    parser.add_argument("--data", type=Path, required=True,
                        help="the data directory given to `nmt distill --data`")
    parser.add_argument("--out", type=Path,
                        help="where the reference-trained student goes (default: "
                        "DISTILL/references)")
    args = parser.parse_args()
    out = args.out or args.distill / "references"
    stages = DistillState(args.distill).stages
    trained, report = stages["train"]["settings"], json.loads(
        (args.distill / "report.json").read_text(encoding="utf-8"))
    beam = stages["report"]["settings"]["beam"]
    overrides = [tuple(pair) for pair in trained["overrides"]]
    summary = train(out=out / "run", data=args.data, preset=trained["student"],
                    overrides=overrides, command="distill_vs_references")
    model = out / "student.pt"
    average_last_checkpoints(out / "run", trained["average_last"], model)
    src, tgt = split_languages(args.data, None, None)
    rows = {"teacher": report["teacher"], "student": report["student"],
            "references": measure([model], text_path(args.data, "test", src),
                                  text_path(args.data, "test", tgt), tgt, beam,
                                  served_options(beam), out / f"test.{tgt}")}
    rows["references"]["steps"] = summary.step
    for label, row in rows.items():
        print(json.dumps({"bench": "distill_vs_references", "model": label, **row}), flush=True)
    student, teacher, references = rows["student"], rows["teacher"], rows["references"]
    print(json.dumps({
        "bench": "distill_vs_references", "student": trained["student"],
        "overrides": overrides, "beam": beam,
        "bleu_distilled_minus_references": round(student["bleu"] - references["bleu"], 2),
        "greedy_bleu_distilled_minus_references":
            round(student["greedy_bleu"] - references["greedy_bleu"], 2),
        "student_greedy_over_teacher_beam_speed":
            round(student["greedy_sentences_per_second"]
                  / teacher["beam_sentences_per_second"], 2),
        "teacher_beam_bleu_minus_student_greedy_bleu":
            round(teacher["bleu"] - student["greedy_bleu"], 2)}), flush=True)
    print(format_report(rows))


if __name__ == "__main__":
    main()
