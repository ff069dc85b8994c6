"""What several subcommand modules share: arguments spelled the same way everywhere."""

from __future__ import annotations

import argparse


def add_errors_argument(parser: argparse.ArgumentParser) -> None:
    """--errors: what to do with invalid UTF-8 in the input files."""
    parser.add_argument("--errors", choices=["strict", "replace"], default="strict",
                        help="invalid UTF-8 in the input: stop with an error naming the file "
                        "and line (strict, default) or replace bad bytes with U+FFFD")
