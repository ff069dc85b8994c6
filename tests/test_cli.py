"""The `nmt` command itself: how it ends when things outside it go wrong, and the
command line it records to be rerun."""

import shlex
import subprocess
import sys

import pytest

from transformer_nmt.cli import build_parser
from transformer_nmt.cli.common import rerunnable_command

from train_fixtures import WORDS


def test_a_reader_that_goes_away_ends_translation_quietly(tiny_model_file, tmp_path):
    """`nmt translate | head -1`: once head has its line the pipe closes; nmt must stop
    like a Unix filter, without an error message, whatever the number of workers."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{WORDS[i % len(WORDS)]} house\n" for i in range(3000)),
                      encoding="utf-8")
    for workers in ("1", "2"):
        script = (f"{sys.executable} -m transformer_nmt.cli translate --model {tiny_model_file} "
                  f"--input {source} --beam 1 --max-len-b 30 --workers {workers} | head -1; "
                  "echo \"status ${PIPESTATUS[0]}\" >&2")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=300)
        assert len(done.stdout.splitlines()) == 1
        assert done.stderr.strip().splitlines() == ["status 141"], done.stderr


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


def test_help_starts_without_torch():
    """The subcommand modules import the library inside their run_* functions, so that
    `nmt --help` and every subcommand's help answer at once."""
    script = ("import sys\nfrom transformer_nmt.cli import build_parser\n"
              "parser = build_parser()\nparser.format_help()\n"
              "print(sorted(name for name in ('torch', 'numpy', 'sentencepiece') "
              "if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
