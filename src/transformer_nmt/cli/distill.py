"""`nmt distill`: a small, fast student from any teacher, in resumable stages."""

from __future__ import annotations

import argparse

from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.distill.options import DistillOptions

_BY_HAND = ("teachers", "data", "out", "mono", "overrides", "device", "progress")
"""DistillOptions fields whose flags are written here: repeatable ones named in the
singular, paths, and --set as `nmt train` spells it."""


def add_distill_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="distill a small, fast student from a teacher (or an ensemble), in resumable stages",
        description="Sequence-level knowledge distillation (Kim & Rush 2016) in five stages, "
        "each printed as it starts and skipped when DIR/distill.json records it done with the "
        "same settings, so that the same command run again goes on where it stopped. "
        "(1) translate: the teacher(s) translate the training sources of --data (and any "
        "--mono files) with beam search and n-best, in resumable shards as `nmt "
        "translate-corpus` does (DIR/translate). (2) select: per sentence, the candidate "
        "closest to the reference by sentence chrF (the teacher's best for --mono lines), "
        "then the worst --drop share by the teacher's per-token cross-entropy dropped "
        "(DIR/select). (3) train: those pairs prepared with the teacher's vocabulary and "
        "--data's valid and test splits (DIR/data), the --student preset trained on them "
        "with --set overrides (DIR/run), its last checkpoints averaged (DIR/student.pt). "
        "(4) report: teacher and student measured alike, each in a fresh process, on the "
        "test split: parameters, file size, BLEU and chrF, sentences per second greedy and "
        "with beam search, peak memory (DIR/report.json, and printed). (5) export, with "
        "--export: the student exported as `nmt export --to` does, its weights stored as "
        "--quantization (default int8): ctranslate2 into DIR/student-ctranslate2, argos into "
        "DIR/student.argosmodel (both need `pip install 'transformer-nmt[ctranslate2]'`); "
        "other --export or --quantization settings on a rerun redo this stage alone; "
        "without --export, the `nmt export` commands are printed.",
        epilog="on a laptop: nmt distill --teacher model.pt --data data/ --student "
        "student-tiny --out distill/ --set max_time=1h. On a cluster, stage 1 may run first "
        "as a job array (the command is printed at stage 1): sbatch --array=0-N-1 --wrap "
        "'nmt translate-corpus --model model.pt --input data/train.SRC --out distill/translate "
        "--format json --beam 4 --nbest 4 --shard $SLURM_ARRAY_TASK_ID/N', or on a Ray "
        "cluster with --backend ray; `nmt distill` then finds the shards done. The student "
        "for CTranslate2 and Argos Translate, in int8: add --export ctranslate2 --export "
        "argos (on a finished distillation too: only stage 5 runs).",
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
    add_fields(parser, DistillOptions, exclude=_BY_HAND)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any model or training field of the student, as `nmt train "
                        "--set` (e.g. max_time=2h); repeatable")
    parser.add_argument("--device", metavar="DEVICE",
                        help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    parser.set_defaults(func=run_distill)


def run_distill(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.interrupts import stop_signals_held

    # A Ctrl-C while torch is imported could abort the process (interrupts.py).
    with stop_signals_held():
        from transformer_nmt.distill.pipeline import distill
        from transformer_nmt.export.student import EXPORTER
        from transformer_nmt.training.run import parse_assignment

    distill(DistillOptions(
        teachers=tuple(args.teacher), data=Path(args.data), out=Path(args.out),
        mono=tuple(args.mono), overrides=tuple(parse_assignment(text) for text in args.set),
        device=args.device, **field_values(args, DistillOptions, exclude=_BY_HAND)),
        exporter=EXPORTER)
