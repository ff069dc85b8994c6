"""Export to safetensors (export/safetensors.py, model_dir.py): the directory translates
exactly as the model file it came from, through the same commands."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from decode_fixtures import save_marian_like_model
from export_fixtures import task_sentences
from transformer_nmt.cli import main
from transformer_nmt.data.manifest import SPM_MODEL
from transformer_nmt.model_file import load_for_inference, read_model_file

pytest.importorskip("safetensors", reason="the safetensors extra is not installed")

from safetensors.torch import load_file  # noqa: E402

from transformer_nmt.export.safetensors import export_safetensors  # noqa: E402


def translate(model, source, tmp_path, name, capsys) -> str:
    out = tmp_path / name
    assert main(["translate", "--model", str(model), "--input", str(source), "--output",
                 str(out), "--beam", "3", "--precision", "fp32"]) == 0
    capsys.readouterr()
    return out.read_text()


def test_the_directory_translates_exactly_as_the_model_file(trained_model_file, tiny_data,
                                                            tmp_path, capsys):
    out = tmp_path / "exported"
    assert main(["export", "--model", str(trained_model_file), "--to", "safetensors",
                 str(out)]) == 0
    assert f"nmt translate --model {out}" in capsys.readouterr().out
    source = tmp_path / "source.en"
    source.write_text("\n".join(task_sentences(tiny_data)) + "\n")
    ours = translate(trained_model_file, source, tmp_path, "from-pt.xx", capsys)
    assert translate(out, source, tmp_path, "from-dir.xx", capsys) == ours
    assert len(set(ours.splitlines())) > 10


def test_it_records_the_source_and_stores_tied_embeddings_once(trained_model_file, tmp_path):
    out = export_safetensors(trained_model_file, tmp_path / "exported")
    config = json.loads((out / "config.json").read_text())
    assert config["preset"] == "tiny" and config["training_steps"] == 300
    assert (config["src_lang"], config["tgt_lang"]) == ("en", "xx")
    assert config["tied"] == {"src_embed.weight": "tgt_embed.weight"}
    assert "src_embed.weight" not in load_file(str(out / "model.safetensors"))
    payload = read_model_file(out)
    original = read_model_file(trained_model_file)
    assert payload["vocab"] == original["vocab"]
    # The checksum of the weights, tied names included, is the model file's.
    assert config["checksum"] == config["source_checksum"] == original["checksum"]
    assert all(payload["model"][name].equal(tensor) for name, tensor in original["model"].items())
    # An export of the export keeps the record.
    again = export_safetensors(out, tmp_path / "again")
    assert json.loads((again / "config.json").read_text())["training_steps"] == 300


def test_the_logits_bias_and_new_fields_go_along_and_load_back(tiny_data, tmp_path):
    model = save_marian_like_model(tmp_path / "model.pt", (tiny_data / SPM_MODEL).read_bytes(),
                                   64)
    out = export_safetensors(tmp_path / "model.pt", tmp_path / "exported")
    assert torch.equal(load_file(str(out / "model.safetensors"))["logits_bias"],
                       model.logits_bias)
    loaded = load_for_inference(out).model
    assert loaded.cfg == model.cfg and torch.equal(loaded.logits_bias, model.logits_bias)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    assert torch.equal(loaded(src, tgt), model(src, tgt))


def test_quantization_is_refused_for_safetensors(trained_model_file, tmp_path, capsys):
    assert main(["export", "--model", str(trained_model_file), "--to", "safetensors",
                 str(tmp_path / "out"), "--quantization", "int8"]) == 2
    assert "--quantization is for --to ctranslate2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_gets_the_users_usual_permissions(model_file, tmp_path, umask):
    # safetensors writes model.safetensors private (0600), whatever the umask.
    previous = os.umask(umask)
    try:
        out = export_safetensors(model_file, tmp_path / "model-st")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in out.iterdir()} == {
        name: 0o666 & ~umask for name in ("model.safetensors", "config.json", "spm.model")}


def test_a_full_disk_is_one_line_and_leaves_nothing(model_file, tmp_path, capsys, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def full_disk(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"part of the weights")
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: "
                              "StorageFull, message: \"No space left on device\" })")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    out = tmp_path / "out" / "model-st"
    assert main(["export", "--model", str(model_file), "--to", "safetensors", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nmt export: error: {out}: no space left on its disk (")
    assert "MiB needed" in line
    assert list(out.parent.iterdir()) == []
