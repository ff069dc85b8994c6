"""`nmt translate-corpus`: whole corpora in shards, by worker processes on this machine or
by the tasks of a cluster's job array, resumable."""

from __future__ import annotations

import argparse
import sys

from transformer_nmt.cli.common import add_errors_argument
from transformer_nmt.cli.decode import (_add_decode_arguments, _add_output_arguments,
                                        _translator_options)
from transformer_nmt.config import DEFAULT_SHARD_LINES
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held


def add_translate_corpus_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "translate-corpus",
        help="translate whole corpora in resumable shards, locally or on a cluster",
        description="Translate text files (gzipped or not; a directory: all its files) into "
        "DIR, one output per input named after it (without .gz), line for line as `nmt "
        "translate` writes them. The inputs are cut into shards of --shard-lines lines, "
        "planned once in DIR/manifest.json with the models' SHA-256 and the settings; each "
        "shard is translated into its own file under DIR/.shards, put in place whole, and "
        "its SHA-256 recorded. Run the same command again after a crash or a Ctrl-C and "
        "only the shards not done are translated; another model or setting is refused. "
        "Locally (default) --workers worker processes, each with its own model on its "
        "share of the cores, take the shards in order; a worker that dies has its shard "
        "translated again. With --backend ray, Ray Data hands the shards to --workers Ray "
        "actors instead, each with its own model, and Ray restarts an actor that dies and "
        "retries its shard. With --sampling, each line's draws are seeded by its line "
        "number in its input, as `nmt translate` seeds them, however the input is cut.",
        epilog="on a cluster (Slurm): the N tasks of a job array translate a part each, "
        "e.g. for N=4: sbatch --array=0-3 --wrap 'nmt translate-corpus --model M.pt "
        "--input corpus/ --out DIR --shard $SLURM_ARRAY_TASK_ID/4'; then, once all are "
        "done (sbatch --dependency=afterok:JOB), nmt translate-corpus --model M.pt --input "
        "corpus/ --out DIR --merge checks every shard and writes the outputs. examples: "
        "nmt translate-corpus --model model.pt --input mono.de.gz --out back/ --sampling "
        "--beam 1; nmt translate-corpus --model model.pt --input corpus/ --out out/ "
        "--workers 4 --report out/report.json; on a Ray cluster: nmt translate-corpus "
        "--model model.pt --input corpus/ --out /shared/out/ --backend ray --ray-address "
        "auto --workers 16",
    )
    parser.add_argument("--model", required=True, nargs="+", metavar="MODEL.pt",
                        help="model file (several: an ensemble, see `nmt translate --help`)")
    parser.add_argument("--input", required=True, nargs="+", metavar="FILE",
                        help="text files to translate, UTF-8, optionally gzipped, or "
                        "directories of them")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory: the manifest, the shards and the outputs")
    parser.add_argument("--shard", metavar="I/N",
                        help="translate only the I-th of N equal parts of the shards (I from "
                        "0, e.g. $SLURM_ARRAY_TASK_ID/$N) in this process, without joining "
                        "them; --merge joins them once every part is done")
    parser.add_argument("--merge", action="store_true",
                        help="translate nothing: check every shard's file against its "
                        "SHA-256 and write the outputs, or say which shards are missing")
    parser.add_argument("--shard-lines", type=int, default=DEFAULT_SHARD_LINES, metavar="N",
                        help="input lines per shard (default: %(default)s)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="who translates the shards: local, --workers worker processes "
                        "on this machine (default); ray, --workers Ray actors through Ray "
                        "Data (pip install 'transformer-nmt[ray]')")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="with --backend ray, the Ray cluster to join (e.g. auto, or "
                        "ray://HEAD:10001; default: start Ray on this machine); the actors "
                        "write the shards into DIR themselves, so on a cluster DIR must be "
                        "on a filesystem every node shares, at the same path")
    parser.add_argument("--report", metavar="FILE",
                        help="write what was done as JSON here at the end: sentences, "
                        "tokens, seconds, shards translated and redone")
    _add_output_arguments(parser)
    add_errors_argument(parser)
    _add_decode_arguments(parser, nbest=True)
    parser.set_defaults(func=run_translate_corpus)


def _part(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        return int(index), int(count)
    except ValueError:
        raise UserError(f"--shard takes I/N, e.g. 0/4, not {text!r}") from None


@sigterm_unwinds()
def run_translate_corpus(args: argparse.Namespace) -> None:
    if args.merge and args.shard is not None:
        raise UserError("--merge joins the parts of every --shard; give one or the other")
    part = None if args.shard is None else _part(args.shard)
    with stop_signals_held():
        from transformer_nmt.corpus import CorpusOptions, merge, translate_corpus
        from transformer_nmt.files import write_json_atomic

    if args.merge:
        for path in merge(args.out):
            print(f"nmt translate-corpus: wrote {path}", file=sys.stderr)
        return
    options = CorpusOptions(
        models=tuple(args.model), inputs=tuple(args.input), out=args.out,
        translator=_translator_options(args, alignments=args.alignments,
                                       token_scores=args.token_scores or args.format == "json"),
        output_format=args.format, errors=args.errors, shard_lines=args.shard_lines,
        backend=args.backend, ray_address=args.ray_address)
    report = translate_corpus(options, part)
    print(f"nmt translate-corpus: {report.summary()}", file=sys.stderr)
    if args.report is not None:
        write_json_atomic(args.report, vars(report))
