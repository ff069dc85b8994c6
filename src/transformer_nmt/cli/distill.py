"""`nmt distill`: a small, fast student from any teacher, in resumable stages."""

from __future__ import annotations

import argparse

from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.distill.options import DistillOptions

_BY_HAND = ("teachers", "data", "out", "mono", "overrides", "exports", "device", "progress")
"""DistillOptions fields whose flags are written here: repeatable ones named in the
singular (--export, whose default is not empty, with `none` to export nothing), paths, and
--set as `nmt train` spells it."""
EXPORT_CHOICES = ("ctranslate2", "argos", "none")
"""--export's values: DistillOptions' formats, and none."""
DESCRIPTION = (
    "Sequence-level knowledge distillation (Kim & Rush 2016) in six stages, "
    "each printed as it starts and skipped when DIR/distill.json records it done with the "
    "same settings, so that the same command run again goes on where it stopped. "
    "(1) translate: the teacher(s) translate the training sources of --data (and any "
    "--mono files) with beam search and n-best, in resumable shards as `nmt "
    "translate-corpus` does (DIR/translate). (2) select: per sentence, the candidate "
    "closest to the reference by sentence chrF (the teacher's best for --mono lines), "
    "then the worst --drop share by the teacher's per-token cross-entropy dropped "
    "(DIR/select). (3) train: those pairs, with --data's training pairs unless "
    "--no-references, prepared with the teacher's vocabulary and "
    "--data's valid and test splits (DIR/data), the --student preset trained on them "
    "with --set overrides (DIR/run), its last checkpoints averaged (DIR/student.pt). "
    "(4) shortlist: the student's lexical shortlist counted on the pairs it learned "
    "from, as `nmt shortlist` does (DIR/student.shortlist.npz): CTranslate2 then scores "
    "only each batch's candidate pieces. (5) report: teacher and student measured "
    "alike on the test split as they are served, on this machine's CPU with CTranslate2 "
    "in int8, the student with its shortlist, the same lines in the same batches, each "
    "in a fresh process: parameters, file size, BLEU and chrF, sentences per second "
    "greedy and with beam search, peak memory, then the teacher's beam search against "
    "the student's greedy one (DIR/report.json, and printed). (6) export: the student "
    "exported as `nmt export --to` does, its weights stored as --quantization (default "
    "int8): by default to ctranslate2, into DIR/student-ctranslate2 with its shortlist "
    "as vmap.txt, the fastest way to serve it; --export argos into "
    "DIR/student.argosmodel (both need `pip install 'transformer-nmt[ctranslate2]'`); "
    "other --export or --quantization settings on a rerun redo this stage alone; with "
    "--export none, the `nmt export` commands are printed.")
"""What `nmt distill --help` says it does, stage by stage."""


def add_distill_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="distill a small, fast student from a teacher (or an ensemble), in resumable stages",
        description=DESCRIPTION,
        epilog="on a laptop: nmt distill --teacher model.pt --data data/ --student "
        "student-tiny --out distill/ --set max_time=1h. On a cluster, stage 1 may run first "
        "as a job array (the command is printed at stage 1): sbatch --array=0-N-1 --wrap "
        "'nmt translate-corpus --model model.pt --input data/train.SRC --out distill/translate "
        "--format json --beam 4 --nbest 4 --shard $SLURM_ARRAY_TASK_ID/N', or on a Ray "
        "cluster with --backend ray; `nmt distill` then finds the shards done. The student "
        "for CTranslate2 and Argos Translate, in int8: add --export ctranslate2 --export "
        "argos (on a finished distillation too: only stage 6 runs).",
    )
    parser.add_argument("--teacher", required=True, action="append", metavar="MODEL.pt",
                        help="the teacher's model file; repeat for an ensemble")
    parser.add_argument("--data", required=True, metavar="DATA_DIR",
                        help="the prepared data directory (`nmt prepare`) of the teacher's "
                        "language pair: its train sources are translated, its valid and test "
                        "splits validate and measure the student")
    parser.add_argument("--mono", action="append", default=[], metavar="FILE",
                        help="monolingual source text translated as well (no reference: the "
                        "teacher's best is kept); repeatable")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the working directory of every stage and the report")
    parser.add_argument("--export", action="append", default=[], choices=EXPORT_CHOICES,
                        help="the runtime stage 6 exports the student to, as `nmt export "
                        "--to`: ctranslate2 (DIR/student-ctranslate2, with its shortlist), "
                        "argos (DIR/student.argosmodel), or none; repeatable (default: "
                        "ctranslate2)")
    add_fields(parser, DistillOptions, exclude=_BY_HAND)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any model or training field of the student, as `nmt train "
                        "--set` (e.g. max_time=2h); repeatable")
    parser.add_argument("--device", metavar="DEVICE",
                        help="where the teacher translates and the student trains: cpu, "
                        "cuda or cuda:N (default: cuda when present, else cpu); the report "
                        "measures on the CPU")
    parser.set_defaults(func=run_distill)


def run_distill(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.errors import UserError
    from transformer_nmt.interrupts import stop_signals_held

    exports = {}
    if "none" in args.export and len(args.export) > 1:
        raise UserError(f"--export {' '.join(args.export)}: none exports nothing; give it "
                        "alone, or leave it out")
    if args.export:
        exports["exports"] = () if args.export == ["none"] else tuple(args.export)

    # A Ctrl-C while torch is imported could abort the process (interrupts.py).
    with stop_signals_held():
        from transformer_nmt.distill.pipeline import distill
        from transformer_nmt.export.student import EXPORTER
        from transformer_nmt.training.run import parse_assignment

    distill(DistillOptions(
        teachers=tuple(args.teacher), data=Path(args.data), out=Path(args.out),
        mono=tuple(args.mono), overrides=tuple(parse_assignment(text) for text in args.set),
        device=args.device, **exports, **field_values(args, DistillOptions, exclude=_BY_HAND)),
        exporter=EXPORTER)
