"""`nmt shortlist` (cli/shortlist.py): its defaults are the library's, the shortlist it
writes is used by `nmt translate` and `nmt export` (and left out with --no-shortlist),
and data of another vocabulary is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import transformer_nmt.cli.shortlist as cli_shortlist
import transformer_nmt.data.shortlist as data_shortlist
from data_fixtures import make_split
from train_fixtures import reversal_pairs
from transformer_nmt.cli import main

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")

LINES = [source for source, _ in reversal_pairs(3, seed=5, words=(2, 8))]

pytestmark = pytest.mark.usefixtures("keep_torch_threads")


def test_the_cli_and_the_library_share_the_defaults():
    assert cli_shortlist.DEFAULT_BEST == data_shortlist.DEFAULT_BEST
    assert cli_shortlist.DEFAULT_FREQUENT == data_shortlist.DEFAULT_FREQUENT


def test_nmt_shortlist_then_translate_and_export(trained_model_file, tiny_data, tmp_path,
                                                 capsys):
    model = Path(shutil.copy(trained_model_file, tmp_path / "model.pt"))  # its own shortlist
    assert main(["shortlist", "--model", str(model), "--data", str(tiny_data),
                 "--best", "3"]) == 0
    out = capsys.readouterr().out
    assert f"wrote the shortlist {tmp_path / 'model.shortlist.npz'}" in out
    assert "counted on 240 pairs" in out and "of the 64 pieces" in out
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n")
    assert main(["translate", "--model", str(model), "--input", str(source), "--output",
                 str(tmp_path / "out.txt"), "--engine", "ctranslate2"]) == 0
    assert main(["export", "--model", str(model), "--to", "ctranslate2",
                 str(tmp_path / "ct2")]) == 0
    first = (tmp_path / "ct2" / "vmap.txt").read_text().splitlines()[0]
    assert first.startswith("\t") and "▁" in first  # the pieces' spelling
    assert "use_vmap=True" in capsys.readouterr().out
    assert main(["export", "--model", str(model), "--to", "ctranslate2", "--no-shortlist",
                 str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "vmap.txt").exists()


def test_nmt_shortlist_refuses_another_vocabulary(trained_model_file, tmp_path, capsys):
    model = Path(shutil.copy(trained_model_file, tmp_path / "model.pt"))  # its own shortlist
    make_split(tmp_path, src=[[5]], tgt=[[6]])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["vocab"]["sha256"] = "f" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert main(["shortlist", "--model", str(model), "--data", str(tmp_path)]) == 2
    assert "encoded with another vocabulary" in capsys.readouterr().err
