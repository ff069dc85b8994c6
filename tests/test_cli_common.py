"""What every subcommand shares (cli/common.py): the command line recorded to be rerun."""

import shlex

import pytest

from transformer_nmt.cli import build_parser
from transformer_nmt.cli.common import rerunnable_command


@pytest.mark.parametrize("argv", [
    ["prepare", "--corpus", "files", "--src", "en", "--tgt", "de", "--out", "my data/en-de",
     "--train-tsv", "it's.tsv.gz", "--max-len", "0", "--max-ratio", "1.5",
     "--character-coverage", "0.9995", "--errors", "replace"],
    ["train", "--data", "data", "--out", "run dir", "--preset", "tiny", "--set",
     "dropout=0.2", "--set", "label_smoothing=0", "--compile", "--lr-scale", "0.5",
     "--max-time", "1h30m", "--seed", "-3", "--valid-bleu"],
    ["train", "--resume", "run"],
    ["translate", "--model", "m.pt", "--alignments", "--beam", "1"],
    ["translate", "--model", "m.pt"],
])
def test_the_recorded_command_parses_back_to_the_same_settings(argv):
    """What prepare's manifest and train's config record: parsed again, it gives the very
    Namespace it was made from, with the defaults spelled out, quoting and all."""
    args = build_parser().parse_args(argv)
    line = rerunnable_command(args, args.command)
    words = shlex.split(line)
    assert words[:2] == ["nmt", args.command]
    assert build_parser().parse_args(words[1:]) == args


def test_the_recorded_command_spells_out_the_defaults():
    args = build_parser().parse_args(["prepare", "--corpus", "bible", "--src", "en",
                                      "--tgt", "de", "--out", "data"])
    assert rerunnable_command(args, "prepare") == (
        "nmt prepare --corpus bible --src en --tgt de --out data --vocab-size 8000 "
        "--max-len 250 --max-ratio 2.5 --spm-sample 2000000 --seed 1 --errors strict")
