"""The `nmt` command: argument parsing only; every subcommand calls one library function.

Each subcommand has an `add_<name>_parser(subparsers)` function that defines its
arguments and sets `func` to a small `run_<name>(args)` that calls the library; they live
in one module per group of subcommands (info, prepare, train, decode, calibrate,
serve, export, shortlist, quickstart), and this module puts them together and turns errors into exit statuses. The `run_*`
functions import the library inside themselves, so that `nmt --help` starts without
importing torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from transformer_nmt.version import __version__
from transformer_nmt.cli.allocator import start_again_with_tcmalloc
from transformer_nmt.cli.calibrate import add_calibrate_parser
from transformer_nmt.cli.corpus import add_translate_corpus_parser
from transformer_nmt.cli.distill import add_distill_parser
from transformer_nmt.cli.decode import (add_attention_parser, add_evaluate_parser,
                                        add_translate_parser)
from transformer_nmt.cli.export import add_export_parser
from transformer_nmt.cli.pretrained import add_import_parser
from transformer_nmt.cli.info import add_info_parser, add_params_parser, add_presets_parser
from transformer_nmt.cli.prepare import add_prepare_parser
from transformer_nmt.cli.quickstart import add_quickstart_parser
from transformer_nmt.cli.score import add_score_parser
from transformer_nmt.cli.serve import add_serve_parser
from transformer_nmt.cli.shortlist import add_shortlist_parser
from transformer_nmt.cli.train import add_average_parser, add_plot_parser, add_train_parser
from transformer_nmt.errors import UserError, describe_os_error
from transformer_nmt.interrupts import Terminated

# New subcommands register here, in the order `nmt --help` lists them.
PARSERS = [
    add_quickstart_parser,
    add_presets_parser,
    add_params_parser,
    add_info_parser,
    add_prepare_parser,
    add_train_parser,
    add_average_parser,
    add_translate_parser,
    add_translate_corpus_parser,
    add_distill_parser,
    add_evaluate_parser,
    add_calibrate_parser,
    add_score_parser,
    add_serve_parser,
    add_export_parser,
    add_shortlist_parser,
    add_import_parser,
    add_plot_parser,
    add_attention_parser,
]


def build_parser() -> argparse.ArgumentParser:
    """The full `nmt` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nmt",
        description="The Transformer of 'Attention Is All You Need' for machine translation: "
        "prepare a corpus, train, average checkpoints, translate, evaluate, look at attention.",
    )
    parser.add_argument("--version", action="version", version=f"transformer-nmt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_parser in PARSERS:
        add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nmt` console script; returns the process exit status."""
    if argv is None:  # the command line itself, not a caller's list
        start_again_with_tcmalloc()
    try:
        # Slow enough (every setting's help is read from its source) to meet a Ctrl-C.
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("nmt: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        result = args.func(args)
    except UserError as error:
        print(f"nmt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`nmt translate ... | head -1`): end quietly, as Unix filters
        # do, with SIGPIPE's status; stdout points at /dev/null so that the interpreter's
        # own flush at exit cannot raise the same error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as error:
        print(f"nmt {args.command}: error: {describe_os_error(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"nmt {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"nmt {args.command}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    return int(result or 0)
