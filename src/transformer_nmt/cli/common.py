"""What several subcommand modules share: arguments spelled the same way everywhere, and
the command line that reruns a command."""

from __future__ import annotations

import argparse
import shlex
from typing import get_args

from transformer_nmt.config import Utf8Errors


def add_errors_argument(parser: argparse.ArgumentParser) -> None:
    """--errors: what to do with invalid UTF-8 in the input files."""
    parser.add_argument("--errors", choices=get_args(Utf8Errors), default="strict",
                        help="invalid UTF-8 in the input: stop with an error naming the file "
                        "and line (strict, default) or replace bad bytes with U+FFFD")


def rerunnable_command(args: argparse.Namespace, command: str) -> str:
    """`nmt COMMAND` with every option that `args` holds spelled out, the defaults that
    argparse filled in too, as one shell line that parses back to the same `args`: the
    data manifest and a run's config record it so that the work can be redone as it was.

    Each option's flag is its dest with dashes, as for every option of prepare and train
    (a positional argument would not come back); an unset option (None, an empty list) and a switch that is off are left out, a
    switch that is on is its bare flag, and a list repeats the flag for every item.
    """
    words = ["nmt", command]
    for dest, value in vars(args).items():
        if dest in ("command", "func") or value is None or value is False or value == []:
            continue
        flag = "--" + dest.replace("_", "-")
        if value is True:
            words.append(flag)
            continue
        for item in value if isinstance(value, list) else [value]:
            words += [flag, str(item)]
    return shlex.join(words)
