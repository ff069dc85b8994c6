"""`nmt info MODEL` (cli/info.py, model_file.describe_model): what a model file, checkpoint
or safetensors directory holds, with its checksum verified."""

from __future__ import annotations

import pytest

from transformer_nmt.checksum import CHECKSUM_KEY
from transformer_nmt.cli import main
from transformer_nmt.model_file import count_parameters
from transformer_nmt.config import get_preset
from transformer_nmt.model_file import read_model_file


def info(model, capsys) -> dict[str, str]:
    assert main(["info", str(model)]) == 0
    rows = [line.split("  ", 1) for line in capsys.readouterr().out.splitlines()]
    return {label.strip(): value.strip() for label, value in rows}


def test_it_shows_what_a_checkpoint_holds(trained_model_file, capsys):
    shown = info(trained_model_file, capsys)
    payload = read_model_file(trained_model_file)
    assert shown["format"] == "training checkpoint (transformer-nmt version 1)"
    assert shown["architecture"].startswith("tiny (recorded in the model file): N=")
    assert shown["vocabulary"].startswith("64 pieces")
    assert shown["languages"] == "en -> xx"
    assert shown["training steps"] == "300"
    parameters = count_parameters(get_preset("tiny").model, 64)
    assert shown["parameters"] == f"{parameters:,} ({parameters / 1e6:.1f}M)"
    assert shown["checksum"] == f"{payload[CHECKSUM_KEY]} (verified)"


def test_it_shows_a_safetensors_directory_with_the_same_checksum(trained_model_file, tmp_path,
                                                                 capsys):
    pytest.importorskip("safetensors", reason="the safetensors extra is not installed")
    out = tmp_path / "exported"
    assert main(["export", "--model", str(trained_model_file), "--to", "safetensors",
                 str(out)]) == 0
    capsys.readouterr()
    shown = info(out, capsys)
    assert shown["format"].startswith("safetensors model directory")
    assert shown["checksum"] == info(trained_model_file, capsys)["checksum"]
    assert shown["training steps"] == "300"


def test_help_says_what_it_prints(capsys):
    with pytest.raises(SystemExit):
        main(["info", "--help"])
    text = capsys.readouterr().out
    assert "MODEL" in text and "checksum" in text and "architecture" in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "info" in capsys.readouterr().out


def test_a_missing_file_is_one_line(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing.pt")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"nmt info: error: {tmp_path / 'nothing.pt'}: no such model file; give a "
        "checkpoint_*.pt of a run directory, a model written by `nmt average`, or a "
        "directory written by `nmt export --to safetensors`")
