"""The `nmt` command itself: how it ends when things outside it go wrong, and its help
answering without torch."""

import subprocess
import sys

from import_fixtures import imported_after
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


def test_help_starts_without_torch():
    """The subcommand modules import the library inside their run_* functions, so that
    `nmt --help` and every subcommand's help answer at once."""
    code = "from transformer_nmt.cli import build_parser\nbuild_parser().format_help()"
    assert imported_after(code, ["torch", "numpy", "sentencepiece"]) == []
