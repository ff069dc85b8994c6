"""`nmt translate-corpus` (cli/corpus.py): its help says how to run it on a cluster, and
a missing input or model is one line that leaves no output directory behind."""

from __future__ import annotations

import pytest

from decode_fixtures import sentences
from transformer_nmt.cli import main


@pytest.mark.parametrize("what, says", [("input", "missing.en: no such file"),
                                        ("model", "missing.pt: no such model file")])
def test_a_missing_input_or_model_is_one_line(model_file, tmp_path, capsys, what, says):
    present = tmp_path / "a.en"
    present.write_text("\n".join(sentences(3)) + "\n", encoding="utf-8")
    model = tmp_path / "missing.pt" if what == "model" else model_file
    inputs = tmp_path / "missing.en" if what == "input" else present
    assert main(["translate-corpus", "--model", str(model), "--input", str(inputs),
                 "--out", str(tmp_path / "out"), "--engine", "torch"]) == 2
    error = capsys.readouterr().err
    assert says in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_help_says_how_to_run_it_under_slurm(capsys):
    with pytest.raises(SystemExit):
        main(["translate-corpus", "--help"])
    assert "--shard $SLURM_ARRAY_TASK_ID/4" in " ".join(capsys.readouterr().out.split())
