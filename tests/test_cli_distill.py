"""`nmt distill` (cli/distill.py): its help lists the stages, and a refusal is one line
with no traceback."""

from __future__ import annotations

import pytest

from distill_fixtures import copy_of, drop_record, options_for
from transformer_nmt.cli import build_parser, main


def test_a_filter_that_drops_everything_is_refused_in_one_line(distilled, tmp_path, capsys):
    out = copy_of(distilled, tmp_path)
    drop_record(out, "select")
    opts = options_for(distilled, out)
    status = main(["distill", "--teacher", opts.teachers[0], "--data", str(opts.data),
                   "--out", str(out), "--nbest", "2", "--beam", "2", "--drop", "1",
                   "--workers", "1", "--shard-lines", "100"])
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert error[-1].startswith("nmt distill: error: the filter would drop all 240 translations")
    assert "Traceback" not in "\n".join(error)


def test_help_lists_the_stages(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["distill", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for heading in ("(1) translate", "(2) select", "(3) train", "(4) shortlist", "(5) report",
                    "(6) export", "CTranslate2 in int8", "with its shortlist as vmap.txt",
                    "--export none", "--export", "--quantization", "--teacher",
                    "--mono", "--student", "--set", "--drop",
                    "--shard $SLURM_ARRAY_TASK_ID/N", "--backend ray"):
        assert heading in text, heading
