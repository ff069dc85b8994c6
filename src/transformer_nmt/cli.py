"""The `nmt` command: argument parsing only; every subcommand calls one library function.

Each subcommand has an `add_<name>_parser(subparsers)` function that defines its
arguments and sets `func` to a small `run_<name>(args)` that calls the library.
"""

from __future__ import annotations

import argparse
import sys

from transformer_nmt import __version__
from transformer_nmt.errors import UserError


def add_presets_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "presets",
        help="list the model presets (base, big, Table 3 rows, tiny, small)",
        description="Print every named preset with its N, d_model, d_ff, h, d_k, d_v, "
        "P_drop, label smoothing and positional encoding.",
    )
    parser.set_defaults(func=run_presets)


def run_presets(args: argparse.Namespace) -> None:
    from transformer_nmt.config import presets_table

    print(presets_table())


def add_params_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params",
        help="count a preset's parameters",
        description="Build a preset and print its exact number of trainable parameters; "
        "the integer alone is the last line.",
    )
    parser.add_argument("--preset", default="base", help="preset name (see `nmt presets`)")
    parser.add_argument(
        "--vocab-size", type=int, default=37000,
        help="shared vocabulary size (the paper's WMT14 en-de BPE: 37000)",
    )
    parser.set_defaults(func=run_params)


def run_params(args: argparse.Namespace) -> None:
    from transformer_nmt.config import get_preset
    from transformer_nmt.model.transformer import count_parameters

    preset = get_preset(args.preset)
    count = count_parameters(preset.model, args.vocab_size)
    print(f"preset {preset.name}: {count / 1e6:.1f}M parameters at vocabulary {args.vocab_size}")
    print(count)


# New subcommands register here, in the order `nmt --help` lists them.
PARSERS = [
    add_presets_parser,
    add_params_parser,
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        result = args.func(args)
    except UserError as error:
        print(f"nmt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nmt {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
